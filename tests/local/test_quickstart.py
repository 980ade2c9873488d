"""A new user with the quick start page and the CLI: the page's blocks, as printed, write and run their own
DDP, MPI (Horovod), PS-Worker and ModelArts jobs on the local runner; every starter spec of `ti-slurm init`
runs as written; `list`, `logs` and `status` behave as the page says."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.docs import doc_block

pytestmark = pytest.mark.usefixtures("own_registry")
AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if os.geteuid() == 0 else {}


def logs_of(tmp_path: Path) -> str:
    return "".join(p.read_text() for p in sorted(tmp_path.glob("ti-slurm-jobs/*/logs/*.log")))


def test_the_first_job_runs_as_printed(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    for block in (doc_block("first-job"), doc_block("first-command").splitlines()[-1].split(" && ")[-1]):
        res = subprocess.run(["bash", "-ec", block], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0 and "COMPLETED" in res.stderr, res.stderr


def test_the_install_block_names_what_it_should() -> None:
    block = doc_block("install")
    assert "python3 -m venv" in block and "pip install torch==2.13.0 -e ." in block
    assert doc_block("first-command").count("python3 -m venv") == 1


def test_your_own_ddp_job_as_the_page_says(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(doc_block("own-ddp", "yaml"))
    res = subprocess.run(["bash", "-ec", doc_block("own-ddp-run")], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "node 1 of 2 master 127.0.0.1" in res.stdout and "hello-ddp" in res.stdout and "COMPLETED" in res.stdout


@pytest.mark.parametrize(
    "marker,expected",
    [
        ("own-mpi", r"(?m)^\S+\n\S+$"),  # mpirun ran hostname twice, from the launcher
        ("own-ps-worker", r"\{'type': 'worker', 'index': 1\}"),
        ("own-modelarts", r"task 1 of 2, master 127\.0\.0\.1"),
    ],
)
def test_your_own_jobs_of_each_kind_as_printed(tmp_path: Path, marker: str, expected: str) -> None:
    if marker == "own-mpi" and shutil.which("mpirun") is None:
        pytest.skip("Open MPI's mpirun is not installed (apt install openmpi-bin)")
    (tmp_path / "job.yaml").write_text(doc_block(marker, "yaml"))
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path, env=AS_ROOT)
    assert res.returncode == 0, res.stderr
    assert re.search(expected, logs_of(tmp_path)), logs_of(tmp_path)


STARTERS = [("ddp", "ti"), ("mpi", "ti"), ("horovod", "ti"), ("ps-worker", "ti"), ("ray", "ti"), ("ddp", "modelarts"),
            ("ps-worker", "modelarts")]  # fmt: skip


@pytest.mark.parametrize("mode,platform", STARTERS)
def test_every_starter_spec_submits_as_written(tmp_path: Path, mode: str, platform: str) -> None:
    made = run_cli("init", "--mode", mode, "--platform", platform)
    assert made.returncode == 0 and made.stdout.startswith("# yaml-language-server: $schema="), made.stderr
    (tmp_path / "job.yaml").write_text(made.stdout)
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert logs_of(tmp_path).strip(), "the starter's command printed nothing"


def test_list_is_newest_first_with_a_limit_and_filters(tmp_path: Path) -> None:
    ids = []
    for name, command in (("a-ok", "true"), ("b-bad", "false"), ("c-ok", "true")):
        (tmp_path / "job.yaml").write_text(f"name: {name}\nmode: ddp\nnodes: 1\ncommand: '{command}'\n")
        ids.append(run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path).stdout.strip())
    listed = run_cli("list", cwd=tmp_path).stdout.splitlines()
    assert [line.split()[0] for line in listed[1:]] == ids[::-1], listed
    limited = run_cli("list", "--limit", "1", cwd=tmp_path).stdout.splitlines()
    assert limited[1].split()[0] == ids[2] and limited[-1] == "(2 older not shown: --limit 0 shows all)", limited
    failed = run_cli("list", "--state", "failed", cwd=tmp_path).stdout.splitlines()
    assert [line.split()[:3] for line in failed[1:]] == [[ids[1], "b-bad", "FAILED"]], failed
    named = run_cli("list", "--name", "ok", cwd=tmp_path).stdout.splitlines()
    assert [line.split()[1] for line in named[1:]] == ["c-ok", "a-ok"], named
    header = listed[0]
    assert header.index("NAME") == len(ids[0]) + 1, header  # the columns fit the ids, no wider


def test_logs_of_a_job_whose_directory_is_gone_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("mode: ddp\nnodes: 1\ncommand: echo hi\n")
    job = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path).stdout.strip()
    assert run_cli("logs", job, cwd=tmp_path).stdout.strip().endswith("hi")
    shutil.rmtree(tmp_path / "ti-slurm-jobs" / job)
    res = run_cli("logs", job, cwd=tmp_path)
    assert res.returncode == 1 and res.stdout == "", res.stderr
    assert f"job {job}: no logs to show: its job directory" in res.stderr and "is gone" in res.stderr


def test_a_job_too_short_to_sample_says_so(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("mode: ddp\nnodes: 1\ncommand: 'true'\n")
    job = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path).stdout.strip()
    status = run_cli("status", job, cwd=tmp_path).stdout
    assert "efficiency: not measured: the job ended before its first usage sample" in status, status
    efficiency = next(line for line in status.splitlines() if line.strip().startswith("efficiency:"))
    assert "%" not in efficiency and "warning" not in status, status  # (the time line's "effective 60%" is fine)


def test_the_specs_python_is_the_commands_python(tmp_path: Path) -> None:
    """`python:` names an environment: the command's `python3` is that environment's (its bin first on PATH)."""
    env_bin = tmp_path / "env" / "bin"
    env_bin.mkdir(parents=True)
    (env_bin / "python3").symlink_to(sys.executable)
    spec = f"mode: ddp\nnodes: 1\npython: {env_bin}/python3\ncommand: command -v python3\n"
    (tmp_path / "job.yaml").write_text(spec)
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert logs_of(tmp_path).strip().endswith(f"{env_bin}/python3"), logs_of(tmp_path)
