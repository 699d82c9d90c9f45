"""``python -m agentq.report <run dir | multirun dir> [--out DIR] [--wandb]``."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentq.report.collect import load_study
from agentq.report.page import write_report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentq.report", description=__doc__)
    parser.add_argument("path", type=Path, help="a run directory, or a multirun (sweep) directory")
    parser.add_argument(
        "--out", type=Path, default=None, help="output folder (default: the input folder)"
    )
    parser.add_argument(
        "--wandb", action="store_true", help="also build the W&B report (wandb-workspaces)"
    )
    parser.add_argument(
        "--entity", default=None, help="W&B entity (default: WANDB_ENTITY, the config's, the API's)"
    )
    parser.add_argument(
        "--project", default=None, help="W&B project (default: the config's logger.wandb.project)"
    )
    parser.add_argument(
        "--max-tree-nodes", type=int, default=40, help="cap on the drawn search tree"
    )
    args = parser.parse_args(argv)

    study = load_study(args.path)
    out = args.out or args.path
    files = write_report(study, out, max_tree_nodes=args.max_tree_nodes)
    print(f"{len(study.runs)} run(s) -> {files.html}, {files.markdown}, {files.png}")
    if args.wandb:
        from agentq.report.wandb_report import write_wandb_report

        spec, url = write_wandb_report(study, out, entity=args.entity, project=args.project)
        print(
            f"W&B report saved: {url}"
            if url
            else f"W&B report spec (not saved: no reachable server) -> {spec}"
        )


if __name__ == "__main__":
    main()
