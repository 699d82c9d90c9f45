import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def pytest_configure(config):
    # The library warnings the entry points silence, silenced here too (pytest keeps filters set
    # while it configures), so the log's warnings summary shows only what is news.
    from agentq.console import silence_warnings

    silence_warnings()


@pytest.fixture
def make_cfg(tmp_path):
    """Compose the run config with overrides, as ``run.py`` would (run_dir in tmp)."""

    def _compose(*overrides: str):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose("config", overrides=[f"paths.run_dir={tmp_path / 'run'}", *overrides])

    return _compose


def fit_tiny_dpo(
    model, tokenizer, pairs, out_dir, *, max_epochs: int, lora_dropout: float = 0.0, lightning=None, **kwargs
):
    """The tests' small preference fit: a LoRA (r 4 on q/v, ``lora_dropout``) trained by
    DPO (beta 0.5, AdamW lr 1e-2), 2 pairs per step; ``lightning`` adds Trainer options
    and ``kwargs`` go to ``agentq.training.fit.fit``."""
    import torch
    from peft import LoraConfig

    from agentq.objectives.dpo import DPOLoss
    from agentq.training.fit import fit

    return fit(
        model,
        tokenizer,
        pairs,
        objective=DPOLoss(beta=0.5),
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-2),
        lora=LoraConfig(
            r=4, lora_alpha=8, lora_dropout=lora_dropout, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
        ),
        lightning={"accelerator": "cpu", "max_epochs": max_epochs, "enable_progress_bar": False, **(lightning or {})},
        out_dir=out_dir,
        batch_size=2,
        **kwargs,
    )


class PrefillLog:
    """Records, for every prefill through the given parts' prompt caches, the prompt
    length and how many of its tokens the cache already held: two runs whose logs
    differ computed their logits from different cache states (and so, on some CPUs,
    from differently shaped kernels)."""

    def __init__(self, monkeypatch, *parts) -> None:
        self.entries: list[tuple[int, int, int]] = []
        for index, part in enumerate(parts):
            cache = part.prefix_cache
            original = cache.prefill

            def prefill(model, prompt_ids, _cache=cache, _original=original, _index=index):
                self.entries.append((_index, len(prompt_ids), _cache.cached_prefix(prompt_ids)))
                return _original(model, prompt_ids)

            monkeypatch.setattr(cache, "prefill", prefill)

    def take(self) -> list[tuple[int, int, int]]:
        entries, self.entries = self.entries, []
        return entries
