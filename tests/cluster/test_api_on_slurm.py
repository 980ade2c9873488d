"""The Python API on the real test Slurm cluster: the same cases as the CLI's."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import ti_slurm
from tests.conftest import processes_matching, run_cli
from ti_slurm import JobState

pytestmark = pytest.mark.usefixtures("cluster")


@pytest.fixture(autouse=True)
def own_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)


def spec(tmp_path: Path, **fields: object) -> dict[str, object]:
    return {"output_dir": str(tmp_path / "out"), **fields}


def test_submit_wait_status_logs_and_list(tmp_path: Path) -> None:
    changes: list[JobState] = []
    job = ti_slurm.submit(spec(tmp_path, name="api", mode="mpi", nodes=2, command="echo hello from $INDEX"))
    assert job.id.isdigit() and job.backend.name == "slurm"
    final = job.wait(timeout=120, on_change=lambda s: changes.append(s.state))
    assert final.state is JobState.COMPLETED and changes[-1] is JobState.COMPLETED
    node1 = final.components[0].nodes[1]
    assert node1.startswith("node")
    for selector in ("1", node1, "mpi-1"):
        assert list(job.logs(node=selector)) == ["hello from 1"]
    assert {s.job_id: s.state for s in ti_slurm.jobs()}[job.id] is JobState.COMPLETED
    assert run_cli("status", job.id, "--json").stdout.strip() == final.to_json()


def test_a_failing_node_ends_the_job_and_is_named(tmp_path: Path) -> None:
    marker = f"sleep 9{uuid.uuid4().int % 1000:03d}"
    command = f"if [ $INDEX = 2 ]; then echo rank 2 gives up; exit 3; fi; {marker}"
    job = ti_slurm.submit(spec(tmp_path, mode="mpi", nodes=3, command=command))
    final = job.wait(timeout=120)
    assert final.state is JobState.FAILED and final.failed["index"] == 2 and final.failed["exit_code"] == 3
    assert "  | rank 2 gives up\n" in job.failure_tail(final)
    time.sleep(1)
    assert processes_matching(marker) == []


def test_cancel_from_another_process_leaves_no_process(tmp_path: Path) -> None:
    marker = f"sleep 8{uuid.uuid4().int % 1000:03d}"
    job = ti_slurm.submit(spec(tmp_path, mode="ddp", nodes=1, command=marker))
    deadline = time.monotonic() + 60
    while not processes_matching(marker) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert job.state is JobState.RUNNING
    subprocess.run([sys.executable, "-c", f"import ti_slurm; ti_slurm.get_job({job.id!r}).cancel()"], check=True)
    assert job.wait(timeout=120).state is JobState.CANCELLED
    deadline = time.monotonic() + 30
    while processes_matching(marker) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert processes_matching(marker) == []


def test_a_job_slurm_refuses_is_a_submission_error(tmp_path: Path) -> None:
    refused = {"mode": "mpi", "nodes": 1, "partition": "nosuchpartition", "command": "true"}
    with pytest.raises(ti_slurm.SubmissionError, match=r"^sbatch failed: .*Invalid partition name") as err:
        ti_slurm.submit(spec(tmp_path, **refused))
    res = run_cli("submit", str(_yaml(tmp_path, **refused)))
    assert res.returncode == 1 and res.stderr == f"ti-slurm: error: {err.value}\n"


def test_an_unknown_job_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(ti_slurm.UnknownJobError, match="job 999999999: not queued and no record"):
        ti_slurm.get_job("999999999").status()


def _yaml(tmp_path: Path, **fields: object) -> Path:
    import json

    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec(tmp_path, **fields)))
    return path
