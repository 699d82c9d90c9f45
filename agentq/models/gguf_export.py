"""Write a Llama-family HF model's current weights as a GGUF file an engine can load.

The OpenVINO engine (:mod:`agentq.models.openvino_engine`) reads GGUF files, and a
trained policy (the base with each iteration's adapter merged) exists only as torch
weights. This writes those weights under the tensor names and layout of llama.cpp's
GGUF format: the architecture's sizes from the model's config, the tokenizer and chat
template copied from a template file (the embedded model's own GGUF, whose
vocabulary the policy shares).

Layout facts of the format (llama.cpp's converter): ``q_proj`` and ``k_proj`` rows
are stored in the interleaved rotary order (each head's two halves zipped), which
loaders undo; matrices are stored as ``(out, in)`` row-major like torch's, and the
reader reports the reversed shape. A tied output projection is not written.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

# HF parameter name -> GGUF tensor name (``{i}``: the block index).
_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.{i}.input_layernorm.weight": "blk.{i}.attn_norm.weight",
    "model.layers.{i}.post_attention_layernorm.weight": "blk.{i}.ffn_norm.weight",
    "model.layers.{i}.self_attn.q_proj.weight": "blk.{i}.attn_q.weight",
    "model.layers.{i}.self_attn.k_proj.weight": "blk.{i}.attn_k.weight",
    "model.layers.{i}.self_attn.v_proj.weight": "blk.{i}.attn_v.weight",
    "model.layers.{i}.self_attn.o_proj.weight": "blk.{i}.attn_output.weight",
    "model.layers.{i}.mlp.gate_proj.weight": "blk.{i}.ffn_gate.weight",
    "model.layers.{i}.mlp.up_proj.weight": "blk.{i}.ffn_up.weight",
    "model.layers.{i}.mlp.down_proj.weight": "blk.{i}.ffn_down.weight",
}
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def gguf_name(hf_name: str) -> str:
    """The GGUF tensor name of an HF Llama parameter (KeyError for names the format lacks)."""
    match = _LAYER.match(hf_name)
    key = _LAYER.sub("model.layers.{i}.", hf_name) if match else hf_name
    return _NAMES[key].format(i=match.group(1) if match else "")


def rotary_interleave(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """HF's half-split rotary rows of a q/k projection -> the format's interleaved rows.

    Per head, rows [0, d/2) and [d/2, d) are the two halves of each rotated pair;
    the format stores pair j's halves next to each other (rows 2j, 2j+1).
    """
    out_features = weight.shape[0]
    head_dim = out_features // num_heads
    return weight.reshape(num_heads, 2, head_dim // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def write_gguf(model: torch.nn.Module, template: str | Path, path: str | Path, *, quantization: str = "Q8_0") -> Path:
    """Write ``model``'s weights to ``path`` with ``template``'s tokenizer.

    Args:
        model: an HF Llama causal LM (a peft model's adapters merged first); its
            ``config`` gives the sizes written.
        template: a GGUF whose tokenizer the model uses (the embedded model's).
        path: the file to write (written to a temporary name, then renamed).
        quantization: the matrices' type (``Q8_0`` or ``F16``); norms stay F32.
    """
    import gguf

    reader = gguf.GGUFReader(str(template))
    arch = reader.fields["general.architecture"].contents()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    config = model.config
    if arch != "llama" or config.model_type != "llama":
        raise ValueError(f"write_gguf: writes Llama models, got {config.model_type!r} (template {arch!r})")
    writer = gguf.GGUFWriter(str(partial), arch)
    _copy_metadata(reader, writer, gguf)
    _write_architecture(writer, config)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if quantization == "Q8_0" else gguf.LlamaFileType.MOSTLY_F16)

    qtype = gguf.GGMLQuantizationType[quantization]
    tied = bool(getattr(config, "tie_word_embeddings", False))
    for hf_name, tensor in model.state_dict().items():
        if tied and hf_name == "lm_head.weight":
            continue
        weight = tensor.detach().to(torch.float32).cpu().numpy()
        if hf_name.endswith("q_proj.weight"):
            weight = rotary_interleave(weight, config.num_attention_heads)
        elif hf_name.endswith("k_proj.weight"):
            weight = rotary_interleave(weight, config.num_key_value_heads)
        if weight.ndim == 1:
            writer.add_tensor(gguf_name(hf_name), weight)
        else:
            data = gguf.quants.quantize(np.ascontiguousarray(weight), qtype)
            writer.add_tensor(gguf_name(hf_name), data, raw_shape=data.shape, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(path)
    return path


def _write_architecture(writer, config) -> None:
    """The sizes a loader builds the graph from, read off the HF config."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"write_gguf: rope_type {rope['rope_type']!r} is not written (only the default rotary embedding)")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float(rope.get("rope_theta", getattr(config, "rope_theta", None) or 10000.0)))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(config.vocab_size)


def _copy_metadata(reader, writer, gguf) -> None:
    """The template's general and tokenizer keys (the architecture's come from the config)."""
    for name, field in reader.fields.items():
        if not name.startswith(("general.", "tokenizer.")) or name in ("general.architecture", "general.file_type"):
            continue
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub_type)
