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

import csv
import io
import sys
from pathlib import Path

from omegaconf import OmegaConf

from agentq.compare import (
    bootstrap_interval,
    cost_per_success,
    episode_metrics,
    episodes_at,
    oracle_table_row,
)
from agentq.intervals import mcnemar_exact
from agentq.layout import RunLayout
from agentq.modes import COMMITTED, HOW_PICKED, VERIFIER, ZERO_SHOT

STUDY = Path(__file__).parent
LABELS = {
    ZERO_SHOT: "base (the clone), zero-shot",
    COMMITTED: f"base + MCTS ({HOW_PICKED[COMMITTED]})",
    VERIFIER: f"base + MCTS ({HOW_PICKED[VERIFIER]})",
}


def by_goal(run: Path, mode: str) -> dict:
    return {e["trajectory"]["task_id"]: e for e in episodes_at(run, 0, mode) or []}


def commands(episode: dict) -> list[str]:
    return [step["command"] for step in episode["trajectory"]["steps"]]


def against(mode: dict, greedy: dict) -> dict:
    """Goals won and lost against zero-shot (exact McNemar p), the mean reward difference
    with its paired bootstrap 95% interval, and the episodes identical to zero-shot's, on the
    goals both have."""
    goals = sorted(mode.keys() & greedy.keys())
    success = {t: (mode[t]["trajectory"]["success"], greedy[t]["trajectory"]["success"]) for t in goals}
    won = sum(a and not b for a, b in success.values())
    lost = sum(b and not a for a, b in success.values())
    diff = [mode[t]["trajectory"]["score"] - greedy[t]["trajectory"]["score"] for t in goals]
    lo, hi = bootstrap_interval(diff)
    same = sum(commands(mode[t]) == commands(greedy[t]) for t in goals)
    return {"won": won, "lost": lost, "p": mcnemar_exact(won, lost), "diff": sum(diff) / len(diff), "lo": lo, "hi": hi,
            "same": same}  # fmt: skip


def rows(run: Path) -> list[dict]:
    max_steps = OmegaConf.load(RunLayout(run).config).eval.max_steps
    greedy = by_goal(run, ZERO_SHOT)
    found = []
    for mode, label in LABELS.items():
        episodes = by_goal(run, mode)
        if not episodes:
            continue
        m = episode_metrics(list(episodes.values()))
        cost = cost_per_success(run, "base", mode, list(episodes.values())) if len(episodes) == len(greedy) else {}
        row = {
            "row": label, "goals": m["tasks"],
            "success %": f"{m['success_pct']:.1f} [{m['success_ci'][0]:.1f}, {m['success_ci'][1]:.1f}]",
            "avg reward": f"{m['avg_reward']:.3f} [{m['reward_ci'][0]:.3f}, {m['reward_ci'][1]:.3f}]",
            "model calls / task": f"{m['model_calls']:.1f}",
            "per success: tokens / env steps / wall s": " / ".join(
                "-" if cost.get(k) is None else f"{cost[k]:.0f}"
                for k in ("tokens_per_success", "steps_per_success", "seconds_per_success")
            ),
            "out of steps, no purchase": sum(
                len(e["trajectory"]["steps"]) >= max_steps and e["trajectory"]["score"] == 0 for e in episodes.values()
            ),
            "won / lost vs zero-shot (McNemar p)": "-",
            "reward vs zero-shot [paired 95%]": "-",
            "episodes identical to zero-shot's": "-",
        }  # fmt: skip
        if mode != ZERO_SHOT:
            a = against(episodes, greedy)
            row["won / lost vs zero-shot (McNemar p)"] = f"{a['won']} / {a['lost']} ({a['p']:.2f})"
            row["reward vs zero-shot [paired 95%]"] = f"{a['diff']:+.3f} [{a['lo']:+.3f}, {a['hi']:+.3f}]"
            row["episodes identical to zero-shot's"] = a["same"]
        found.append(row)
    oracle = oracle_table_row(run)
    found.append({"row": oracle["method"], "goals": oracle["tasks"],
                  "success %": f"{oracle['success_pct']:.1f} [{oracle['success_ci'][0]:.1f}, {oracle['success_ci'][1]:.1f}]",
                  "avg reward": f"{oracle['avg_reward']:.3f}"})  # fmt: skip
    return found


def main(run: Path) -> None:
    table = rows(run)
    columns = list(table[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r.get(c, "-")) for c in columns) + " |" for r in table]
    (STUDY / "table_200.md").write_text("\n".join(lines) + "\n")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, restval="-")
    writer.writeheader()
    writer.writerows(table)
    (STUDY / "table_200.csv").write_text(buffer.getvalue())
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else STUDY / "runs" / "test200")
