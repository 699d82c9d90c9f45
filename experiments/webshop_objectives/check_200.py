"""The 200-goal table of evaluate_200.sh, after checking each policy's reproduction.

    python experiments/webshop_objectives/check_200.py

- Reproduction: goals 0-9 were evaluated again; their commands and scores must equal the
  50-goal run's episodes of the same policy (evaluate_200.sh copied goals 10-49 from there).
- The table (table_200.md, table_200.csv): success with its Wilson 95% interval, average
  reward with its bootstrap one, and against the base goal by goal: goals won and lost (exact
  McNemar p), the paired bootstrap interval of the reward difference, identical episodes;
  and the episodes that used every step without buying.
  The scripted oracle's row is on the same goals and step budget.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

from agentq.compare import bootstrap_interval
from agentq.intervals import wilson_interval

STUDY = Path(__file__).parent
sys.path.insert(0, str(STUDY.parent / "webshop_outcome_iter"))  # its goal-by-goal comparison, not a copy
from against_the_base import against, commands  # noqa: E402

ITER = STUDY.parent / "webshop_outcome_iter" / "runs" / "agentq"
ROWS = {  # name: (label, trained on, the 50-goal run's episodes of the same policy)
    "base": ("base (the clone)", "-", STUDY / "runs/agentq/iter_000"),
    "rft": ("RFT", "29 trajectories", STUDY / "runs/rft/iter_001"),
    "traj_dpo": ("trajectory DPO", "28 trajectory pairs", STUDY / "runs/traj_dpo/iter_001"),
    "agentq": ("Agent Q pi_1", "49 step pairs", STUDY / "runs/agentq/iter_001"),
    "agentq_pi3": ("Agent Q pi_3 (webshop_outcome_iter)", "49 + 45 + 40 step pairs", ITER / "iter_003"),
}
RECHECKED = range(10)
MAX_STEPS = 15  # the study's eval.max_steps


def episodes(iteration_dir: Path) -> dict[int, dict]:
    files = (iteration_dir / "eval" / "zero_shot").glob("task_*.json")
    return {t["task_id"]: t for t in (json.loads(p.read_text())["trajectory"] for p in files)}


def reproduced(name: str, fresh: dict[int, dict]) -> bool:
    earlier = episodes(ROWS[name][2])
    same = [commands(fresh[g]) == commands(earlier[g]) and fresh[g]["score"] == earlier[g]["score"] for g in RECHECKED]
    print(f"{name}: goals 0-9 evaluated again, {sum(same)} of 10 equal to the 50-goal run's episodes")
    return all(same)


def row(label: str, trained: str, policy: dict[int, dict], base: dict[int, dict]) -> dict:
    n = len(policy)
    wins = sum(t["success"] for t in policy.values())
    lo, hi = wilson_interval(wins, n)
    rewards = [t["score"] for t in policy.values()]
    rlo, rhi = bootstrap_interval(rewards)
    a = against(policy, base, MAX_STEPS)
    entry = {"policy": label, "trained on": trained, "goals": n, "success %": f"{100 * wins / n:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]",
             "avg reward": f"{sum(rewards) / n:.3f} [{rlo:.3f}, {rhi:.3f}]", "out of steps, no purchase": a["out"]}  # fmt: skip
    if policy is base:
        return entry | {"won / lost vs base (McNemar p)": "-", "reward vs base [paired 95%]": "-", "identical to base": "-"}
    return entry | {
        "won / lost vs base (McNemar p)": f"{a['won']} / {a['lost']} ({a['p']:.2f})",
        "reward vs base [paired 95%]": f"{a['diff']:+.3f} [{a['lo']:+.3f}, {a['hi']:+.3f}]",
        "identical to base": a["same"],
    }


def oracle_row(run_dir: Path) -> dict:
    oracle = json.loads((run_dir / "oracle.json").read_text())
    played = oracle["episodes"]
    lo, hi = wilson_interval(sum(e["success"] for e in played), len(played))
    return {"policy": f"scripted oracle ({oracle['max_steps']} steps)", "trained on": "-", "goals": len(played),
            "success %": f"{100 * oracle['success_rate']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]",
            "avg reward": f"{oracle['avg_reward']:.3f}"}  # fmt: skip


def main() -> None:
    runs = {name: episodes(STUDY / "runs" / "test200" / name / "iter_000") for name in ROWS}
    runs = {name: found for name, found in runs.items() if len(found) == 200}
    if "base" not in runs:
        sys.exit("the base's 200 episodes are missing: run evaluate_200.sh first")
    if not all([reproduced(name, fresh) for name, fresh in runs.items()]):
        sys.exit("a policy did not reproduce its 50-goal episodes: no table")
    rows = [row(*ROWS[name][:2], runs[name], runs["base"]) for name in runs]
    rows.append(oracle_row(STUDY / "runs" / "test200" / "base"))
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r.get(c, "-")) for c in columns) + " |" for r in rows]
    (STUDY / "table_200.md").write_text("\n".join(lines) + "\n")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    (STUDY / "table_200.csv").write_text(buffer.getvalue())
    print("\n".join(lines))


if __name__ == "__main__":
    main()
