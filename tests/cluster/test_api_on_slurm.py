"""The Python API on the real test Slurm cluster: the same cases as the CLI's, through each backend that reaches
Slurm: ``slurm`` (its commands) and ``pyslurm`` (libslurm in process; where pyslurm fits the cluster's Slurm,
which CI's 25.11 run has)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import ti_slurm
from tests.conftest import api_spec as spec
from tests.conftest import processes_matching, run_cli, slurm_partitions
from ti_slurm import JobState
from ti_slurm.backends import JobInfo

pytestmark = pytest.mark.usefixtures("cluster", "own_registry")


@pytest.fixture(params=["slurm", "pyslurm"])
def backend(request: pytest.FixtureRequest) -> str:
    """The backend the test submits through (the jobs it submits are followed through it too)."""
    if request.param == "pyslurm":
        from ti_slurm.backends.pyslurm import pyslurm_mismatch

        why = pyslurm_mismatch()
        if why:
            if os.environ.get("TI_SLURM_REQUIRE_PYSLURM") == "1":
                pytest.fail(f"the pyslurm backend cannot serve this cluster: {why}")
            pytest.skip(f"the pyslurm backend cannot serve this cluster: {why}")
    return str(request.param)


def test_submit_wait_status_logs_and_list(tmp_path: Path, backend: str) -> None:
    changes: list[JobState] = []
    job = ti_slurm.submit(
        spec(tmp_path, name="api", mode="mpi", nodes=2, command="echo hello from $INDEX"), backend=backend
    )
    assert job.id.isdigit() and job.backend.name == backend
    final = job.wait(timeout=120, on_change=lambda s: changes.append(s.state))
    assert final.state is JobState.COMPLETED and changes[-1] is JobState.COMPLETED
    node1 = final.components[0].nodes[1]
    assert node1.startswith("node")
    for selector in ("1", node1, "mpi-1"):
        assert list(job.logs(node=selector)) == ["hello from 1"]
    assert {s.job_id: s.state for s in ti_slurm.jobs()}[job.id] is JobState.COMPLETED
    assert run_cli("status", job.id, "--json").stdout.strip() == final.to_json()


def test_a_failing_node_ends_the_job_and_is_named(tmp_path: Path, backend: str) -> None:
    marker = f"sleep 9{uuid.uuid4().int % 1000:03d}"
    command = f"if [ $INDEX = 2 ]; then echo rank 2 gives up; exit 3; fi; {marker}"
    job = ti_slurm.submit(spec(tmp_path, mode="mpi", nodes=3, command=command), backend=backend)
    final = job.wait(timeout=120)
    assert final.state is JobState.FAILED and final.failed["index"] == 2 and final.failed["exit_code"] == 3
    assert "  | rank 2 gives up\n" in job.failure_tail(final)
    time.sleep(1)
    assert processes_matching(marker) == []


def test_cancel_from_another_process_leaves_no_process(tmp_path: Path, backend: str) -> None:
    marker = f"sleep 8{uuid.uuid4().int % 1000:03d}"
    job = ti_slurm.submit(spec(tmp_path, mode="ddp", nodes=1, command=marker), backend=backend)
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


def test_a_job_slurm_refuses_is_a_submission_error(tmp_path: Path, backend: str) -> None:
    refused = {"mode": "mpi", "nodes": 1, "command": "true", "sbatch": {"constraint": "nosuchfeature"}}
    asked = "sbatch" if backend == "slurm" else "submit"
    with pytest.raises(ti_slurm.SubmissionError, match=rf"^{asked} failed: .*Invalid feature") as err:
        ti_slurm.submit(spec(tmp_path, **refused), backend=backend)
    res = run_cli("submit", "--backend", backend, str(_yaml(tmp_path, **refused)))
    assert res.returncode == 1 and res.stderr == f"ti-slurm: error: {err.value}\n"


@pytest.mark.parametrize(
    "fields,why",
    [
        ({"nodes": 128}, "128 nodes asked, partition debug has 4"),
        ({"nodes": 1, "gpus_per_node": 16}, "16 GPUs per node asked, no node of partition debug has more than 8"),
        (
            {"nodes": 1, "partition": "nosuch"},
            "partition 'nosuch' does not exist (partitions: {partitions})",
        ),
    ],
    ids=["nodes", "gpus", "partition"],
)
def test_a_job_that_can_never_start_is_refused_and_nothing_is_submitted(
    tmp_path: Path, fields: dict[str, object], why: str, backend: str
) -> None:
    name = f"never-{uuid.uuid4().hex[:8]}"  # other tests submit meanwhile: look for this job by its own name
    res = run_cli("submit", "--backend", backend, str(_yaml(tmp_path, name=name, mode="mpi", command="true", **fields)))
    assert res.returncode == 1
    why = why.format(partitions=slurm_partitions())  # the test cluster's, islands included
    assert res.stderr == f"ti-slurm: error: the job can never start: {why} (nothing was submitted)\n"
    queued = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True, check=True).stdout
    assert name not in queued.split()  # no such job was submitted


def test_queue_anyway_waits_saying_why_it_cannot_start(tmp_path: Path, backend: str) -> None:
    path = _yaml(tmp_path, mode="mpi", nodes=128, command="true")
    waiting = subprocess.Popen(
        ["ti-slurm", "submit", "--backend", backend, str(path), "--queue-anyway", "--wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        job_id = waiting.stdout.readline().decode().strip()  # type: ignore[union-attr]
        line = waiting.stderr.readline().decode()  # type: ignore[union-attr]
        while "PartitionConfig" not in line and line:  # first "PENDING (submitted)", until Slurm is asked
            line = waiting.stderr.readline().decode()  # type: ignore[union-attr]
        assert line.strip() == (
            f"ti-slurm: job {job_id}: PENDING (PartitionConfig): the job asks for more than the partition has; "
            "it cannot start as the partition stands"
        )
    finally:
        waiting.kill()
        subprocess.run(["scancel", job_id], check=False)


def test_an_unknown_job_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(ti_slurm.UnknownJobError, match="job 999999999: not queued and no record"):
        ti_slurm.get_job("999999999").status()


def test_a_heterogeneous_job_through_pyslurm_runs_and_is_followed(tmp_path: Path, backend: str) -> None:
    # pyslurm cannot submit a heterogeneous job (sbatch does), but follows and cancels it like any other
    task = """python3 -c 'import json, os; t = json.loads(os.environ["TF_CONFIG"])["task"]; """
    task += """print(t["type"], t["index"])'"""
    fields = {"mode": "ps-worker", "ps": {"nodes": 1}, "worker": {"nodes": 2}, "command": task}
    job = ti_slurm.submit(spec(tmp_path, **fields), backend=backend)
    final = ti_slurm.get_job(job.id).wait(timeout=120)
    assert final.state is JobState.COMPLETED and [c.name for c in final.components] == ["ps", "worker"]
    assert sorted(line for n in ("worker-0", "worker-1") for line in job.logs(node=n)) == ["worker 0", "worker 1"]


