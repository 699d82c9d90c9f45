"""The goals200 setting for three iterations: the clone and pi_1..pi_N on the 100 dev goals, each
against the clone (evaluated in the same run) and against the policy before it, with the oracle on
the same goals and step budget.

    python experiments/webshop_clone80_goals200_iter3/table.py [run folder]

Default run: experiments/webshop_clone80_goals200_iter3/runs/iter3. Writes beside this file
table.md / .csv (appended: where each iteration's data came from), behaviour.md / .csv,
failures.md / .csv, pairs.md / .csv and directions.md / .csv (per iteration), and, once
evaluate_test.sh has run, test.md / .csv and test_behaviour.md / .csv against the clone's test
episodes of the goals200 study.
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
CLONE_TEST = STUDY.parent / "webshop_clone80_goals200" / "runs" / "test200" / "clone"
CLONE = "clone on 80 demonstrations, greedy"


def policy(i: int) -> str:
    if i == 0:
        return CLONE
    return f"Agent Q pi_{i}, K distinct commands, product-page pairs only (200 new training goals each iteration), greedy"


def command(text: str) -> str:
    return parse_composite(text).command


def main(run: Path) -> None:
    iterations = compare.iteration_index(run, "last")
    done = [i for i in range(iterations + 1) if RunLayout(run).eval_metrics(i, ZERO_SHOT).exists()]
    episodes = {i: compare.by_goal(run, i, ZERO_SHOT) for i in done}  # read once
    rows = [compare.evaluated_row(policy(i), run, i, ZERO_SHOT, episodes[0] if i else None) for i in done]
    rows += [compare.evaluated_row(f"{policy(i)}, against pi_{i - 1}", run, i, ZERO_SHOT, episodes[i - 1])
             for i in done if i >= 2]  # fmt: skip
    rows.append(compare.oracle_study_row(run))
    data = f"\nWhere the data came from:\n\n{compare.diagnostics_markdown(run)}"
    print(compare.write_rows(STUDY, "table", rows, appendix=data))
    env = instantiate(OmegaConf.load(RunLayout(run).config).env.make).unwrapped  # the run's catalogue
    print(compare.write_rows(STUDY, "behaviour", [behaviour_row(f"{policy(i)} (dev)", episodes[i]) for i in done]))
    print(compare.write_rows(STUDY, "failures", [shortfall_row(f"{policy(i)} (dev)", env, episodes[i]) for i in done]))
    buffer = ReplayBuffer(RunLayout(run))
    pairs = {f"iteration {i}": buffer.examples(i) for i in range(1, iterations + 1) if buffer.has_examples(i)}
    print(compare.write_rows(STUDY, "pairs", [pairs_row(k, v) for k, v in pairs.items()]))
    print(compare.write_rows(STUDY, "directions", [directions_row(k, v, command) for k, v in pairs.items()]))
    test_rows(run.parent / "test200")


def test_rows(folder: Path) -> None:
    """test.md / .csv: each policy evaluate_test.sh read on the first 200 test goals, goal by goal
    against the goals200 study's clone on the same goals, with the oracle on them; and
    test_behaviour.md / .csv of their episodes."""
    read = sorted(p for p in folder.glob("pi_*") if RunLayout(p).eval_metrics(0, ZERO_SHOT).exists())
    if not read:
        print(f"{folder} holds no test evaluation: no test rows")
        return
    episodes = {CLONE: compare.by_goal(CLONE_TEST, 0, ZERO_SHOT)} | {policy(int(p.name[3:])): compare.by_goal(p, 0, ZERO_SHOT) for p in read}
    rows = [compare.evaluated_row(f"{CLONE} (test)", CLONE_TEST, 0, ZERO_SHOT)]
    rows += [compare.evaluated_row(f"{policy(int(p.name[3:]))} (test)", p, 0, ZERO_SHOT, episodes[CLONE]) for p in read]
    rows.append(compare.oracle_study_row(CLONE_TEST))
    print(compare.write_rows(STUDY, "test", rows))
    print(compare.write_rows(STUDY, "test_behaviour", [behaviour_row(f"{k} (test)", v) for k, v in episodes.items()]))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else STUDY / "runs" / "iter3")
