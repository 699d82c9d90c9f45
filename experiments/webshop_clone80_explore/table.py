"""One Agent Q iteration from the 80-demonstration clone at c_exp 3 (arm 1), the same trees'
product-page pairs only (arm 2), against the clone (evaluated in arm 1's run) and against
webshop_clone80_iter3's first iteration (c_exp 1, same goals), on the 100 dev goals.

    python experiments/webshop_clone80_explore/table.py [arm 1 run] [arm 2 run] [control run]

Defaults: experiments/webshop_clone80_explore/runs/explore, .../runs/product and
experiments/webshop_clone80_iter3/runs/iter3 (arm 2's and the control's rows are left out when
their runs are not on this machine). Writes beside this file table.md / table.csv (the oracle on
the same goals and step budget; appended: where the data came from), behaviour.md / .csv (the
result each episode opened first, the options it clicked), failures.md / .csv (what each failed
purchase missed, replayed in the env) and pairs.md / .csv (on which page the pairs were made).
"""

from __future__ import annotations

import sys
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import OmegaConf

from agentq import compare
from agentq.data.buffer import ReplayBuffer
from agentq.layout import RunLayout
from agentq.modes import ZERO_SHOT
from envs.webshop.episodes import behaviour_row, pairs_row, shortfall_row

STUDY = Path(__file__).parent
CLONE = "clone on 80 demonstrations, greedy"
EXPLORE = "Agent Q pi_1, c_exp 3 (step IPO beta 0.1, every pair; 100 training goals), greedy"
PRODUCT = "Agent Q pi_1, c_exp 3, product-page pairs only (arm 2), greedy"
CONTROL = "Agent Q pi_1, c_exp 1 (webshop_clone80_iter3's first iteration, same goals), greedy"


def main(run: Path, product: Path, control: Path) -> None:
    clone, explore = compare.by_goal(run, 0, ZERO_SHOT), compare.by_goal(run, 1, ZERO_SHOT)
    policies = {CLONE: clone, EXPLORE: explore}
    rows = [compare.evaluated_row(CLONE, run, 0, ZERO_SHOT), compare.evaluated_row(EXPLORE, run, 1, ZERO_SHOT, clone)]
    pairs = [pairs_row("c_exp 3, iteration 1", ReplayBuffer(RunLayout(run)).examples(1))]
    if RunLayout(product).config.exists():
        policies[PRODUCT] = compare.by_goal(product, 1, ZERO_SHOT)
        rows.append(compare.evaluated_row(PRODUCT, product, 1, ZERO_SHOT, clone))
        pairs.append(pairs_row("c_exp 3, iteration 1, product pages only (arm 2)", ReplayBuffer(RunLayout(product)).examples(1)))
    else:
        print(f"{product} is not here: arm 2's rows are left out")
    if RunLayout(control).config.exists():
        policies[CONTROL] = compare.by_goal(control, 1, ZERO_SHOT)
        rows.append(compare.evaluated_row(CONTROL, control, 1, ZERO_SHOT, clone))
        rows.append(compare.evaluated_row(f"{EXPLORE}, against c_exp 1", run, 1, ZERO_SHOT, policies[CONTROL]))
        pairs.append(pairs_row("c_exp 1, iteration 1 (webshop_clone80_iter3)", ReplayBuffer(RunLayout(control)).examples(1)))
    else:
        print(f"{control} is not here: the c_exp 1 rows are left out")
    rows.append(compare.oracle_study_row(run))
    env = instantiate(OmegaConf.load(RunLayout(run).config).env.make).unwrapped  # the run's catalogue
    data = f"\nWhere the data came from:\n\n{compare.diagnostics_markdown(run)}"
    print(compare.write_rows(STUDY, "table", rows, appendix=data))
    print(compare.write_rows(STUDY, "behaviour", [behaviour_row(f"{k} (dev)", v) for k, v in policies.items()]))
    print(compare.write_rows(STUDY, "failures", [shortfall_row(f"{k} (dev)", env, v) for k, v in policies.items()]))
    print(compare.write_rows(STUDY, "pairs", pairs))


if __name__ == "__main__":
    args = [Path(a) for a in sys.argv[1:]]
    defaults = [STUDY / "runs" / "explore", STUDY / "runs" / "product", STUDY.parent / "webshop_clone80_iter3" / "runs" / "iter3"]
    main(*args, *defaults[len(args):])
