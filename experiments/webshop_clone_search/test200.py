"""The clone with and without search at inference on 200 test goals, goal by goal.

    python experiments/webshop_clone_search/test200.py [experiments/webshop_clone_search/runs/test200]

Reads the run's iteration-0 episodes of each mode (zero-shot, committed, verifier) and
writes table_200.md / table_200.csv beside this file: success with its Wilson 95% interval,
average reward with its bootstrap one, model calls per task, the cost per success, and
against zero-shot on the same goals: goals won and lost (exact McNemar p) and the paired
bootstrap interval of the reward difference. A mode still running counts the goals it
finished, and its comparison uses those goals only. The scripted oracle's row is on the
same goals and step budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from agentq.compare import (
    by_goal,
    cost_per_success,
    episode_metrics,
    episodes_at,
    metric_cells,
    oracle_table_row,
    out_of_steps,
    paired,
    paired_cells,
    write_rows,
)
from agentq.layout import RunLayout
from agentq.modes import COMMITTED, HOW_PICKED, VERIFIER, ZERO_SHOT

STUDY = Path(__file__).parent
LABELS = {
    ZERO_SHOT: "base (the clone), zero-shot",
    COMMITTED: f"base + MCTS ({HOW_PICKED[COMMITTED]})",
    VERIFIER: f"base + MCTS ({HOW_PICKED[VERIFIER]})",
}


def rows(run: Path) -> list[dict]:
    max_steps = OmegaConf.load(RunLayout(run).config).eval.max_steps
    greedy = by_goal(run, 0, ZERO_SHOT)
    found = []
    for mode, label in LABELS.items():
        episodes = episodes_at(run, 0, mode)
        if not episodes:
            continue
        m = episode_metrics(episodes)
        cost = cost_per_success(run, "base", mode, episodes) if len(episodes) == len(greedy) else {}
        success, reward = metric_cells(m)
        row = {
            "row": label, "goals": m["tasks"], "success %": success, "avg reward": reward,
            "model calls / task": f"{m['model_calls']:.1f}",
            "per success: tokens / env steps / wall s": " / ".join(
                "-" if cost.get(k) is None else f"{cost[k]:.0f}"
                for k in ("tokens_per_success", "steps_per_success", "seconds_per_success")
            ),
            "out of steps, no purchase": out_of_steps((e["trajectory"] for e in episodes), max_steps),
            "won / lost vs zero-shot (McNemar p)": "-",
            "reward vs zero-shot [paired 95%]": "-",
            "episodes identical to zero-shot's": "-",
        }  # fmt: skip
        if mode != ZERO_SHOT:
            a = paired(by_goal(run, 0, mode), greedy)
            row["won / lost vs zero-shot (McNemar p)"], row["reward vs zero-shot [paired 95%]"] = paired_cells(a)
            row["episodes identical to zero-shot's"] = a["identical"]
        found.append(row)
    oracle = oracle_table_row(run)
    found.append({"row": oracle["method"], "goals": oracle["tasks"], "success %": metric_cells(oracle)[0],
                  "avg reward": f"{oracle['avg_reward']:.3f}"})  # fmt: skip
    return found


def main(run: Path) -> None:
    print(write_rows(STUDY, "table_200", rows(run)))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else STUDY / "runs" / "test200")
