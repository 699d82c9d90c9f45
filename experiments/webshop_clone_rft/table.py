"""RFT from the clone's best-of-4 samples, against the clone on the same 200 test goals.

    python experiments/webshop_clone_rft/table.py [RFT run] [the base's 200-goal run]

Defaults: experiments/webshop_clone_rft/runs/rft and experiments/webshop_clone_search/runs/test200
(the clone greedy and with search on the first 200 test goals). Prints what the collection
found and writes table.md / table.csv beside this file: success with its Wilson 95% interval,
average reward with its bootstrap one, model calls and the cost per success, and against the
clone's greedy episodes goal by goal (won / lost with the exact McNemar p, the paired
bootstrap interval of the reward difference, identical episodes). The scripted oracle's row is
on the same goals and step budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from agentq.compare import (
    COSTS,
    by_goal,
    cost_per_success,
    episode_metrics,
    episodes_at,
    iteration_index,
    metric_cells,
    oracle_table_row,
    out_of_steps,
    paired,
    paired_cells,
    trained_on,
    write_rows,
)
from agentq.layout import TASK_GLOB, RunLayout, read_json
from agentq.modes import HOW_PICKED, VERIFIER, ZERO_SHOT

STUDY = Path(__file__).parent


def collection(run: Path) -> str:
    """What the best-of-N collection sampled and found on the training goals."""
    searches = [read_json(p) for p in sorted(RunLayout(run).collect(1).glob(TASK_GLOB))]
    played = [t for s in searches for t in s["trajectories"]]
    won = [t for t in played if t["success"]]
    goals = sum(any(t["success"] for t in s["trajectories"]) for s in searches)
    return (
        f"collection: {len(searches)} training goals, {len(played)} sampled episodes, {len(won)} successful "
        f"({100 * len(won) / len(played):.1f} %), {goals} goals with a success; "
        f"trained on {trained_on(run, 'last')} distinct successful trajectories"
    )


def row(label: str, run: Path, iteration: str, mode: str, max_steps: int, base: dict | None = None) -> dict:
    """A policy's row; against ``base`` (task id -> trajectory) goal by goal when given."""
    episodes = episodes_at(run, iteration_index(run, iteration), mode)
    m = episode_metrics(episodes)
    cost = cost_per_success(run, iteration, mode, episodes)
    success, reward = metric_cells(m)
    entry = {
        "row": label, "goals": m["tasks"], "success %": success, "avg reward": reward,
        "model calls / goal": f"{m['model_calls']:.1f}",
        "per success: tokens / env steps / wall s": " / ".join("-" if cost[k] is None else f"{cost[k]:.0f}" for k in COSTS),
        "out of steps, no purchase": out_of_steps((e["trajectory"] for e in episodes), max_steps),
        "won / lost vs greedy base (McNemar p)": "-", "reward vs greedy base [paired 95%]": "-",
        "identical to greedy base": "-",
    }  # fmt: skip
    if base is None:
        return entry
    a = paired({e["trajectory"]["task_id"]: e["trajectory"] for e in episodes}, base)
    entry["won / lost vs greedy base (McNemar p)"], entry["reward vs greedy base [paired 95%]"] = paired_cells(a)
    return entry | {"identical to greedy base": a["identical"]}


def main(rft: Path, base_run: Path) -> None:
    max_steps = OmegaConf.load(RunLayout(rft).config).eval.max_steps
    base = by_goal(base_run, 0, ZERO_SHOT)
    rows = [
        row("base (the clone), greedy", base_run, "base", ZERO_SHOT, max_steps),
        row("RFT on best-of-4 successes, greedy", rft, "last", ZERO_SHOT, max_steps, base),
        row(f"base + MCTS ({HOW_PICKED[VERIFIER]})", base_run, "base", VERIFIER, max_steps, base),
    ]
    oracle = oracle_table_row(rft)
    rows.append({"row": oracle["method"], "goals": oracle["tasks"], "success %": metric_cells(oracle)[0],
                 "avg reward": f"{oracle['avg_reward']:.3f}"})  # fmt: skip
    print(collection(rft))
    print(write_rows(STUDY, "table", rows))


if __name__ == "__main__":
    args = [Path(a) for a in sys.argv[1:]]
    main(*(args + [STUDY / "runs" / "rft", STUDY.parent / "webshop_clone_search" / "runs" / "test200"][len(args) :]))
