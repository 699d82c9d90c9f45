"""Sweep presets (conf/hparams_search) and launcher presets (conf/hydra/launcher) compose,
expand to the grids they promise, and every job of a grid builds; the slow tier runs
the smoke experiment through the joblib and submitit launchers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from hydra.utils import get_class
from omegaconf import OmegaConf

from agentq.components import build
from tests.conftest import CONF, ROOT

PRESETS = {
    "beta_threshold": {"objective.beta": [0.1, 0.3, 1.0], "pairs.threshold": [0.05, 0.1, 0.3]},
    "num_actions": {"search.num_actions": [2, 3, 4]},
    "mcts": {"search.alpha": [0.25, 0.5, 0.75], "search.c_exp": [0.5, 1.0, 2.0]},
    "agentq_dev": {
        "objective.beta": [0.1, 0.5], "pairs.threshold": [0.05, 0.2], "search.num_actions": [2, 3],
        "search.alpha": [0.25, 0.75], "trainer.optimizer.lr": [1e-4, 5e-4],
    },
}


def compose_hydra(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


def expand(params: dict, extra: tuple[str, ...] = ()) -> list[list[str]]:
    """The jobs Hydra's basic sweeper launches for ``params`` plus command-line overrides."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    parsed = OverridesParser.create().parse_overrides(
        [f"{k}={v}" for k, v in params.items()] + list(extra)
    )
    (batch,) = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return batch


def test_every_preset_is_tested():
    assert {p.stem for p in (CONF / "hparams_search").glob("*.yaml")} == set(PRESETS)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_composes_to_a_multirun_grid(preset, tmp_path):
    cfg = compose_hydra(f"+hparams_search={preset}", "+experiment=smoke")
    assert cfg.hydra.mode == RunMode.MULTIRUN
    assert cfg.tuning is True and cfg.eval.split == "dev"  # a sweep chooses on dev (validation refuses test)
    params = OmegaConf.to_container(cfg.hydra.sweeper.params)
    expected = PRESETS[preset]
    assert {k: [float(x) for x in v.split(",")] for k, v in params.items()} == expected
    jobs = expand(params)
    assert len(jobs) == len({tuple(j) for j in jobs}) == _product(len(v) for v in expected.values())
    for (
        job
    ) in jobs:  # each grid point is a valid run config (keys exist, values pass build's checks)
        job_cfg = compose_hydra("+experiment=smoke", f"paths.run_dir={tmp_path}", "tuning=true", "eval.split=dev", *job)
        for override in job:
            key, value = override.split("=")
            assert OmegaConf.select(job_cfg, key) == pytest.approx(float(value))
        build(job_cfg).env.close()


def _product(sizes) -> int:
    out = 1
    for size in sizes:
        out *= size
    return out


def test_a_command_line_key_replaces_the_preset_grid():
    params = OmegaConf.to_container(
        compose_hydra("+hparams_search=beta_threshold").hydra.sweeper.params
    )
    jobs = expand(params, ("objective.beta=0.5", "pairs.threshold=0.1,0.2"))
    assert sorted(jobs) == [
        ["objective.beta=0.5", "pairs.threshold=0.1"],
        ["objective.beta=0.5", "pairs.threshold=0.2"],
    ]


@pytest.mark.parametrize(
    "launcher, target, values",
    [
        ("joblib_cpu", "JoblibLauncher", {"n_jobs": 2, "prefer": "processes"}),
        (
            "slurm",
            "SlurmLauncher",
            {"cpus_per_task": 8, "gpus_per_node": 0, "array_parallelism": 16},
        ),
        ("submitit_local", "LocalLauncher", {}),
    ],
)
def test_launcher_presets_compose(launcher, target, values):
    cfg = compose_hydra("+experiment=smoke", f"hydra/launcher={launcher}")
    assert cfg.hydra.launcher._target_.endswith(target)
    get_class(cfg.hydra.launcher._target_)  # the plugin is installed
    for key, value in values.items():
        assert cfg.hydra.launcher[key] == value


def _sweep(tmp_path, launcher: str, env: dict[str, str]) -> list[dict]:
    sweep_dir = tmp_path / launcher
    command = [
        sys.executable,
        "run.py",
        "-m",
        "+experiment=smoke",
        f"hydra/launcher={launcher}",
        "objective.beta=0.1,0.3",
        "iterations=0",
        "eval.search=false",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    subprocess.run(command, cwd=ROOT, env=env, check=True, timeout=600, capture_output=True)
    infos = []
    for job in ("0", "1"):
        assert (sweep_dir / job / "summary.json").exists()
        infos.append(json.loads((sweep_dir / job / "run_info.json").read_text())["starts"][0])
    return infos


@pytest.mark.slow
def test_joblib_preset_runs_jobs_in_parallel_with_a_share_of_the_threads(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    infos = _sweep(tmp_path, "joblib_cpu", env)
    from joblib import cpu_count  # what loky divides: cores usable by this process

    assert [i["threads"] for i in infos] == [max(1, cpu_count() // 2)] * 2


@pytest.mark.slow
def test_submitit_local_runs_the_smoke_sweep_and_the_report_reads_it(tmp_path):
    from agentq.report import load_study, write_report

    _sweep(tmp_path, "submitit_local", dict(os.environ))
    study = load_study(tmp_path / "submitit_local")
    assert study.swept == ["objective.beta"] and [r.status for r in study.runs] == ["complete"] * 2
    assert write_report(study, tmp_path / "report").html.exists()
