"""Read run directories into plain records for the report.

A run directory is what ``agentq.loop.run`` leaves (see :mod:`agentq.layout`):
``config.yaml``, ``summary.json``, ``iter_XXX/collect/task_*.json`` and, under
Hydra, ``.hydra/overrides.yaml``. A multirun directory holds one job directory per
sweep point (``0/``, ``1/``, ...) beside Hydra's ``multirun.yaml``.

Nothing here assumes a run finished: a job without ``summary.json`` (failed,
refused, still running) becomes a ``Run`` whose ``status`` says so, never an error.
Only the standard library and PyYAML (a Hydra dependency) are used, so reading
does not import torch.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentq.layout import TASK_GLOB, RunLayout
from agentq.modes import LEGACY_NAMES

# Keys whose values differ between any two runs and mean nothing for a comparison.
IGNORED_CONFIG_KEYS = ("paths.run_dir", "resume", "hydra")


@dataclass
class Run:
    """One run directory and what it recorded.

    ``status`` is ``complete`` (the summary has every configured iteration),
    ``partial`` (a summary, fewer iterations: killed or still running), ``refused``
    (the loop refused the config combination: ``refused.txt``), or ``no summary``
    (failed before the first evaluation, or still running).
    """

    name: str
    path: Path
    status: str
    overrides: dict[str, str] = field(
        default_factory=dict
    )  # key -> value, as typed on the command line
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    note: str = ""  # why there is no summary (refused.txt's text), if known
    wandb_ids: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.summary is not None

    @property
    def iterations(self) -> list[dict[str, Any]]:
        return list((self.summary or {}).get("iterations", []))

    @property
    def wall_seconds(self) -> float | None:
        return (self.summary or {}).get("wall_seconds")

    def final(self) -> dict[str, Any] | None:
        """The last iteration that has an evaluation (the run's result)."""
        evaluated = [it for it in self.iterations if it.get("eval")]
        return evaluated[-1] if evaluated else None

    def total_pairs(self) -> int | None:
        counts = [c for c in (num_pairs(it) for it in self.iterations) if c is not None]
        return sum(counts) if counts else None


@dataclass
class Study:
    """A single run or the jobs of a multirun, with the keys that vary between them."""

    path: Path
    kind: str  # "run", "multirun" (Hydra's sweep dir) or "folder" (any folder of run dirs)
    runs: list[Run]
    swept: list[str]  # override keys whose values differ between runs, in first-seen order
    common: dict[str, str]  # overrides every run shares

    def label(self, run: Run) -> str:
        """A short name for legends and table rows: the swept values, else the dir name."""
        parts = [f"{short_key(k)}={run.overrides[k]}" for k in self.swept if k in run.overrides]
        return f"{run.name}: " + " ".join(parts) if parts else run.name


def num_pairs(iteration: dict[str, Any]) -> int | None:
    """Training examples of an iteration (``num_pairs``; ``num_examples`` in newer summaries)."""
    for key in ("num_pairs", "num_examples"):
        if iteration.get(key) is not None:
            return int(iteration[key])
    return None


def oracle_entries(study: Study) -> list[dict[str, Any]]:
    """The distinct scripted-oracle entries of the runs' summaries (``summary["oracle"]``,
    see agentq.oracle: success on the evaluated goals in the evaluation's step budget)."""
    entries: dict[tuple, dict[str, Any]] = {}
    for run in study.runs:
        oracle = (run.summary or {}).get("oracle")
        if isinstance(oracle, dict):
            key = tuple(oracle.get(k) for k in ("env", "split", "max_steps", "num_tasks", "cache_key"))
            entries.setdefault(key, oracle)
    return list(entries.values())


def eval_metric(iteration: dict[str, Any] | None, mode: str, key: str) -> float | None:
    if not iteration:
        return None
    evaluated = iteration.get("eval") or {}
    value = evaluated.get(mode, evaluated.get(LEGACY_NAMES.get(mode, mode), {})).get(key)
    return None if value is None else float(value)


SHORT_KEYS = {
    "objective.beta": "β",
    "pairs.threshold": "θ",
    "search.num_actions": "K",
    "search.alpha": "α",
    "search.c_exp": "c_exp",
}


def short_key(key: str) -> str:
    return SHORT_KEYS.get(key, key)


def is_run_dir(path: Path) -> bool:
    layout = RunLayout(path)
    return any(p.exists() for p in (layout.summary, layout.config, path / ".hydra", layout.refused))


def load_study(path: str | Path) -> Study:
    """A run directory, a Hydra multirun directory, or any folder of run directories."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a directory")
    if is_run_dir(path) and not (path / "multirun.yaml").exists():
        runs = [load_run(path, name=path.name)]
        kind = "run"
    else:
        job_dirs = sorted(
            (p for p in path.iterdir() if p.is_dir() and is_run_dir(p)), key=_job_order
        )
        if not job_dirs:
            raise FileNotFoundError(
                f"{path} holds no run directories (no summary.json, config.yaml or .hydra)"
            )
        runs = [load_run(p, name=p.name) for p in job_dirs]
        kind = "multirun" if (path / "multirun.yaml").exists() else "folder"
    swept, common = split_overrides(runs)
    if len(runs) > 1 and not swept:  # no overrides recorded: compare the configs themselves
        swept = config_differences(runs)
        for run in runs:
            run.overrides.update({k: _format_value(flat(run.config).get(k)) for k in swept})
    return Study(path=path, kind=kind, runs=runs, swept=swept, common=common)


def _job_order(path: Path) -> tuple:
    return (0, int(path.name), "") if path.name.isdigit() else (1, 0, path.name)


def load_run(path: Path, name: str) -> Run:
    layout = RunLayout(path)
    config = _read_yaml(layout.config) or _read_yaml(path / ".hydra" / "config.yaml") or {}
    overrides = parse_overrides(_read_yaml(path / ".hydra" / "overrides.yaml") or [])
    summary = _read_json(layout.summary)
    note = ""
    if layout.refused.exists():
        note = layout.refused.read_text().strip()
    if summary is not None and not isinstance(summary.get("iterations"), list):
        summary, note = None, "summary.json has no iterations list"
    if summary is None:
        status = "refused" if layout.refused.exists() else "no summary"
    else:
        wanted = config.get("iterations")
        evaluates = any((config.get("eval") or {}).get(flag, True) for flag in ("zero_shot", "search"))
        done = max(
            (
                it.get("iteration", 0)
                for it in summary["iterations"]
                if it.get("eval") or not evaluates
            ),
            default=-1,
        )
        status = "complete" if wanted is None or done >= int(wanted) else "partial"
    return Run(
        name=name,
        path=path,
        status=status,
        overrides=overrides,
        config=config if isinstance(config, dict) else {},
        summary=summary,
        note=note,
        wandb_ids=wandb_run_ids(path),
    )


def parse_overrides(lines: list[str]) -> dict[str, str]:
    """``["+experiment=smoke", "objective.beta=0.1"]`` -> ``{"experiment": "smoke", ...}``."""
    out = {}
    for line in lines:
        key, sep, value = str(line).partition("=")
        if sep:
            out[key.lstrip("+~")] = value
    return out


def split_overrides(runs: list[Run]) -> tuple[list[str], dict[str, str]]:
    """Overrides whose value differs between runs (swept) and those all runs share."""
    keys: list[str] = []
    for run in runs:
        keys += [k for k in run.overrides if k not in keys]
    with_overrides = [r for r in runs if r.overrides]
    swept, common = [], {}
    for key in keys:
        values = {r.overrides.get(key) for r in with_overrides}
        if len(values) > 1:
            swept.append(key)
        elif with_overrides:
            common[key] = with_overrides[0].overrides[key]
    return swept, common


def flat(config: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists are leaves)."""
    if not isinstance(config, dict):
        return {prefix: config} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        out.update(flat(value, name) if isinstance(value, dict) else {name: value})
    return out


def config_differences(runs: list[Run]) -> list[str]:
    flats = [flat(r.config) for r in runs if r.config]
    if len(flats) < 2:
        return []
    keys = sorted(set().union(*flats))
    ignored = tuple(k + "." for k in IGNORED_CONFIG_KEYS)
    return [
        k
        for k in keys
        if k not in IGNORED_CONFIG_KEYS
        and not k.startswith(ignored)
        and len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flats}) > 1
    ]


