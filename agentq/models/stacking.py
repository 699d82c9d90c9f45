"""Several LoRA adapters merged in order, written as one adapter.

pi_i is the base with the adapters of iterations 1..i merged one after another
(each trained on top of the merges before it). A merge adds ``s_j B_j A_j`` to a
weight (``s_j = lora_alpha_j / r_j``), so the sum of them all is one product of
stacked factors::

    W_0 + sum_j s_j B_j A_j  =  W_0 + [s_1 B_1 | ... | s_i B_i] [A_1; ...; A_i]

a single LoRA adapter of rank ``sum_j r_j`` and scaling 1. An inference server that
takes LoRA adapters at run time (``engine=server``) serves pi_i from the unchanged
base with this one adapter. A module an adapter does not adapt contributes zero rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from peft import LoraConfig
from safetensors.torch import load_file, save_file

WEIGHTS = "adapter_model.safetensors"
FACTORS = (".lora_A.weight", ".lora_B.weight")


def adapter_chain(adapter) -> list[Path]:
    """The saved LoRA adapters ``model.adapter`` names, in merge order: none, one folder, or a
    list of them (``[<bc run>/iter_001/adapter, <run>/iter_001/adapter]`` is that run's pi_1).
    ValueError names the key if one is not a folder with ``adapter_config.json``."""
    if adapter is None:
        return []
    chain = [adapter] if isinstance(adapter, str | Path) else list(adapter)  # a list from the command line
    for item in chain:
        if not isinstance(item, str | Path) or not (Path(item).expanduser() / "adapter_config.json").is_file():
            raise ValueError(
                f"model.adapter={item!r} is not a saved LoRA adapter (a folder with adapter_config.json, "
                "such as <run>/iter_001/adapter); a list names adapters merged in order"
            )
    return [Path(item).expanduser() for item in chain]


def lora_factors(adapter: Path) -> tuple[LoraConfig, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """An adapter's config and, per adapted module, its factors ``(A, s * B)``."""
    config = LoraConfig.from_pretrained(str(adapter))
    unsupported = {
        "use_dora": config.use_dora,
        "rank_pattern": bool(config.rank_pattern),
        "alpha_pattern": bool(config.alpha_pattern),
        "bias": config.bias != "none",
        "modules_to_save": bool(config.modules_to_save),
    }
    if any(unsupported.values()):
        names = ", ".join(name for name, used in unsupported.items() if used)
        raise ValueError(f"{adapter}: cannot stack a LoRA adapter with {names} (only plain low-rank updates add up)")
    scale = config.lora_alpha / (config.r**0.5 if config.use_rslora else config.r)
    tensors = load_file(str(Path(adapter) / WEIGHTS))
    factors: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for key in tensors:
        if not key.endswith(FACTORS):
            raise ValueError(f"{adapter}: cannot stack the adapter's tensor {key!r} (only lora_A / lora_B)")
        module = key.rsplit(".", 2)[0]
        if module not in factors:
            a, b = tensors[f"{module}{FACTORS[0]}"], tensors[f"{module}{FACTORS[1]}"]
            factors[module] = (a.float(), b.float() * scale)
    return config, factors


def stack_adapters(adapters: Sequence[Path], out_dir: Path) -> Path:
    """Write the adapter equal to merging ``adapters`` in order to ``out_dir``."""
    if not adapters:
        raise ValueError("stack_adapters: no adapters to stack")
    loaded = [lora_factors(Path(adapter)) for adapter in adapters]
    modules = sorted(set().union(*(factors for _, factors in loaded)))
    shapes = {m: (a.shape[1], b.shape[0]) for _, factors in loaded for m, (a, b) in factors.items()}
    stacked = {}
    for module in modules:
        fan_in, fan_out = shapes[module]
        a_parts, b_parts = [], []
        for config, factors in loaded:
            a, b = factors.get(module, (torch.zeros(config.r, fan_in), torch.zeros(fan_out, config.r)))
            a_parts.append(a)
            b_parts.append(b)
        stacked[f"{module}{FACTORS[0]}"] = torch.cat(a_parts, dim=0).contiguous()
        stacked[f"{module}{FACTORS[1]}"] = torch.cat(b_parts, dim=1).contiguous()
    rank = sum(config.r for config, _ in loaded)
    config = loaded[-1][0]
    config.r, config.lora_alpha, config.use_rslora = rank, rank, False  # scaling 1: the s_j are in the B's
    config.target_modules = sorted({name.rsplit(".", 1)[-1] for name in modules})
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(out_dir))
    save_file(stacked, str(out_dir / WEIGHTS))
    return out_dir
