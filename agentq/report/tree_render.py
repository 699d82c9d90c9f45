"""Draw a search tree (the ``tree`` of an ``iter_XXX/collect/task_*.json``) as inline SVG.

Only the part the search explored is drawn: nodes the env stepped into
(``expanded_env``) or that were visited, plus their direct children (the sampled
actions that were never tried), breadth first up to ``max_nodes``. Each box shows
the edge into the node: its command, the blended value Q (Agent Q, Eq. 10), the
visit count N, the critic score Q̂ and, on terminal nodes, the reward.

The SVG has no ``xmlns`` attribute and no external references: it is meant to be
pasted into an HTML page (HTML5 knows ``<svg>``); ``standalone=True`` adds the
namespace for a ``.svg`` file.
"""

from __future__ import annotations

import html
import math
from collections import deque
from typing import Any

BOX_W, BOX_H, H_GAP, V_GAP, MARGIN = 176, 66, 14, 34, 10
LINE_H = 14
COLOURS = {
    "success": ("#c8e6c9", "#2e7d32"),
    "failure": ("#ffcdd2", "#c62828"),
    "expanded": ("#e3f2fd", "#1565c0"),
    "unexpanded": ("#f5f5f5", "#9e9e9e"),
}


def explored(nodes: dict[int, dict[str, Any]]) -> set[int]:
    """Nodes stepped into or visited, their direct children, and the root."""
    visited = {i for i, n in nodes.items() if n.get("expanded_env", True) or n.get("visits", 0) > 0}
    keep = set(visited)
    for i in visited:
        keep.update(c for c in nodes[i].get("children", []) if c in nodes)
    root = next(i for i, n in nodes.items() if n.get("parent") is None)
    return keep | {root}


def select_nodes(
    tree: dict[str, Any], max_nodes: int
) -> tuple[list[int], dict[int, dict[str, Any]]]:
    """Ids to draw in breadth-first order (so every drawn node's parent is drawn)."""
    nodes = {int(n["id"]): n for n in tree["nodes"]}
    keep = explored(nodes)
    root = next(i for i, n in nodes.items() if n.get("parent") is None)
    order, queue = [], deque([root])
    while queue and len(order) < max_nodes:
        i = queue.popleft()
        order.append(i)
        queue.extend(c for c in nodes[i].get("children", []) if c in keep)
    return order, nodes


def node_q(node: dict[str, Any], alpha: float) -> float:
    if node.get("q") is not None:
        return float(node["q"])
    return alpha * float(node.get("q_mcts", 0.0)) + (1 - alpha) * float(
        node.get("critic_score", 0.0)
    )


def _short(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def node_lines(node: dict[str, Any], alpha: float, task_id: Any, label_chars: int) -> list[str]:
    if node.get("parent") is None:
        first = f"root (task {task_id})"
    else:
        first = _short(node.get("command") or node.get("action") or "(no command)", label_chars)
    lines = [
        first,
        f"Q={node_q(node, alpha):.3f}  N={int(node.get('visits', 0))}",
        f"critic={float(node.get('critic_score', 0.0)):.3f}",
    ]
    if node.get("terminal"):
        outcome = "success" if node.get("success") else "fail"
        lines.append(f"R={float(node.get('reward', 0.0)):.3f} {outcome}")
    return lines


def _kind(node: dict[str, Any]) -> str:
    if node.get("terminal"):
        return "success" if node.get("success") else "failure"
    if node.get("expanded_env", True) or node.get("visits", 0) > 0:
        return "expanded"
    return "unexpanded"


def layout(order: list[int], nodes: dict[int, dict[str, Any]]) -> dict[int, tuple[float, int]]:
    """(x slot, depth) per drawn node: leaves on consecutive slots in depth-first
    order, a parent centred over its first and last drawn child."""
    drawn = set(order)
    root = order[0]
    base_depth = int(nodes[root].get("depth", 0))
    position: dict[int, tuple[float, int]] = {}
    next_slot = 0.0

    def place(i: int) -> float:
        nonlocal next_slot
        kids = [c for c in nodes[i].get("children", []) if c in drawn]
        depth = int(nodes[i].get("depth", 0)) - base_depth
        if not kids:
            x = next_slot
            next_slot += 1
        else:
            xs = [place(c) for c in kids]
            x = (xs[0] + xs[-1]) / 2
        position[i] = (x, depth)
        return x

    place(root)
    return position


def render_tree_svg(
    tree: dict[str, Any], *, max_nodes: int = 40, label_chars: int = 26, standalone: bool = False
) -> str:
    """The explored part of ``tree`` as an SVG string (at most ``max_nodes`` boxes)."""
    alpha = float(tree.get("alpha", 0.5))
    order, nodes = select_nodes(tree, max_nodes)
    position = layout(order, nodes)
    slots = max(x for x, _ in position.values()) + 1
    depth = max(d for _, d in position.values()) + 1
    width = int(2 * MARGIN + slots * (BOX_W + H_GAP))
    height = int(2 * MARGIN + 20 + depth * (BOX_H + V_GAP))

    def centre(i: int) -> tuple[float, float]:
        x, d = position[i]
        return MARGIN + x * (BOX_W + H_GAP) + BOX_W / 2, MARGIN + 20 + d * (BOX_H + V_GAP)

    hidden = len(explored(nodes)) - len(order)
    title = (
        f"task {tree.get('task_id')}: {len(order)} of {len(nodes)} nodes drawn "
        f"(alpha={alpha:g}{f', {hidden} explored nodes beyond the cap' if hidden else ''})"
    )
    namespace = ' xmlns="http://www.w3.org/2000/svg"' if standalone else ""
    parts = [
        f'<svg{namespace} width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="monospace" font-size="11">',
        f'<text x="{MARGIN}" y="{MARGIN + 10}" font-size="12">{html.escape(title)}</text>',
    ]
    for i in order[1:]:  # edges first, under the boxes
        parent = nodes[i]["parent"]
        (x1, y1), (x2, y2) = centre(parent), centre(i)
        stroke = 1 + math.log1p(int(nodes[i].get("visits", 0)))
        parts.append(
            f'<line x1="{x1:.1f}" y1="{y1 + BOX_H:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="#90a4ae" stroke-width="{stroke:.2f}"/>'
        )
    for i in order:
        node = nodes[i]
        fill, border = COLOURS[_kind(node)]
        cx, top = centre(i)
        left = cx - BOX_W / 2
        dash = ' stroke-dasharray="4 3"' if _kind(node) == "unexpanded" else ""
        tooltip = html.escape(str(node.get("action") or node.get("command") or ""))
        parts.append(
            f'<g data-node="{i}"><title>{tooltip}</title>'
            f'<rect x="{left:.1f}" y="{top:.1f}" width="{BOX_W}" height="{BOX_H}" rx="5" '
            f'fill="{fill}" stroke="{border}"{dash}/>'
        )
        for k, line in enumerate(node_lines(node, alpha, tree.get("task_id"), label_chars)):
            parts.append(
                f'<text x="{left + 6:.1f}" y="{top + 15 + k * LINE_H:.1f}">{html.escape(line)}</text>'
            )
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)