def _format_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def wandb_run_ids(path: Path) -> list[str]:
    """W&B run ids from the run's local W&B folders (``offline-run-<time>-<id>``)."""
    ids = []
    for folder in sorted((path / "wandb").glob("*run-*-*")):
        match = re.fullmatch(r"(?:offline-)?run-\d{8}_\d{6}-(\w+)", folder.name)
        if match and match.group(1) not in ids:
            ids.append(match.group(1))
    return ids


def last_collect_trees(run: Run) -> list[Path]:
    """The search-result files of the run's last iteration that collected any."""
    for folder in RunLayout(run.path).collect_folders():
        files = sorted(folder.glob(TASK_GLOB))
        if files:
            return files
    return []


def largest_tree(study: Study) -> tuple[Run, Path, dict[str, Any]] | None:
    """The tree with the most nodes among the last collecting iteration of the first
    run that has one (a run that failed early may have none)."""
    for run in study.runs:
        best: tuple[int, Path, dict] | None = None
        for file in last_collect_trees(run):
            data = _read_json(file)
            tree = (data or {}).get("tree")
            if tree and tree.get("nodes") and (best is None or len(tree["nodes"]) > best[0]):
                best = (len(tree["nodes"]), file, tree)
        if best is not None:
            return run, best[1], best[2]
    return None


EPISODE_COLUMNS = ("run", "iteration", "mode", "task_id", "success", "score", "steps", "commands")


def episode_records(study: Study) -> list[dict[str, Any]]:
    """Every evaluation episode of the study's runs, one record per run, iteration, mode and
    goal (``EPISODE_COLUMNS``; ``commands`` is a JSON list). Run folders are not committed, so
    these are what lets a later comparison pair a new row with these goals, and count identical
    episodes, once the folders are gone."""
    records = []
    for run in study.runs:
        for iteration, mode, folder in RunLayout(run.path).episode_folders():
            found = []
            for file in folder.glob(TASK_GLOB):
                trajectory = (_read_json(file) or {}).get("trajectory")
                if not trajectory:
                    continue  # a partial write, or not an episode
                commands = [step["command"] for step in trajectory.get("steps", [])]
                found.append({
                    "run": run.name,
                    "iteration": iteration,
                    "mode": mode,
                    "task_id": trajectory["task_id"],
                    "success": bool(trajectory.get("success")),
                    "score": trajectory.get("score"),
                    "steps": len(commands),
                    "commands": json.dumps(commands),
                })  # fmt: skip
            records += sorted(found, key=lambda r: (type(r["task_id"]).__name__, r["task_id"]))
    return records


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
