import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


@pytest.fixture
def make_cfg(tmp_path):
    """Compose the run config with overrides, as ``run.py`` would (run_dir in tmp)."""

    def _compose(*overrides: str):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose("config", overrides=[f"paths.run_dir={tmp_path / 'run'}", *overrides])

    return _compose
