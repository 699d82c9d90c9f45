"""webshop_agentq_table's RFT and trajectory DPO rows: each method trained once, from the clone,
on this run's iteration-1 trees (the clone's 200 searches), as Agent Q's Table 1 compares
objectives on one set of search data.

    python experiments/webshop_agentq_table/baselines.py rft        # then traj_dpo; a killed run resumes

Each run is ``+experiment=webshop_<method>`` with the table study on top, so it shares the
study's search, evaluation (the 100 dev goals) and trainer (lr 3e-4, 3 epochs), and takes the
trees with ``collect.trees_from`` (which refuses a source that searched otherwise). The study's
pairs and objective are Agent Q's (product-page step pairs, step IPO): here they are put back to
the method's own, key by key, and compare's definition check runs before any model loads.

One setting is the study's, not the method's default: one example per goal (CAP). Uncapped, the
200 trees hold 367 distinct successes on 131 goals and 452 trajectory pairs on 113 goals, a fit of
about 2.4 h (RFT) and 6 h (trajectory DPO) on this AMD EPYC at the rates measured before
(NOTES.md, amendment of 2026-12-04); capped, 131 trajectories and 113 pairs, near Agent Q's 161.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from agentq import compare
from agentq.console import StdoutHandler, quiet_libraries
from agentq.layout import RunLayout

ROOT = Path(__file__).resolve().parents[2]
# Relative to the repo root, where the commands run: the saved configs must not name this machine's paths.
STUDY = Path("experiments/webshop_agentq_table")
RUN = STUDY / "runs" / "agentq"
CLONE_ADAPTER = Path("experiments/webshop_bc_scale/runs/n80/iter_001/adapter")
METHODS = {m.name: m for m in compare.METHODS if m.shares_collection == "agentq"}
OWN = ("pairs", "objective")  # what the method is: the method's experiment decides them, not the study
# Per goal: RFT's best success, trajectory DPO's best success against the worst failure.
CAP = {"rft": {"max_per_task": 1}, "traj_dpo": {"max_pairs_per_task": 1}}


def run_dir(name: str) -> Path:
    return STUDY / "runs" / name


def base_overrides(name: str) -> list[str]:
    method = METHODS[name]
    return [f"+experiment=webshop_{method.experiment}", "+study=webshop_agentq_table", *method.overrides,
            f"model.adapter={CLONE_ADAPTER}", "iterations=1", f"collect.trees_from={RUN}",
            f"paths.run_dir={run_dir(name)}"]  # fmt: skip


def restoring(alone, cfg, key: str) -> list[str]:
    """Overrides that make ``cfg``'s section ``key`` equal ``alone``'s: the study's keys the
    method does not have are deleted, the values it changed are set back."""
    mine, got = OmegaConf.select(alone, key), OmegaConf.select(cfg, key)
    out = [f"~{key}.{k}" for k in got if k not in mine]
    return out + [f"++{key}.{k}={_value(v)}" for k, v in mine.items() if k not in got or got[k] != v]


def _value(v) -> str:
    """``v`` in Hydra's override grammar (the sections restored hold scalars only)."""
    if OmegaConf.is_config(v):
        raise ValueError(f"cannot restore a nested value {v}: set it in the study instead")
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def checked(name: str) -> tuple[list[str], DictConfig]:
    """The run's overrides and its config, checked: its pairs and objective are the method's own, capped."""
    method = METHODS[name]
    args = base_overrides(name)
    alone = compare.compose_config([f"+experiment=webshop_{method.experiment}"])
    cfg = compare.compose_config(args)
    args += [o for key in OWN for o in restoring(alone, cfg, key)]
    args += [f"++pairs.{k}={_value(v)}" for k, v in CAP[name].items()]
    args += [f"resume={run_dir(name)}"] if RunLayout(run_dir(name)).config.exists() else []
    cfg = compare.compose_config(args)
    compare.check_definition(method, alone, cfg)
    own = {"pairs": OmegaConf.merge(alone.pairs, CAP[name]), "objective": alone.objective}
    for key in OWN:
        if OmegaConf.select(cfg, key) != own[key]:
            raise ValueError(f"{key} of the {name} run is not {name}'s own: {OmegaConf.select(cfg, key)}")
    return args, cfg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("method", choices=sorted(METHODS))
    name = parser.parse_args().method
    if Path.cwd().resolve() != ROOT:
        parser.error(f"run from the repo root ({ROOT}): the run's paths are relative to it")
    args, cfg = checked(name)  # refused before any model loads
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s",
                        handlers=[StdoutHandler()])  # fmt: skip
    quiet_libraries()
    from agentq.loop import run

    print(f"[baselines] {name}: {' '.join(args)}", flush=True)
    run(cfg)


if __name__ == "__main__":
    main()
