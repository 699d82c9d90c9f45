"""One Agent Q iteration from the 80-demonstration clone at c_exp 3 (arm 1), the same trees'
product-page pairs only (arm 2) and fit for 10 epochs (arm 3), a search that draws K distinct
commands (arm 4), against the clone (evaluated in arm 1's run) and against
webshop_clone80_iter3's first iteration (c_exp 1, same goals), on the 100 dev goals.

    python experiments/webshop_clone80_explore/table.py [runs folder] [control run]

Defaults: experiments/webshop_clone80_explore/runs (arm 1 in explore/, then product/,
product10/, distinct/) and experiments/webshop_clone80_iter3/runs/iter3 (an arm's rows are
left out when its run is not on this machine or not evaluated). Writes beside this file
table.md / table.csv (the oracle on the same goals and step budget; appended: where the data
came from), behaviour.md / .csv (the result each episode opened first, the options it
clicked), failures.md / .csv (what each failed purchase missed, replayed in the env),
pairs.md / .csv (on which page the pairs were made), directions.md / .csv (what the
product-page pairs chose over what) and, once evaluate_test.sh has run, test.md / .csv (the
first 200 test goals).
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
EXPLORE = "Agent Q pi_1, c_exp 3 (step IPO beta 0.1, every pair; 100 training goals), greedy"
CONTROL = "Agent Q pi_1, c_exp 1 (webshop_clone80_iter3's first iteration, same goals), greedy"
# the arms after arm 1: run folder -> (row label, pairs label)
ARMS = {
    "product": ("Agent Q pi_1, c_exp 3, product-page pairs only (arm 2), greedy", "c_exp 3, product pages only (arm 2)"),
    "product10": ("Agent Q pi_1, arm 2 fit for 10 epochs (arm 3), greedy", "c_exp 3, product pages only (arm 3)"),
    "distinct": ("Agent Q pi_1, c_exp 3, K distinct commands (arm 4), greedy", "c_exp 3, K distinct commands (arm 4)"),
    "distinct_product": (
        "Agent Q pi_1, arm 4's product-page pairs only (arm 5), greedy", "K distinct commands, product pages only (arm 5)"
    ),
}

# Arm's folder -> (what it is read against as secondary, that arm's folder): each differs from it in
# one setting (arm 4 from arm 1 in search.distinct_actions; arm 5 from arm 2 in the trees).
AGAINST = {"distinct": ("arm 1", "explore"), "distinct_product": ("arm 2", "product")}


def command(text: str) -> str:
    return parse_composite(text).command


def main(runs: Path, control: Path) -> None:
    run = runs / "explore"
    clone, explore = compare.by_goal(run, 0, ZERO_SHOT), compare.by_goal(run, 1, ZERO_SHOT)
    policies = {CLONE: clone, EXPLORE: explore}
    by_folder = {"explore": explore}  # each arm's episodes, for AGAINST
    rows = [compare.evaluated_row(CLONE, run, 0, ZERO_SHOT), compare.evaluated_row(EXPLORE, run, 1, ZERO_SHOT, clone)]
    made = {"c_exp 3, iteration 1 (arm 1)": ReplayBuffer(RunLayout(run)).examples(1)}
    for folder, (label, pairs_label) in ARMS.items():
        arm = runs / folder
        if RunLayout(arm).examples(1).exists():
            made[pairs_label] = ReplayBuffer(RunLayout(arm)).examples(1)
        if not RunLayout(arm).eval_metrics(1, ZERO_SHOT).exists():
            print(f"{arm} is not here or not evaluated yet: its dev rows are left out")
            continue
        policies[label] = by_folder[folder] = compare.by_goal(arm, 1, ZERO_SHOT)
        rows.append(compare.evaluated_row(label, arm, 1, ZERO_SHOT, clone))
        name, other = AGAINST.get(folder, (None, None))
        if other in by_folder:  # the arm that differs from it in one setting, goal by goal
            rows.append(compare.evaluated_row(f"{label}, against {name}", arm, 1, ZERO_SHOT, by_folder[other]))
    if RunLayout(control).config.exists():
        policies[CONTROL] = compare.by_goal(control, 1, ZERO_SHOT)
        rows.append(compare.evaluated_row(CONTROL, control, 1, ZERO_SHOT, clone))
        rows.append(compare.evaluated_row(f"{EXPLORE}, against c_exp 1", run, 1, ZERO_SHOT, policies[CONTROL]))
        made["c_exp 1, iteration 1 (webshop_clone80_iter3)"] = ReplayBuffer(RunLayout(control)).examples(1)
    else:
        print(f"{control} is not here: the c_exp 1 rows are left out")
    rows.append(compare.oracle_study_row(run))
    env = instantiate(OmegaConf.load(RunLayout(run).config).env.make).unwrapped  # the run's catalogue
    data = f"\nWhere the data came from:\n\n{compare.diagnostics_markdown(run)}"
    print(compare.write_rows(STUDY, "table", rows, appendix=data))
    print(compare.write_rows(STUDY, "behaviour", [behaviour_row(f"{k} (dev)", v) for k, v in policies.items()]))
    print(compare.write_rows(STUDY, "failures", [shortfall_row(f"{k} (dev)", env, v) for k, v in policies.items()]))
    print(compare.write_rows(STUDY, "pairs", [pairs_row(k, v) for k, v in made.items()]))
    print(compare.write_rows(STUDY, "directions", [directions_row(k, v, command) for k, v in made.items()]))
    test_rows(runs / "test200")


def test_rows(folder: Path) -> None:
    """test.md / .csv: the clone and each arm the rule sent to the test goals (evaluate_test.sh),
    goal by goal against the clone, with the oracle on the same 200 goals."""
    clone_run = folder / "clone"
    if not RunLayout(clone_run).eval_metrics(0, ZERO_SHOT).exists():
        print(f"{clone_run} is not here: no test rows")
        return
    clone = compare.by_goal(clone_run, 0, ZERO_SHOT)
    rows = [compare.evaluated_row(f"{CLONE} (test)", clone_run, 0, ZERO_SHOT)]
    for folder_name, (label, _) in ARMS.items():
        arm = folder / folder_name
        if RunLayout(arm).eval_metrics(0, ZERO_SHOT).exists():
            rows.append(compare.evaluated_row(f"{label} (test)", arm, 0, ZERO_SHOT, clone))
    rows.append(compare.oracle_study_row(clone_run))
    print(compare.write_rows(STUDY, "test", rows))


if __name__ == "__main__":
    args = [Path(a) for a in sys.argv[1:]]
    defaults = [STUDY / "runs", STUDY.parent / "webshop_clone80_iter3" / "runs" / "iter3"]
    main(*args, *defaults[len(args):])
