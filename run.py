"""Entry point: ``python run.py +experiment=textcraft_mcts_dpo [overrides]``."""

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from agentq.loop import run

    run(cfg)


if __name__ == "__main__":
    main()
