"""A sweep on the local runner, through the CLI as a process and a YAML file on disk: every point runs with
its values, a failing point shows as such, ``list`` folds the sweep into one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import ti_slurm
from tests.conftest import run_cli
from ti_slurm import JobState

pytestmark = pytest.mark.usefixtures("own_registry")

SPEC = """\
name: local-sweep
mode: ddp
nodes: 2
command: 'echo "rank $RANK lr={lr} env=$TI_SLURM_PARAM_LR all=$TI_SLURM_PARAMS"; test "$TI_SLURM_PARAM_LR" != bad'
"""


def test_a_local_sweep_runs_each_point_with_its_values(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(SPEC)
    grid = ("--param", "lr=0.1,bad", "--param", "seed=1,2")
    res = run_cli("sweep", "job.yaml", "--local", *grid, "--wait", cwd=tmp_path)
    assert res.returncode == 1, res.stderr  # a point failed
    sweep_id = res.stdout.strip()
    assert sweep_id.startswith("sweep-local-")
    table = run_cli("status", sweep_id, cwd=tmp_path).stdout
    assert "4 points: 2 COMPLETED, 2 FAILED" in table.splitlines()[0], table
    lines = {line.split()[0]: line for line in table.splitlines()[2:]}
    rows = {k: line.split() for k, line in lines.items()}
    assert [rows[k][2:5] for k in "0123"] == [
        ["0.1", "1", "COMPLETED"],
        ["0.1", "2", "COMPLETED"],
        ["bad", "1", "FAILED"],
        ["bad", "2", "FAILED"],
    ]
    # both nodes of a "bad" point exit 1; the reason names whichever Slurm saw end first
    assert re.search(r"FAILED +ddp node localhost \(index [01]\) exited 1$", lines["2"]), table
    sweep = ti_slurm.get_sweep(sweep_id)
    assert sweep is not None
    logs = list(sweep.jobs()[1].logs(node="1"))  # a point that completed (a failed one's other node may be stopped)
    assert logs == ['rank 1 lr=0.1 env=0.1 all={"lr":"0.1","seed":"2"}'], logs
    data = json.loads(run_cli("status", sweep_id, "--json", cwd=tmp_path).stdout)
    assert [p["params"] for p in data["points"]][2] == {"lr": "bad", "seed": "1"}
    listed = run_cli("list", cwd=tmp_path).stdout.splitlines()
    assert [line.split()[:3] for line in listed[1:]] == [[sweep_id, "local-sweep", "SWEEP"]], listed
    logs = run_cli("logs", sweep_id, cwd=tmp_path)
    assert (
        logs.returncode == 2
        and f"is a sweep: name one of its points, e.g. ti-slurm logs {sweep.jobs()[0].id}" in logs.stderr
    )
    expanded = run_cli("list", "--points", cwd=tmp_path).stdout.splitlines()
    assert len(expanded) == 1 + 1 + 4 and expanded[2].split()[0] == sweep.jobs()[0].id, expanded


def test_the_python_api_sweeps_a_grid_and_waits_for_every_point(tmp_path: Path) -> None:
    spec = {"mode": "mpi", "nodes": 1, "command": "echo lr={lr}", "output_dir": str(tmp_path / "out")}
    sweep = ti_slurm.sweep(spec, {"lr": [0.1, 0.01]}, backend="local")
    final = sweep.wait(timeout=60)
    assert [p.status.state for p in final.points] == [JobState.COMPLETED, JobState.COMPLETED]
    assert [list(job.logs(node="0")) for job in sweep.jobs()] == [["lr=0.1"], ["lr=0.01"]]
    with pytest.raises(ti_slurm.ConfigError, match="max_parallel: 1: the local backend runs every point at once"):
        ti_slurm.sweep(spec, {"lr": [1, 2]}, backend="local", max_parallel=1)


def test_a_value_holding_another_parameters_place_cannot_leave_its_shell_word(tmp_path: Path) -> None:
    # the review's injection: a={b} quoted, then {b} substituted inside those quotes would close them
    planted = tmp_path / "PWN"
    (tmp_path / "job.yaml").write_text("name: inject\nmode: ddp\nnodes: 1\ncommand: 'printf \"[%s]\\n\" {a}'\n")
    grid = ("--param", "a={b}", "--param", f"b=;touch {planted};")
    res = run_cli("sweep", "job.yaml", "--local", *grid, "--wait", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    sweep = ti_slurm.get_sweep(res.stdout.strip())
    assert sweep is not None
    assert list(sweep.jobs()[0].logs(node="0")) == ["[{b}]"]
    assert not planted.exists()


def test_a_local_sweep_of_more_points_than_it_can_run_at_once_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("mode: ddp\nnodes: 1\ncommand: 'echo {seed}'\n")
    res = run_cli("sweep", "job.yaml", "--local", "--param", "seed=" + ",".join(map(str, range(65))), cwd=tmp_path)
    assert res.returncode == 2 and res.stderr == (
        "ti-slurm: error: sweep: '65 points': the local backend runs every point at once: at most 64; sweep on "
        "Slurm for more\n"
    ), res.stderr
    assert not (tmp_path / "ti-slurm-jobs").exists()


def test_a_sweep_on_a_cluster_not_in_the_config_is_one_line_and_submits_nothing(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(SPEC + "cluster: gpu\n")
    nowhere = {"XDG_CONFIG_HOME": str(tmp_path), "SLURM_CONF": str(tmp_path / "none.conf")}  # no Slurm clusters either
    res = run_cli("sweep", "job.yaml", "--param", "lr=0.1,0.2", cwd=tmp_path, env=nowhere)
    assert res.returncode == 2 and res.stdout == "", res.stdout
    assert res.stderr == (
        "ti-slurm: error: cluster: 'gpu': no such cluster "
        "(yours: none: add [[cluster]] tables to your user config (docs/clusters.md))\n"
    )
    assert run_cli("list", cwd=tmp_path).stdout.splitlines()[1:] == []
    both = run_cli("sweep", "job.yaml", "--local", "--cluster", "gpu", "--param", "lr=0.1", cwd=tmp_path)
    assert both.returncode == 2 and "cluster: 'gpu': says how to reach the cluster" in both.stderr
