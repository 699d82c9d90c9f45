"""Entry point: ``python run.py +experiment=textcraft_mcts_dpo [overrides]``."""

import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from agentq.console import quiet_libraries

    quiet_libraries()  # after Hydra's job logging, before anything logs or warns
    from agentq.components import IncompatibleConfig
    from agentq.loop import run

    try:
        run(cfg)
    except IncompatibleConfig as e:
        # A sweep crosses every option of the swept groups: the combinations that
        # cannot run are refused one by one (and say so in their job dir), the rest go on.
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            raise
        logging.getLogger("agentq").error("refused: %s", e)
        run_dir = Path(cfg.paths.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "refused.txt").write_text(f"{e}\n")


if __name__ == "__main__":
    main()
