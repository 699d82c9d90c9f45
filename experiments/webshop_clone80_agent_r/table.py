"""Agent-R from the 80-demonstration clone, against its good-paths-only ablation, on the same dev goals.

    python experiments/webshop_clone80_agent_r/table.py [arms' runs folder] [base recovery run] [the clone's dev run]

Defaults: experiments/webshop_clone80_agentq/runs (``agent_r``: masked SFT on the revision and good
paths of ``agentq_uct200``'s 200 UCT trees; ``agent_r_good``: the same trees' good paths only; both
runs sit beside the trees they copied), experiments/webshop_clone80_agent_r/runs/base_recovery (the
clone continuing its own failed prefixes) and experiments/webshop_bc_scale/runs/eval_n80 (the clone
greedy on the 100 dev goals, whose failures are the recovery prefixes). Writes beside this file
table.md / table.csv (greedy rows against the clone, recovery rows against the clone's recovery,
the oracle on the same goals and step budget; appended: the two arms head to head, what the
recovery episodes did past the prefix, and where the agent_r run's data came from) and
behaviour.md / behaviour.csv.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from agentq.compare import (
    by_goal,
    commands,
    diagnostics_markdown,
    evaluated_row,
    last_by_goal,
    oracle_study_row,
    paired,
    paired_cells,
    rows_markdown,
    write_rows,
)
from agentq.eval_modes import recovery_prefixes
from agentq.layout import RunLayout
from agentq.modes import RECOVERY, ZERO_SHOT
from envs.webshop.engine import BACK_TO_SEARCH, BUY_NOW, PREV_PAGE
from envs.webshop.episodes import behaviour_row

STUDY = Path(__file__).parent
BACK = (f"click[{BACK_TO_SEARCH}]", f"click[{PREV_PAGE}]")  # the clicks that undo a choice
ARMS = {
    "agent_r": "Agent-R: masked SFT on 67 revisions + 113 good paths",
    "agent_r_good": "Agent-R's ablation: the same 113 good paths only",
}


def head_to_head(agent_r: dict, good_only: dict) -> dict:
    """Agent-R against its ablation on the goals both played (by goal, as ``last_by_goal``)."""
    a = paired(agent_r, good_only)
    won_lost, reward = paired_cells(a)
    return {
        "goals": a["goals"],
        "Agent-R won / lost vs good-only (McNemar p)": won_lost,
        "reward, Agent-R - good-only [paired 95%]": reward,
        "identical": a["identical"],
    }


def after_prefix(episodes: dict, prefixes: dict, clone: dict) -> dict:
    """What recovery episodes did past the clone's prefix: went back (a click on "Back to Search"
    or "< Prev": the move a revision is about), wrote a THOUGHT, bought, and replayed the clone's
    own failed episode command for command."""
    names = ("went back", "wrote a THOUGHT", "bought", "replayed the clone's episode")
    counts = dict.fromkeys(names, 0)
    for goal, trajectory in episodes.items():
        counts["replayed the clone's episode"] += commands(trajectory) == commands(clone[goal])
        steps = trajectory["steps"][len(prefixes[goal]) :]
        taken = [step["command"] for step in steps]
        counts["went back"] += any(c in BACK for c in taken)
        counts["wrote a THOUGHT"] += any("THOUGHT" in step["action"] for step in steps)
        counts["bought"] += f"click[{BUY_NOW}]" in taken
    return counts


def main(runs_folder: Path, base_recovery: Path, clone_run: Path) -> None:
    clone, clone_recovery = last_by_goal(clone_run), by_goal(base_recovery, 0, RECOVERY)
    arms = {
        arm: {mode: last_by_goal(runs_folder / arm, mode) for mode in (ZERO_SHOT, RECOVERY)}
        for arm in ARMS
    }
    rows = [evaluated_row("clone on 80 demonstrations, greedy", clone_run, "last", ZERO_SHOT)]
    behaviours = [behaviour_row("clone on 80 demonstrations, greedy (dev)", clone)]
    for arm, label in ARMS.items():
        rows.append(evaluated_row(f"{label}, greedy", runs_folder / arm, "last", ZERO_SHOT, clone))
        behaviours.append(behaviour_row(f"{label}, greedy (dev)", arms[arm][ZERO_SHOT]))
    recovery = "clone, recovery (continues its own failed prefixes)"
    rows.append(evaluated_row(recovery, base_recovery, "base", RECOVERY))
    for arm, label in ARMS.items():
        rows.append(
            evaluated_row(f"{label}, recovery", runs_folder / arm, "last", RECOVERY, clone_recovery)
        )
    rows.append(oracle_study_row(runs_folder / "agent_r"))
    versus = [
        {"mode": mode} | head_to_head(arms["agent_r"][mode], arms["agent_r_good"][mode])
        for mode in (ZERO_SHOT, RECOVERY)
    ]
    fraction = OmegaConf.load(RunLayout(runs_folder / "agent_r").config).eval.recovery_fraction
    prefixes = recovery_prefixes(RunLayout(clone_run), sorted(clone), fraction)
    moves = [{"policy": "clone"} | after_prefix(clone_recovery, prefixes, clone)]
    moves += [{"policy": arm} | after_prefix(arms[arm][RECOVERY], prefixes, clone) for arm in ARMS]
    appendix = (
        f"\nThe two arms head to head:\n\n{rows_markdown(versus)}"
        f"\nWhat the recovery episodes did past the prefix (episodes of {len(prefixes)}):\n\n{rows_markdown(moves)}"
        f"\nWhere the data of `agent_r` came from:\n\n{diagnostics_markdown(runs_folder / 'agent_r')}"
    )
    print(write_rows(STUDY, "table", rows, appendix=appendix))
    print(write_rows(STUDY, "behaviour", behaviours))


if __name__ == "__main__":
    args = [Path(a) for a in sys.argv[1:]]
    defaults = [
        STUDY.parent / "webshop_clone80_agentq" / "runs",
        STUDY / "runs" / "base_recovery",
        STUDY.parent / "webshop_bc_scale" / "runs" / "eval_n80",
    ]
    main(*(args + defaults[len(args) :]))
