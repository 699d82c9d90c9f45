"""Does Agent Q's update fit the goals it searched? The clone and Agent Q on the same 100 dev goals,
a quarter of which the run searched and trained on.

    python experiments/webshop_clone80_fit/table.py [run]

Default: experiments/webshop_clone80_fit/runs/fit (``+study=webshop_clone80_fit``: the clone's
greedy episodes as its base, MCTS without the critic on 25 of the dev goals, step IPO at beta 0.1
on their pairs, the trained policy greedy on all 100). Writes beside this file table.md /
table.csv (each policy on all goals, on the searched goals, those that gave pairs, those
that gave none, and on the goals never searched, against the clone goal by goal; the oracle on the
same goals and step budget; appended: at the states of the pairs, which action each policy's
greedy episode took, and where the data came from) and behaviour.md / behaviour.csv.
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
    rows_markdown,
    study_row,
    write_rows,
)
from agentq.data.buffer import ReplayBuffer
from agentq.data.diagnostics import moves_at_pairs
from agentq.layout import RunLayout
from agentq.modes import ZERO_SHOT
from envs.webshop.episodes import behaviour_row

STUDY = Path(__file__).parent
TRAINED = "Agent Q without the critic: step IPO (beta 0.1) on the pairs of 25 dev goals"


def main(run: Path) -> None:
    clone, trained = by_goal(run, 0, ZERO_SHOT), last_by_goal(run)
    max_steps = int(OmegaConf.load(RunLayout(run).config).eval.max_steps)
    buffer = ReplayBuffer(RunLayout(run))
    searches, pairs = buffer.searches(1), buffer.examples(1)
    searched, with_pairs = {r.tree.task_id for r in searches}, {pair.task_id for pair in pairs}
    parts = {
        f"searched ({len(searched)} goals)": searched,
        f"searched, gave pairs ({len(with_pairs)} goals)": with_pairs,
        f"searched, gave no pair ({len(searched - with_pairs)} goals)": searched - with_pairs,
        f"never searched ({len(clone.keys() - searched)} goals)": clone.keys() - searched,
    }
    rows = [
        evaluated_row("clone on 80 demonstrations, greedy: all goals", run, "base", ZERO_SHOT),
        evaluated_row(f"{TRAINED}, greedy: all goals", run, "last", ZERO_SHOT, clone),
    ]
    for part, goals in parts.items():
        base = {g: clone[g] for g in goals}
        rows.append(study_row(f"clone: {part}", base, max_steps))
        rows.append(study_row(f"Agent Q: {part}", {g: trained[g] for g in goals}, max_steps, base))
    rows.append(oracle_study_row(run))
    fit = [
        {"policy": policy}
        | moves_at_pairs(searches, pairs, {g: commands(t) for g, t in episodes.items()})
        for policy, episodes in (("clone", clone), ("Agent Q", trained))
    ]
    appendix = (
        f"\nAt the states of the {len(pairs)} training pairs, what each policy's greedy episode did:\n\n{rows_markdown(fit)}"
        f"\nWhere the data came from:\n\n{diagnostics_markdown(run)}"
    )
    print(write_rows(STUDY, "table", rows, appendix=appendix))
    behaviours = [
        behaviour_row("clone on 80 demonstrations, greedy (dev)", clone),
        behaviour_row(f"{TRAINED} (dev)", trained),
    ]
    print(write_rows(STUDY, "behaviour", behaviours))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else STUDY / "runs" / "fit")
