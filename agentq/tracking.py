"""What an iteration leaves in W&B besides scalars: its search trees as a table,
the largest tree rendered, its training examples as a dataset artifact and its
adapter as a model artifact.

Everything here is also on disk in the run directory (the buffer's files), so a
run without W&B loses nothing; this only makes the trees and data browsable
next to the metrics. Offline runs keep the table and artifacts in their local
run folder until ``wandb sync``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentq.data.buffer import ReplayBuffer
from agentq.layout import read_json
from agentq.records.tree import SearchResult

TREE_COLUMNS = ["task", "node", "parent", "depth", "command", "q", "q_mcts", "visits", "critic_score"]
TREE_COLUMNS += ["reward", "terminal", "success"]


def wandb_runs(loggers: Sequence[Any]) -> list[Any]:
    """The W&B runs behind the configured Lightning loggers (none without W&B)."""
    from lightning.pytorch.loggers import WandbLogger

    return [logger.experiment for logger in loggers if isinstance(logger, WandbLogger)]


def tree_rows(results: Sequence[SearchResult]) -> list[list[Any]]:
    """One row per node that the env stepped into, over all of the iteration's trees."""
    rows = []
    for result in results:
        tree = result.tree
        for node in tree.nodes:
            if not node.expanded_env and node.visits == 0 and node.kept is None:
                continue  # a child no simulation entered: only its critic score is known
            q = node.blended_q(tree.alpha)
            rows.append(
                [str(tree.task_id), node.id, node.parent, node.depth, node.command, q, node.q_mcts,
                 node.visits, node.critic_score, node.reward, node.terminal, node.success]
            )
    return rows


def log_iteration(loggers: Sequence[Any], buffer: ReplayBuffer, iteration: int) -> None:
    runs = wandb_runs(loggers)
    if not runs:
        return
    import wandb

    from agentq.report.tree_render import render_tree_svg

    results = buffer.searches(iteration)
    largest = max(results, key=lambda r: len(r.tree.nodes), default=None)
    path = buffer.layout.search_diagnostics(iteration)
    diagnostics = read_json(path) if path.exists() else {"critic": {}, "pairs": {}}
    for run in runs:
        rows = tree_rows(results)
        if rows:
            # No explicit step: Lightning's training steps already advanced W&B's counter.
            logged = {"search/trees": wandb.Table(columns=TREE_COLUMNS, data=rows), "iteration": iteration}
            logged |= {f"search/critic_{k}": v for k, v in diagnostics["critic"].items() if v is not None}
            logged |= {f"search/pairs_{k}": v for k, v in diagnostics["pairs"].items()}
            logged |= {f"search/sft_{k}": v for k, v in diagnostics.get("sft", {}).items()}
            if largest is not None:
                logged["search/largest_tree"] = wandb.Html(render_tree_svg(largest.tree.to_dict()))
            run.log(logged)
        examples = buffer.layout.examples(iteration)
        if examples.exists():
            artifact = wandb.Artifact(f"examples-iter{iteration}", type="dataset", metadata={"iteration": iteration})
            artifact.add_file(str(examples))
            run.log_artifact(artifact)
        adapter = buffer.layout.adapter(iteration)
        if adapter.exists():
            artifact = wandb.Artifact(f"adapter-iter{iteration}", type="model", metadata={"iteration": iteration})
            artifact.add_dir(str(adapter))
            run.log_artifact(artifact)