def test_the_processes_a_pyslurm_user_starts_keep_their_slurm_config(tmp_path: Path, backend: str) -> None:
    # libslurm's initialisation sets SLURM_CONF in the C environment: a later sbatch of another Slurm would read it
    from ti_slurm.backends import get_backend  # the backend itself, as scripts use it

    get_backend(backend).queue_states([JobInfo("1")])
    shown = subprocess.run(["sh", "-c", 'echo "${SLURM_CONF-unset}"'], capture_output=True, text=True).stdout
    assert shown.strip() == os.environ.get("SLURM_CONF", "unset")


def test_both_backends_ask_slurm_for_the_same_job(tmp_path: Path) -> None:
    from ti_slurm.backends.pyslurm import pyslurm_mismatch

    if pyslurm_mismatch():
        pytest.skip(f"pyslurm cannot serve this cluster: {pyslurm_mismatch()}")
    fields = {
        "mode": "mpi", "nodes": 2, "gpus_per_node": 2, "cpus_per_node": 2, "mem": "500M", "time": "5:00",
        "partition": "debug", "command": "sleep 60", "restart": {"max": 1}, "sbatch": {"exclude": "node04"},
    }  # fmt: skip
    shown = {}
    for name in ("slurm", "pyslurm"):
        job = ti_slurm.submit(spec(tmp_path / name, name="same", **fields), backend=name)
        text = subprocess.run(["scontrol", "-o", "show", "job", job.id], capture_output=True, text=True).stdout
        job.cancel()
        keep = ("JobName", "Requeue", "TimeLimit", "Partition", "NumNodes", "NumCPUs", "NumTasks", "CPUs/Task",
                "ReqTRES", "ExcNodeList", "TresPerNode", "MinMemoryNode", "OverSubscribe")  # fmt: skip
        values = dict(word.split("=", 1) for word in text.split() if "=" in word)
        shown[name] = {k: values.get(k) for k in keep}
        low, _, high = str(values.get("NumNodes")).partition("-")  # "2-2" while pending, "2" once it runs
        shown[name]["NumNodes"] = low if high in ("", low) else f"{low}-{high}"
        shown[name]["StdOut"] = values["StdOut"].replace(str(tmp_path / name), "<out>").replace(job.id, "<id>")
        shown[name]["Comment"] = values["Comment"].startswith("ti-slurm:")
    assert shown["pyslurm"] == shown["slurm"]


def _yaml(tmp_path: Path, **fields: object) -> Path:
    import json

    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec(tmp_path, **fields)))
    return path


def test_a_sweep_through_the_api_runs_each_point_as_an_array_task(tmp_path: Path, backend: str) -> None:
    spec = {"mode": "ddp", "nodes": 2, "command": "echo lr={lr} $TI_SLURM_PARAM_LR", "output_dir": str(tmp_path)}
    sweep = ti_slurm.sweep(spec, {"lr": ["0.1", "0.01", "0.001"]}, backend=backend, max_parallel=2)
    assert sweep.array and sweep.id.isdigit()
    final = sweep.wait(timeout=180)
    assert [p.status.state for p in final.points] == [JobState.COMPLETED] * 3, final.points
    for job, lr in zip(sweep.jobs(), ["0.1", "0.01", "0.001"], strict=True):
        assert job.id.startswith(f"{sweep.id}_") and list(job.logs(node="1")) == [f"lr={lr} {lr}"]
    assert ti_slurm.get_sweep(sweep.id) is not None
