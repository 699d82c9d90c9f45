"""Arm 5 of webshop_clone80_explore on 200 training goals: the clone and pi_1 on the 100 dev
goals, goal by goal, with the oracle on the same goals and step budget.

    python experiments/webshop_clone80_goals200/table.py [run folder]

Default run: experiments/webshop_clone80_goals200/runs/goals200. Writes beside this file
table.md / .csv (appended: where the data came from), behaviour.md / .csv (the result each
episode opened first, the options it clicked), failures.md / .csv (what each failed purchase
missed, replayed in the env), pairs.md / .csv (on which page the pairs were made) and
directions.md / .csv (what the product-page pairs chose over what) and, once evaluate_test.sh
has run, test.md / .csv, test_behaviour.md / .csv and test_failures.md / .csv (the first 200
test goals).
"""

from __future__ import annotations

import sys
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import OmegaConf

from agentq import compare
from agentq.agent.action import parse_composite
from agentq.data.buffer import ReplayBuffer
from agentq.layout import RunLayout
from agentq.modes import ZERO_SHOT
from envs.webshop.episodes import behaviour_row, directions_row, pairs_row, shortfall_row

STUDY = Path(__file__).parent
CLONE = "clone on 80 demonstrations, greedy"
AGENT_Q = "Agent Q pi_1, K distinct commands, product-page pairs only (200 training goals), greedy"


def command(text: str) -> str:
    return parse_composite(text).command


def main(run: Path) -> None:
    clone, pi_1 = compare.by_goal(run, 0, ZERO_SHOT), compare.by_goal(run, 1, ZERO_SHOT)
    rows = [
        compare.evaluated_row(CLONE, run, 0, ZERO_SHOT),
        compare.evaluated_row(AGENT_Q, run, 1, ZERO_SHOT, clone),
        compare.oracle_study_row(run),
    ]
    pairs = {"200 training goals, product pages only": ReplayBuffer(RunLayout(run)).examples(1)}
    policies = {CLONE: clone, AGENT_Q: pi_1}
    env = instantiate(OmegaConf.load(RunLayout(run).config).env.make).unwrapped  # the run's catalogue
    data = f"\nWhere the data came from:\n\n{compare.diagnostics_markdown(run)}"
    print(compare.write_rows(STUDY, "table", rows, appendix=data))
    episode_tables("", "dev", env, policies)
    print(compare.write_rows(STUDY, "pairs", [pairs_row(k, v) for k, v in pairs.items()]))
    print(compare.write_rows(STUDY, "directions", [directions_row(k, v, command) for k, v in pairs.items()]))
    test_rows(run.parent / "test200", env)


def episode_tables(prefix: str, split: str, env, policies: dict) -> None:
    """<prefix>behaviour and <prefix>failures (.md / .csv) of each policy's episodes on ``split``."""
    print(compare.write_rows(STUDY, f"{prefix}behaviour", [behaviour_row(f"{k} ({split})", v) for k, v in policies.items()]))
    print(compare.write_rows(STUDY, f"{prefix}failures", [shortfall_row(f"{k} ({split})", env, v) for k, v in policies.items()]))


def test_rows(folder: Path, env) -> None:
    """test.md / .csv: the clone and pi_1 on the first 200 test goals (evaluate_test.sh), goal by
    goal, with the oracle on the same goals and step budget; ``env`` is the study's (the test runs
    are its config with eval.split=test)."""
    runs = {CLONE: folder / "clone", AGENT_Q: folder / "pi_1"}
    if not all(RunLayout(r).eval_metrics(0, ZERO_SHOT).exists() for r in runs.values()):
        print(f"{folder} does not hold both test evaluations: no test rows")
        return
    policies = {k: compare.by_goal(r, 0, ZERO_SHOT) for k, r in runs.items()}
    rows = [compare.evaluated_row(f"{CLONE} (test)", runs[CLONE], 0, ZERO_SHOT)]
    rows.append(compare.evaluated_row(f"{AGENT_Q} (test)", runs[AGENT_Q], 0, ZERO_SHOT, policies[CLONE]))
    rows.append(compare.oracle_study_row(runs[CLONE]))
    print(compare.write_rows(STUDY, "test", rows))
    episode_tables("test_", "test", env, policies)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else STUDY / "runs" / "goals200")
