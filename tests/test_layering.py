"""The layering of ``agentq/``: each package imports only packages below it.

A unit is a direct child of ``agentq/`` (a package or a module). Imports are
read with ``ast`` from every file, function-level imports included, so a
lazy import cannot hide an upward dependency. A new unit must be placed in
``LAYERS`` before its imports are allowed.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Bottom to top. A unit may import units of strictly lower layers only, so no
# two units import each other and siblings on one floor stay independent.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("records", "checks", "intervals", "modes", "console"),  # plain records and pure helpers: no torch
    ("layout",),  # the run directory's files
    ("models",),  # loading, sampling, log-probs: tensors in, tensors out
    ("agent",),  # prompt, parser, grounding, constrained decoding, the policy
    ("critic",),
    ("search",),  # MCTS, ToT, sampling baselines, committed episodes, Agent-R revision
    ("data", "objectives"),  # replay buffer and builders; pure losses
    ("training",),
    ("parallel", "report", "oracle", "validation"),
    ("components", "bookkeeping", "evaluate", "tracking"),  # config -> parts; the run's own records
    ("lanes",),  # the parts of concurrent searches
    ("collection", "eval_modes"),  # one task's search and pi_i's weights; the evaluation modes
    ("on_ray",),  # collection on Ray actors
    ("loop",),  # Algorithm 1
    ("compare",),
)
FLOOR = {unit: i for i, units in enumerate(LAYERS) for unit in units}
# Third-party packages the ground floor must not load.
HEAVY = ("torch", "transformers", "gymnasium", "lightning", "hydra", "omegaconf")


def unit_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "agentq" and len(parts) > 1 else None


def imported_modules(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path`` (``package`` resolves relative ones)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            if module == "agentq":  # ``from agentq import loop`` imports agentq.loop
                found += [(node.lineno, f"agentq.{alias.name}") for alias in node.names]
    return found


def violations(root: Path) -> list[str]:
    """Every import in ``root/agentq`` that does not point strictly down, and every
    import of agentq from ``root/envs``."""
    problems = []
    for path in sorted((root / "agentq").rglob("*.py")):
        relative = path.relative_to(root).with_suffix("")
        package = ".".join(relative.parts[:-1])
        unit = relative.parts[1]
        if unit == "__init__":
            continue
        if unit not in FLOOR:
            problems.append(f"{path.relative_to(root)}: agentq.{unit} is not placed in LAYERS")
            continue
        for line, module in imported_modules(path, package):
            target = unit_of(module)
            if target is None or target == unit:
                continue
            if target not in FLOOR or FLOOR[target] >= FLOOR[unit]:
                problems.append(
                    f"{path.relative_to(root)}:{line}: agentq.{unit} (floor {FLOOR[unit]}) imports "
                    f"{module} (floor {FLOOR.get(target, '?')})"
                )
    for path in sorted((root / "envs").rglob("*.py")):
        for line, module in imported_modules(path, ".".join(path.relative_to(root).parts[:-1])):
            if module == "agentq" or module.startswith("agentq."):
                problems.append(f"{path.relative_to(root)}:{line}: envs import nothing of agentq ({module})")
    return problems


def test_every_import_points_down():
    assert violations(ROOT) == []


def test_every_unit_is_placed():
    units = {p.stem if p.is_file() else p.name for p in (ROOT / "agentq").iterdir()}
    units = {u for u in units if not u.startswith(("_", ".")) and u != "py.typed"}
    units = {u for u in units if (ROOT / "agentq" / u).is_dir() or (ROOT / "agentq" / f"{u}.py").is_file()}
    assert units - set(FLOOR) == set()
    assert len(FLOOR) == sum(len(units) for units in LAYERS), "a unit is placed twice"


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "envs").mkdir(exist_ok=True)
    return tmp_path


def test_an_upward_import_is_caught(tmp_path):
    root = _tree(
        tmp_path,
        {
            "agentq/records/tree.py": "from agentq.models.sampling import Sample\n",
            "agentq/models/sampling.py": "from ..records import tree\n",  # relative, downward: allowed
            "agentq/search/mcts.py": "def f():\n    import agentq.loop\n",  # lazy, upward
            "agentq/newthing.py": "import os\n",
            "agentq/critic/judge.py": "from agentq import search as s\n",
            "envs/toy/env.py": "from agentq.records.tree import Tree\n",
        },
    )
    problems = violations(root)
    assert len(problems) == 5, problems
    assert "agentq/records/tree.py:1: agentq.records (floor 0) imports agentq.models.sampling (floor 2)" in problems
    assert any(p.startswith("agentq/search/mcts.py:2:") and "agentq.loop" in p for p in problems)
    assert any("agentq.newthing is not placed" in p for p in problems)
    assert any(p.startswith("agentq/critic/judge.py:1:") and "agentq.search" in p for p in problems)
    assert any(p.startswith("envs/toy/env.py:1:") for p in problems)


def test_a_sibling_import_is_caught(tmp_path):
    root = _tree(tmp_path, {"agentq/data/buffer.py": "from agentq.objectives.dpo import DPOLoss\n"})
    assert len(violations(root)) == 1


def test_records_load_no_heavy_library():
    code = (
        "import sys, pkgutil, importlib, agentq.records as r\n"
        "for m in pkgutil.iter_modules(r.__path__): importlib.import_module(f'agentq.records.{m.name}')\n"
        "import agentq.checks, agentq.intervals\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
