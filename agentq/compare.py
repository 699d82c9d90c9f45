"""The comparison table of the papers, from one command.

    python -m agentq.compare --env textcraft [--out DIR] [hydra overrides ...] [agentq:override ...]

runs, one after the other and on the same held-out tasks, the experiments
``<env>_mcts_dpo``, ``<env>_rft``, ``<env>_traj_dpo``, ``<env>_agent_r`` and
``<env>_tot_bfs`` (plus best-of-N with the MCTS experiment's settings), then
writes ``table.md`` and ``table.csv`` in Agent Q's layout (docs/method.md §5) with
Agent-R and the search baselines below it. Every run lives in its own folder
under ``<out>/runs`` (git-ignored: trees and adapters are large); a killed
comparison started again resumes each run where it stopped and skips finished ones.
Overrides go to every run, except those prefixed by a method's name
(``agentq:objective=ipo``), which go to that run only; a study or override that
would change what a method is (RFT's SFT, trajectory DPO's pairs) is refused.

Rows read the evaluation episodes the runs wrote, so every number can be traced
to a file: success rate with a Wilson 95% interval, average reward with a
percentile-bootstrap 95% interval, and the model calls per task (the budget).
The last row is the scripted oracle on the same goals in the same step budget
(the agentq run's ``oracle.json``): below 95% the protocol, not the agent, is
what the table measures (docs/method.md §8).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from agentq.console import StdoutHandler, quiet_libraries
from agentq.data.buffer import ReplayBuffer
from agentq.data.diagnostics import SFT_SOURCES
from agentq.evaluate import aggregate, milestone_shares
from agentq.intervals import mcnemar_exact, wilson_interval
from agentq.layout import TASK_GLOB, RunLayout
from agentq.modes import COMMITTED, HOW_PICKED, RECOVERY, VERIFIER, ZERO_SHOT, seconds_per_success
from agentq.records.tree import SearchStats

CONF = Path(__file__).resolve().parent.parent / "conf"
NOT_EVALUATED = "-"


@dataclass(frozen=True)
class Method:
    """One run of the comparison: an experiment plus what the table needs from it."""

    name: str
    experiment: str  # suffix of conf/experiment/<env>_<suffix>.yaml
    overrides: tuple[str, ...] = ()
    # The method whose first iteration searches exactly as this one would (same search,
    # seed and base policy): reuse its trees instead of searching again, so the
    # objectives are compared on the same data, as in the papers' tables.
    shares_collection: str | None = None
    # Set for a method that can be the study's anchor: its overrides when it is. The
    # anchor's run evaluates the base policy and writes the oracle row for every row.
    as_anchor: tuple[str, ...] | None = None
    # What the method is, which no study or shared override may change: RFT is SFT on
    # successful trajectories, trajectory DPO is DPO on whole trajectories. Agent Q's
    # step objective (DPO, IPO, conservative DPO) is one of its settings; its step pairs are not.
    defined_by: tuple[str, ...] = ("pairs._target_", "objective._target_")


# Trained methods skip the base evaluation and search at inference: the anchor run
# does both once for everyone.
TRAINED_ONLY = ("eval.base=false", "eval.search=false")
SEARCH_ONLY = ("iterations=0", "eval.zero_shot=false")
# Recovery (Agent-R Table 3) continues the base policy's failed greedy episodes,
# taken from the anchor run's iteration 0 for every method.
RECOVERY_FROM_ANCHOR = ("eval.recovery=true", "eval.recovery_from={anchor}")
AGENT_R = (*TRAINED_ONLY, *RECOVERY_FROM_ANCHOR)
METHODS = (
    Method("agentq", "mcts_dpo", as_anchor=("eval.recovery=true",), defined_by=("pairs._target_",)),
    Method("rft", "rft", TRAINED_ONLY, shares_collection="agentq"),
    Method("traj_dpo", "traj_dpo", TRAINED_ONLY, shares_collection="agentq"),
    # Agent-R collects with its own search (plain UCT on the env's reward), not Agent Q's
    # trees. Without an agentq run it is the anchor: base rows zero-shot and in recovery.
    Method("agent_r", "agent_r", AGENT_R, as_anchor=("eval.search=false", "eval.recovery=true")),
    # Agent-R's ablation: SFT on the good paths of Agent-R's own trees, no revisions.
    Method("agent_r_good", "agent_r", (*AGENT_R, "pairs=good_only"), shares_collection="agent_r"),
    Method("tot_bfs", "tot_bfs", SEARCH_ONLY, defined_by=()),  # search only: nothing trained
    Method("best_of_n", "base", (*SEARCH_ONLY, "search=best_of_n"), defined_by=()),
)
SCOPE = ":"  # "agentq:objective=ipo" overrides the agentq run only
ANCHOR = "anchor"  # the method of a base-policy row: the study's anchor run


def anchor_of(methods) -> Method:
    """The run that evaluates the base policy for the study: the first method that can."""
    for method in methods:
        if method.as_anchor is not None:
            return method
    raise ValueError(
        f"a comparison needs one of {[m.name for m in METHODS if m.as_anchor is not None]}: "
        "its run gives the base rows, the oracle row and the recovery prefixes"
    )


@dataclass(frozen=True)
class Row:
    label: str
    method: str
    iteration: str  # "base" (0) or "last"
    mode: str  # one of agentq.modes.MODES


def _row(label: str, method: str, iteration: str, mode: str) -> Row:
    """A "with search" row says in its label how it picked its answer."""
    return Row(f"{label} ({HOW_PICKED[mode]})" if mode in HOW_PICKED else label, method, iteration, mode)


ROWS = (  # Agent Q Table 1's order, then Agent-R and the search baselines
    _row("base", ANCHOR, "base", ZERO_SHOT),
    _row("RFT", "rft", "last", ZERO_SHOT),
    _row("trajectory DPO", "traj_dpo", "last", ZERO_SHOT),
    _row("Agent Q (zero-shot)", "agentq", "last", ZERO_SHOT),
    _row("base + MCTS", ANCHOR, "base", COMMITTED),
    _row("Agent Q + MCTS", "agentq", "last", COMMITTED),
    _row("base + MCTS", ANCHOR, "base", VERIFIER),
    _row("Agent Q + MCTS", "agentq", "last", VERIFIER),
    _row("Agent-R (zero-shot)", "agent_r", "last", ZERO_SHOT),
    _row("Agent-R, good paths only (zero-shot)", "agent_r_good", "last", ZERO_SHOT),
    _row("base + ToT-BFS", "tot_bfs", "base", VERIFIER),
    _row("base + best-of-N", "best_of_n", "base", VERIFIER),
    _row("base, recovery", ANCHOR, "base", RECOVERY),
    _row("Agent Q, recovery", "agentq", "last", RECOVERY),
    _row("Agent-R, recovery", "agent_r", "last", RECOVERY),
    _row("Agent-R, good paths only, recovery", "agent_r_good", "last", RECOVERY),
)


def run_methods(out: Path, planned: dict[str, tuple[list[str], object]], methods=METHODS) -> None:
    """Run each method not finished before, on the configs ``plan_runs`` composed and checked."""
    from agentq.loop import run

    chosen = {m.name for m in methods}
    for method in methods:
        run_dir = out / "runs" / method.name
        if method.name not in planned:
            print(f"[compare] {method.name}: finished before, skipped", flush=True)
            continue
        if method.shares_collection in chosen:
            share_collection(out / "runs" / method.shares_collection, run_dir)
        args, cfg = planned[method.name]
        print(f"[compare] {method.name}: {' '.join(args)}", flush=True)
        run(cfg)
        (run_dir / "done").write_text("")


def plan_runs(env: str, out: Path, overrides: list[str], methods=METHODS) -> dict[str, tuple[list[str], object]]:
    """The overrides and composed config of every unfinished run, all checked before the
    first model loads; ValueError names what is wrong."""
    anchor = anchor_of(methods)
    shared, scoped = split_overrides(overrides, methods)
    planned = {}
    for method in methods:
        run_dir = out / "runs" / method.name
        if (run_dir / "done").exists():
            continue
        own = [f"+experiment={env}_{method.experiment}", *method_overrides(method, anchor, out)]
        args = [*own, *shared, *scoped[method.name], f"paths.run_dir={run_dir}"]
        args += [f"resume={run_dir}"] if RunLayout(run_dir).config.exists() else []
        cfg = compose_config(args)
        check_definition(method, compose_config(own), cfg)
        planned[method.name] = (args, cfg)
    return planned


def compose_config(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides)


def split_overrides(overrides: list[str], methods) -> tuple[list[str], dict[str, list[str]]]:
    """The overrides every run gets, and those scoped to one run by its method's name
    (``agentq:objective=ipo``)."""
    names = {m.name for m in METHODS}
    shared, scoped = [], {m.name: [] for m in methods}
    for override in overrides:
        scope, _, rest = override.partition(SCOPE)
        if rest and scope in names:
            if scope not in scoped:
                raise ValueError(f"{override!r} is scoped to {scope}, which is not among the chosen methods")
            scoped[scope].append(rest)
        else:
            shared.append(override)
    return shared, scoped


def check_definition(method: Method, alone, cfg) -> None:
    """Refuse a config in which a study or a shared override changed what the method is
    (a study choosing IPO for Agent Q would otherwise turn RFT into IPO on the same table)."""
    for key in method.defined_by:
        mine, got = OmegaConf.select(alone, key), OmegaConf.select(cfg, key)
        if mine != got:
            raise ValueError(
                f"{key} of the {method.name} run is {got}, but {method.name} is {mine}: a study or a shared "
                f"override changed it. Scope a setting to one run instead, e.g. agentq{SCOPE}objective=ipo"
            )


def method_overrides(method: Method, anchor: Method, out: Path) -> list[str]:
    """The method's own overrides in a study whose anchor is ``anchor``. The anchor's run is named
    as ``paths.run_dir`` names every run, relative to where the study runs when ``out`` is: a saved
    config then reproduces from another checkout."""
    own = method.as_anchor if method is anchor else method.overrides
    return [o.format(anchor=out / "runs" / anchor.name) for o in own]


def share_collection(source: Path, run_dir: Path) -> None:
    """Copy the first iteration's search results of ``source`` into ``run_dir``
    (the loop skips tasks already collected)."""
    target = RunLayout(run_dir).collect(1)
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(RunLayout(source).collect(1).glob(TASK_GLOB)):
        if not (target / path.name).exists():
            shutil.copy2(path, target / path.name)


def bootstrap_interval(values, resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of a mean."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    means = rng.choice(values, size=(resamples, values.size), replace=True).mean(axis=1)
    return (float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5)))


def iteration_index(run_dir: Path, iteration: str | int) -> int:
    """0 for the base policy ("base"), the run's last iteration ("last": its config's
    ``iterations``), or the iteration given by number (a per-iteration curve's rows)."""
    if isinstance(iteration, int):
        return iteration
    return 0 if iteration == "base" else int(OmegaConf.load(RunLayout(run_dir).config).iterations)


def read_episodes(run_dir: Path, iteration: str | int, mode: str) -> list[dict] | None:
    """The evaluation episodes of a run's ``"base"``, ``"last"`` or numbered iteration, or None if not evaluated."""
    if not RunLayout(run_dir).config.exists():
        return None
    return episodes_at(run_dir, iteration_index(run_dir, iteration), mode)


def episodes_at(run_dir: Path, index: int, mode: str) -> list[dict] | None:
    """The evaluation episodes of iteration ``index`` (0: the base policy), or None if not evaluated."""
    files = sorted(RunLayout(run_dir).episodes(index, mode, legacy=True).glob(TASK_GLOB))
    return [json.loads(p.read_text()) for p in files] or None


def outcome_metrics(trajectories) -> dict:
    """Success with its Wilson 95% interval and average reward with its bootstrap one, over
    trajectories (or the oracle's episodes: anything with ``success`` and ``score``)."""
    trajectories = list(trajectories)
    success = [bool(t["success"]) for t in trajectories]
    reward = [float(t["score"]) for t in trajectories]
    s_lo, s_hi = wilson_interval(sum(success), len(success))
    return {
        "tasks": len(trajectories),
        "success_pct": 100 * sum(success) / len(success),
        "success_ci": (100 * s_lo, 100 * s_hi),
        "avg_reward": sum(reward) / len(reward),
        "reward_ci": bootstrap_interval(reward),
    } | milestone_shares(t.get("milestone") for t in trajectories)


def episode_metrics(episodes: list[dict]) -> dict:
    """``outcome_metrics`` of the episodes' trajectories, and the model calls per task."""
    return outcome_metrics(e["trajectory"] for e in episodes) | {"model_calls": model_calls(episodes)}


def model_calls(episodes: list[dict]) -> float:
    """Model calls per task: the search budget the episodes spent."""
    return sum(SearchStats.from_dict(e["stats"]).model_calls for e in episodes) / len(episodes)


def by_goal(run_dir: Path, index: int, mode: str) -> dict:
    """Iteration ``index``'s evaluation episodes of ``mode`` by goal (task id -> trajectory); empty if none."""
    return {e["trajectory"]["task_id"]: e["trajectory"] for e in episodes_at(run_dir, index, mode) or []}


def last_by_goal(run_dir: Path, mode: str = ZERO_SHOT) -> dict:
    """``by_goal`` of the run's last iteration: the policy it ended with."""
    return by_goal(run_dir, iteration_index(run_dir, "last"), mode)


def recorded_by_goal(episodes_csv: Path, run: str, iteration: int, mode: str = ZERO_SHOT) -> dict:
    """``by_goal`` read from a committed ``episodes.csv`` (``python -m agentq.report``) instead of a
    run folder, which does not outlive its machine: task id -> each episode's success, score and
    commands, what ``paired`` and ``study_row`` read. A decimal id reads back as an int (WebShop,
    TextCraft and OpenTable ids are ints, ScienceWorld's are names). Raises if there are none."""
    with episodes_csv.open(newline="") as f:
        wanted = (run, str(iteration), mode)
        rows = [r for r in csv.DictReader(f) if (r["run"], r["iteration"], r["mode"]) == wanted]
    if not rows:
        raise ValueError(f"{episodes_csv}: no {mode} episodes of run {run!r} at iteration {iteration}")
    trajectories = {}
    for r in rows:
        task_id = int(r["task_id"]) if r["task_id"].isdecimal() else r["task_id"]
        steps = [{"command": c} for c in json.loads(r["commands"])]
        trajectories[task_id] = {"task_id": task_id, "success": r["success"] == "True", "score": float(r["score"]), "steps": steps}
    return trajectories


def commands(trajectory: dict) -> list[str]:
    return [step["command"] for step in trajectory["steps"]]


def paired(policy: dict, base: dict) -> dict:
    """Two policies on the goals both played (task id -> trajectory, as ``by_goal``): the goals
    only ``policy`` solved (won) and only ``base`` solved (lost) with the exact McNemar p, the
    mean reward difference with its paired bootstrap 95% interval, and the episodes whose
    commands equal the base's."""
    goals = sorted(policy.keys() & base.keys())
    if not goals:
        raise ValueError("the two policies played no goal in common")
    won = sum(policy[g]["success"] and not base[g]["success"] for g in goals)
    lost = sum(base[g]["success"] and not policy[g]["success"] for g in goals)
    diff = [policy[g]["score"] - base[g]["score"] for g in goals]
    lo, hi = bootstrap_interval(diff)
    return {
        "goals": len(goals), "won": won, "lost": lost, "p": mcnemar_exact(won, lost),
        "diff": sum(diff) / len(diff), "lo": lo, "hi": hi,
        "identical": sum(commands(policy[g]) == commands(base[g]) for g in goals),
    }  # fmt: skip


def paired_cells(a: dict) -> tuple[str, str]:
    """``paired``'s result as two table cells: won / lost (p), and the reward difference [95%]."""
    return f"{a['won']} / {a['lost']} ({a['p']:.2f})", f"{a['diff']:+.3f} [{a['lo']:+.3f}, {a['hi']:+.3f}]"


def out_of_steps(trajectories, max_steps: int) -> int:
    """Episodes that used the whole step budget and earned nothing (never bought, booked, crafted)."""
    return sum(len(t["steps"]) >= max_steps and t["score"] == 0 for t in trajectories)


def cost_per_success(run_dir: Path, iteration: str | int, mode: str, episodes: list[dict]) -> dict[str, float | None]:
    """What the row spent on all its tasks over the ones it solved: policy tokens, env
    steps (the episodes' own) and wall seconds (the mode's evaluation phase); None
    when nothing was solved or the run did not record it."""
    metrics = aggregate(episodes)
    seconds_file = RunLayout(run_dir).seconds(iteration_index(run_dir, iteration))
    seconds = json.loads(seconds_file.read_text()).get(f"eval_{mode}") if seconds_file.exists() else None
    return {
        "tokens_per_success": metrics.get("policy_tokens_per_success"),
        "steps_per_success": metrics.get("steps_per_success"),
        "seconds_per_success": seconds_per_success(seconds, metrics),
    }


def trained_on(run_dir: Path, iteration: str) -> int | str:
    """How many training examples the evaluated policy was trained on ("-" for the base policy).
    Read from the buffer, not summary.json: a run killed mid-training has a stale summary."""
    if iteration == "base" or not RunLayout(run_dir).config.exists():
        return NOT_EVALUATED
    buffer = ReplayBuffer(RunLayout(run_dir))
    index = iteration_index(run_dir, iteration)
    return buffer.num_examples(index) if buffer.has_examples(index) else NOT_EVALUATED


def table_rows(out: Path, methods=METHODS) -> list[dict]:
    """One entry per row of ``ROWS`` whose method is among ``methods``."""
    anchor = anchor_of(methods).name
    names = {m.name for m in methods} | {ANCHOR}
    rows = []
    for row in (r for r in ROWS if r.method in names):
        method = anchor if row.method == ANCHOR else row.method
        run_dir = out / "runs" / method
        episodes = read_episodes(run_dir, row.iteration, row.mode)
        entry = {"method": row.label, "source": f"{method}/{row.iteration}/{row.mode}"}
        entry["examples"] = trained_on(run_dir, row.iteration)
        if episodes is None:
            rows.append(entry | {"tasks": 0})
            continue
        rows.append(entry | episode_metrics(episodes) | cost_per_success(run_dir, row.iteration, row.mode, episodes))
    rows.append(oracle_table_row(out / "runs" / anchor))
    return rows


ORACLE_LABEL = "scripted oracle"  # agentq.oracle.LABEL (that module imports this one)


def oracle_table_row(run_dir: Path) -> dict:
    """The scripted oracle on the goals and step budget the runs were evaluated on
    (``oracle.json``, written by the loop, see agentq.oracle): the protocol's ceiling.
    It also carries the env's milestone names (``milestone_names``, empty if none)."""
    entry = {"method": ORACLE_LABEL, "source": f"{run_dir.name}/oracle", "examples": NOT_EVALUATED}
    path = RunLayout(run_dir).oracle
    if not path.exists():
        return entry | {"tasks": 0}
    oracle = json.loads(path.read_text())
    episodes = oracle["episodes"]
    entry["method"] = f"{ORACLE_LABEL} ({oracle['split']}, {oracle['max_steps']} steps)"
    entry["milestone_names"] = oracle.get("milestones", [])
    if not episodes:
        return entry | {"tasks": 0}
    return entry | outcome_metrics(episodes) | {"model_calls": 0.0}


COSTS = ("tokens_per_success", "steps_per_success", "seconds_per_success")


def cost_cell(row: dict) -> str:
    """``cost_per_success`` as one cell, ``tokens / steps / seconds``; a dash for what is unknown."""
    return " / ".join(NOT_EVALUATED if row.get(k) is None else f"{row[k]:.0f}" for k in COSTS)


def to_markdown(rows: list[dict]) -> str:
    lines = [
        "| method | success % [95% CI] | avg reward [95% CI] | tasks | model calls / task "
        "| per success: policy tokens / env steps / wall s | trained on | source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r["tasks"]:
            dash = NOT_EVALUATED
            lines.append(f"| {r['method']} | {dash} | {dash} | 0 | {dash} | {dash} | {r['examples']} | {r['source']} |")
            continue
        lines.append(
            f"| {r['method']} | {_cells(r)} | {r['tasks']} | {r['model_calls']:.1f} | {cost_cell(r)} "
            f"| {r['examples']} | {r['source']} |"
        )
    return "\n".join(lines) + "\n"


def _cells(r: dict) -> str:
    """A row's success and average reward with their intervals, as the table prints them."""
    return " | ".join(metric_cells(r))


def metric_cells(r: dict) -> tuple[str, str]:
    """``episode_metrics``' success % and average reward, each with its 95% interval."""
    return (
        f"{r['success_pct']:.1f} [{r['success_ci'][0]:.1f}, {r['success_ci'][1]:.1f}]",
        f"{r['avg_reward']:.3f} [{r['reward_ci'][0]:.3f}, {r['reward_ci'][1]:.3f}]",
    )


def milestones_markdown(rows: list[dict], names: list[str]) -> str:
    """How far each row's episodes got, for an env that names its milestones (``names``, from
    the run's oracle.json; envs/contract.py): episodes that reached each one, and the mean
    index of the furthest; empty when the env has none or no episode recorded them."""
    rows = [r for r in rows if "avg_milestone" in r]
    if not names or not rows:
        return ""
    lines = [
        "| method | tasks | " + " | ".join(f"reached: {name}" for name in names[1:]) + f" | mean furthest (0-{len(names) - 1}) |",
        "|---|---|" + "---|" * len(names),
    ]
    for r in rows:
        counts = " | ".join(str(round(r.get(f"reached_milestone_{k}", 0.0) * r["tasks"])) for k in range(1, len(names)))
        lines.append(f"| {r['method']} | {r['tasks']} | {counts} | {r['avg_milestone']:.2f} |")
    return "\n".join(lines) + "\n"


def diagnostics_markdown(run_dir: Path) -> str:
    """Per iteration of the anchor run: where its training data came from, how well the
    critic agreed with the tree (``iter_*/search.json``, agentq.data.diagnostics), and the
    zero-shot evaluation of the policy it ended with (iteration 0: the base policy); empty
    when the run has no summary yet."""
    summary = RunLayout(run_dir).summary
    if not summary.exists():
        return ""
    lines = [
        "| iteration | examples | outcome-backed pairs | of which chose the lower return | critic-only pairs "
        "| pairs with an untried action | pairs choosing a later / an earlier listed action "
        "| critic tau vs backed-up Q (nodes) | critic top-1 | critic tau vs first returns (nodes) "
        "| SFT: revisions judged / fallback / good paths / good paths that succeeded / RFT successes "
        "| zero-shot success % [95% CI] | avg reward [95% CI] |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    dash = NOT_EVALUATED
    for it in json.loads(summary.read_text())["iterations"]:
        episodes = episodes_at(run_dir, it["iteration"], ZERO_SHOT)
        evaluated = _cells(episode_metrics(episodes)) if episodes else f"{dash} | {dash}"
        search = it.get("search")
        if search is None and episodes is None:
            continue
        if search is None:
            lines.append(f"| {it['iteration']} | {' | '.join([dash] * 10)} | {evaluated} |")
            continue
        pairs, critic, sft = search["pairs"], search["critic"], search.get("sft", {})
        tau = dash if critic["kendall_tau"] is None else f"{critic['kendall_tau']:.2f} ({critic['tau_nodes']})"
        top1 = dash if critic["top1"] is None else f"{critic['top1']:.2f}"
        first = critic.get("first_return_tau")  # None, or absent in runs made before it was recorded
        first = dash if first is None else f"{first:.2f} ({critic['first_return_nodes']})"
        sources = " / ".join(str(sft.get(k, 0)) for k in SFT_SOURCES)
        listed = f"{pairs['chose_later']} / {pairs['chose_earlier']}" if "chose_later" in pairs else dash  # absent in older runs
        lines.append(
            f"| {it['iteration']} | {it.get('num_examples', dash)} | {pairs['outcome']} "
            f"| {pairs.get('against_outcome', dash)} | {pairs['critic_only']} | {pairs.get('untried', dash)} | {listed} | {tau} | {top1} | {first} | {sources} | {evaluated} |"
        )
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def to_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    fields = ["method", "success_pct", "success_lo", "success_hi", "avg_reward", "reward_lo", "reward_hi"]
    fields += ["tasks", "model_calls", *COSTS, "examples", "source"]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        flat = {k: r.get(k, "") for k in fields}
        if r["tasks"]:
            flat |= {"success_lo": r["success_ci"][0], "success_hi": r["success_ci"][1]}
            flat |= {"reward_lo": r["reward_ci"][0], "reward_hi": r["reward_ci"][1]}
        writer.writerow(flat)
    return buffer.getvalue()


def rows_markdown(rows: list[dict]) -> str:
    """Rows of cells as a markdown table, the first row's keys the columns; a cell a row lacks is a dash."""
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r.get(c, NOT_EVALUATED)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_rows(folder: Path, stem: str, rows: list[dict], appendix: str = "") -> str:
    """A study's own table (rows of cells, the first row's keys the columns) as ``<stem>.md`` and
    ``<stem>.csv`` in ``folder``; a cell a row lacks is a dash. ``appendix`` (markdown) follows
    the table in ``<stem>.md`` only. Returns the markdown."""
    columns = list(rows[0])
    markdown = rows_markdown(rows) + appendix
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, restval=NOT_EVALUATED, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (folder / f"{stem}.md").write_text(markdown)
    (folder / f"{stem}.csv").write_text(buffer.getvalue())
    return markdown


OUT_OF_STEPS = "out of steps, no reward"
AGAINST_BASE = ("won / lost vs base (McNemar p)", "reward vs base [paired 95%]", "identical to base")


def study_row(label: str, policy: dict, max_steps: int, base: dict | None = None) -> dict:
    """A policy's row of a study's own table (``write_rows``), from its trajectories by goal
    (``by_goal``): success and average reward with their 95% intervals, the episodes that used
    every step and earned nothing, and against ``base`` on the same goals ``paired``'s won / lost,
    reward difference and identical episodes (dashes for the base itself, or with no base)."""
    success, reward = metric_cells(outcome_metrics(policy.values()))
    row = {"row": label, "goals": len(policy), "success %": success, "avg reward": reward}
    row[OUT_OF_STEPS] = out_of_steps(policy.values(), max_steps)
    if base is None or policy is base:
        return row | dict.fromkeys(AGAINST_BASE, NOT_EVALUATED)
    a = paired(policy, base)
    return row | dict(zip(AGAINST_BASE, (*paired_cells(a), a["identical"]), strict=True))


def evaluated_row(label: str, run_dir: Path, iteration: str | int, mode: str, base: dict | None = None) -> dict:
    """``study_row`` of a run's evaluation episodes (``iteration``: "base", "last" or a number) in the
    run's step budget, with the model calls per goal and the cost per success."""
    episodes = read_episodes(run_dir, iteration, mode)
    if episodes is None:
        raise FileNotFoundError(f"{run_dir}: no {mode} episodes at its {iteration} iteration")
    max_steps = int(OmegaConf.load(RunLayout(run_dir).config).eval.max_steps)
    policy = {e["trajectory"]["task_id"]: e["trajectory"] for e in episodes}
    return study_row(label, policy, max_steps, base) | {
        "model calls / goal": f"{model_calls(episodes):.1f}",
        "per success: tokens / env steps / wall s": cost_cell(cost_per_success(run_dir, iteration, mode, episodes)),
    }


def oracle_study_row(run_dir: Path) -> dict:
    """The scripted oracle's row of a study's own table: on the run's goals and step budget."""
    oracle = oracle_table_row(run_dir)
    if not oracle["tasks"]:
        return {"row": oracle["method"], "goals": 0}
    success = metric_cells(oracle)[0]
    return {"row": oracle["method"], "goals": oracle["tasks"], "success %": success, "avg reward": f"{oracle['avg_reward']:.3f}"}


def write_table(out: Path, command: str, methods=METHODS) -> str:
    rows = table_rows(out, methods)
    markdown = to_markdown(rows)
    anchor = anchor_of(methods).name
    names = next((r["milestone_names"] for r in rows if "milestone_names" in r), [])  # the oracle's row
    milestones = milestones_markdown(rows, names)
    if milestones:
        markdown += f"\nHow far the episodes got (the env's milestones, in order; each counts the episodes that reached it):\n\n{milestones}"
    diagnostics = diagnostics_markdown(out / "runs" / anchor)
    if diagnostics:
        markdown += f"\nPer iteration of the {anchor} run: where its data came from, and its policy zero-shot:\n\n{diagnostics}"
    (out / "table.md").write_text(f"{markdown}\nCommand: `{command}`\n")
    (out / "table.csv").write_text(to_csv(rows))
    return markdown


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", required=True, help="textcraft, webshop, sciworld or opentable")
    parser.add_argument("--out", type=Path, help="folder of the runs and the table (default experiments/<env>_compare)")
    parser.add_argument("--table-only", action="store_true", help="rebuild the table from finished runs")
    parser.add_argument(
        "--methods", help=f"comma-separated subset of {','.join(m.name for m in METHODS)} (default: all)"
    )
    args, overrides = parser.parse_known_args(argv)
    out = args.out or Path("experiments") / f"{args.env}_compare"
    out.mkdir(parents=True, exist_ok=True)
    methods = METHODS
    if args.methods:
        chosen = args.methods.split(",")
        unknown = set(chosen) - {m.name for m in METHODS}
        if unknown:
            parser.error(f"unknown methods {sorted(unknown)}: choose from {[m.name for m in METHODS]}")
        methods = tuple(m for m in METHODS if m.name in chosen)
    try:
        anchor_of(methods)
    except ValueError as e:
        parser.error(str(e))
    if not args.table_only:
        try:
            planned = plan_runs(args.env, out, overrides, methods)
        except ValueError as e:  # a bad override or study, found before any model loads
            parser.error(str(e))
        # The loop runs in this process, outside Hydra's job logging: the same console.
        logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s",
                            handlers=[StdoutHandler()])
        quiet_libraries()
        run_methods(out, planned, methods)
    print(write_table(out, "python -m agentq.compare " + shlex.join(argv), methods))


if __name__ == "__main__":
    main()
