"""Reports over run directories: learning curves, sweep tables, a search tree.

    python -m agentq.report <run dir | multirun dir> [--out DIR] [--wandb]

writes ``report.html`` (self-contained: plots as embedded PNGs, the tree as inline
SVG), ``report.md`` (the tables), ``report.png`` (the learning curves) and
``tree.svg``; ``--wandb`` also builds the comparison as a W&B report
(``wandb_report.json``, saved to the server when one is reachable).
"""

from agentq.report.collect import Run, Study, load_study
from agentq.report.page import ReportFiles, write_report

__all__ = ["ReportFiles", "Run", "Study", "load_study", "write_report"]
