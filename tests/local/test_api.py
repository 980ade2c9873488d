"""The Python API on the local runner: the same cases as the CLI's, with real processes."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import ti_slurm
from tests.conftest import api_spec as spec
from tests.conftest import run_cli
from ti_slurm import JobState, JobStatus
from ti_slurm.follow.files import LOG_CHUNK
from ti_slurm.follow.status import progress_line

pytestmark = pytest.mark.usefixtures("own_registry")


def processes_with(marker: str) -> str:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False).stdout.strip()


def test_submit_a_dict_and_wait_for_it(tmp_path: Path) -> None:
    seen: list[JobStatus] = []
    job = ti_slurm.submit(spec(tmp_path, mode="mpi", nodes=2, command="echo hello-$INDEX"), backend="local")
    assert job.id.startswith("local-") and Path(job.job_dir) == tmp_path / "out" / job.id
    final = job.wait(timeout=60, on_change=seen.append)
    assert final.state is JobState.COMPLETED and final.state.is_terminal
    assert seen[-1] is final and len({progress_line(s) for s in seen}) == len(seen)
    assert [c.name for c in final.components] == ["mpi"] and final.components[0].state == "COMPLETED"
    assert list(job.logs(node="1")) == ["hello-1"]
    assert list(job.logs()) == ["==> mpi-0 (localhost) <==", "hello-0", "==> mpi-1 (localhost) <==", "hello-1"]
    assert job.state is JobState.COMPLETED


def test_the_api_gives_a_modelarts_job_its_variables(tmp_path: Path) -> None:
    command = 'echo "$MA_TASK_NAME $VC_TASK_INDEX $MA_NUM_HOSTS ${VC_WORKER_HOSTS%%,*}"'
    job = ti_slurm.submit(spec(tmp_path, mode="ddp", nodes=2, platform="modelarts", command=command), backend="local")
    assert job.wait(timeout=60).state is JobState.COMPLETED
    assert [list(job.logs(node=n)) for n in ("0", "1")] == [["worker 0 2 127.0.0.1"], ["worker 1 2 127.0.0.1"]]


def test_a_spec_file_and_a_jobspec_submit_alike(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(f"mode: ddp\nnodes: 1\ncommand: echo rank=$RANK\noutput_dir: {tmp_path / 'out'}\n")
    for given in (path, str(path), ti_slurm.load(path)):
        job = ti_slurm.submit(given, backend="local")
        assert job.wait(timeout=60).state is JobState.COMPLETED
        assert list(job.logs(node="0")) == ["rank=0"]


def test_a_failed_job_names_its_node_and_raises_nothing(tmp_path: Path) -> None:
    command = "if [ $INDEX = 1 ]; then echo node $INDEX gives up; exit 3; fi; sleep 30"
    job = ti_slurm.submit(spec(tmp_path, mode="mpi", nodes=3, command=command), backend="local")
    final = job.wait(timeout=60)
    assert final.state is JobState.FAILED
    assert final.failed == {"component": "mpi", "node": "localhost", "index": 1, "exit_code": 3}
    assert job.status().as_dict() == final.as_dict()  # the same data as `status --json`
    assert "  | node 1 gives up\n" in job.failure_tail(final)
    assert f"(all of it: ti-slurm logs {job.id} --node mpi-1)" in job.failure_tail(final)


def test_parameter_servers_are_stopped_after_the_workers(tmp_path: Path) -> None:
    marker = f"sleep 7{uuid.uuid4().int % 1000:03d}"
    command = f"if [ $TI_SLURM_ROLE = ps ]; then {marker}; fi; echo $TI_SLURM_COMPONENT $TI_SLURM_GROUP"
    job = ti_slurm.submit(
        spec(tmp_path, mode="ps-worker", ps={"nodes": 1}, worker={"nodes": 2}, command=command), backend="local"
    )
    final = job.wait(timeout=60)
    assert final.state is JobState.COMPLETED
    assert [c.state for c in final.components] == ["STOPPED", "COMPLETED"]
    assert list(job.logs(node="worker-1")) == ["worker worker"]
    assert processes_with(marker) == ""


def test_cancel_and_a_wait_that_times_out(tmp_path: Path) -> None:
    marker = f"sleep 8{uuid.uuid4().int % 1000:03d}"
    job = ti_slurm.submit(spec(tmp_path, mode="mpi", nodes=2, command=marker), backend="local")
    with pytest.raises(TimeoutError, match=f"job {job.id} is still RUNNING after 1"):
        job.wait(timeout=1)
    deadline = time.monotonic() + 30  # the job kept running (on a loaded machine its command may start late)
    while not processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(marker)
    job.cancel()
    assert job.wait(timeout=60).state is JobState.CANCELLED
    assert processes_with(marker) == ""


def test_another_process_finds_the_job_and_jobs_lists_it(tmp_path: Path) -> None:
    job = ti_slurm.submit(spec(tmp_path, name="api-list", mode="ddp", nodes=1, command="true"), backend="local")
    job.wait(timeout=60)
    probe = f"import ti_slurm; print(ti_slurm.get_job({job.id!r}).status().state)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "COMPLETED"
    listed = {s.job_id: s for s in ti_slurm.jobs()}
    assert listed[job.id].name == "api-list" and listed[job.id].state is JobState.COMPLETED
    assert run_cli("list").stdout.splitlines()[1].split()[:3] == [job.id, "api-list", "COMPLETED"]


def test_render_and_plan_are_what_submit_sends(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("mode: ddp\nnodes: 2\ncommand: python train.py\nworkdir: code\n")
    (tmp_path / "code").mkdir()
    plan = ti_slurm.plan(path)
    assert plan.output_dir == str(tmp_path / "ti-slurm-jobs") and plan.workdir == str(tmp_path / "code")
    script = ti_slurm.render(path, python="/opt/py/bin/python3")
    assert script == run_cli("render", str(path), "--python", "/opt/py/bin/python3", cwd=tmp_path).stdout


def test_errors_are_exceptions_with_the_line_the_cli_prints(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("mode: ray\ncommand: x\nhead: {cpus_per_node: 0.7}\n")
    with pytest.raises(ti_slurm.SpecError) as err:
        ti_slurm.submit(path, backend="local")
    assert run_cli("submit", "--local", str(path)).stderr == f"ti-slurm: error: {err.value}\n"
    assert (err.value.field, err.value.value) == ("head.cpus_per_node", 0.7)
    expected = r"^backend: 'lsf': expected one of: slurm, pyslurm, rest, local, ssh$"
    with pytest.raises(ti_slurm.ConfigError, match=expected):
        ti_slurm.submit(spec(tmp_path, mode="ddp", nodes=1, command="true"), backend="lsf")
    with pytest.raises(ti_slurm.UnknownJobError, match="unknown local job"):
        ti_slurm.get_job("local-1")
    assert not (tmp_path / "out").exists()  # nothing was submitted


def test_waiting_reports_each_change_once(tmp_path: Path) -> None:
    lines: list[str] = []
    job = ti_slurm.submit(spec(tmp_path, mode="mpi", nodes=2, command="sleep 1"), backend="local")
    job.wait(timeout=60, on_change=lambda s: lines.append(progress_line(s)))
    assert lines[-1] == "COMPLETED" and len(lines) == len(set(lines))
    started = time.monotonic()
    assert job.wait(timeout=60).state is JobState.COMPLETED  # an ended job answers at once
    assert time.monotonic() - started < 5


def test_following_logs_reads_only_what_was_appended(tmp_path: Path) -> None:
    """A growing 8 MB log followed to the end: each byte is read once, not once per poll."""
    writer = (
        "import time\nfor i in range(8):\n"
        "    print((f'{i}' * 99 + chr(10)) * 10_000, end='', flush=True)\n    time.sleep(0.4)\n"
    )
    (tmp_path / "writer.py").write_text(writer)
    job = ti_slurm.submit(
        spec(tmp_path, mode="ddp", nodes=1, command=f"python3 {tmp_path / 'writer.py'}"), backend="local"
    )
    read: list[int] = []
    asked: list[int | None] = []
    original = job.backend.read_bytes

    def counting(path: str, offset: int = 0, size: int | None = None) -> bytes | None:
        data = original(path, offset, size)
        read.append(len(data or b""))
        asked.append(size)
        return data

    job.backend.read_bytes = counting  # type: ignore[method-assign]
    lines = list(job.logs(node="0", follow=True))
    size = (Path(job.job_dir) / "logs" / "ddp-0.log").stat().st_size
    assert size == 8 * 10_000 * 100 and len(lines) == 80_000
    assert len(read) > 2  # it did follow, round after round
    assert sum(read) <= size * 1.05  # ... and read each byte about once
    assert max(read) <= LOG_CHUNK and set(asked) == {LOG_CHUNK}  # a chunk at a time, never a whole log


def test_a_job_whose_backend_or_host_cannot_be_reached_does_not_hide_the_others(tmp_path: Path) -> None:
    from ti_slurm.backends import JobInfo
    from ti_slurm.follow.registry import remember

    job = ti_slurm.submit(spec(tmp_path, name="reachable", mode="mpi", nodes=1, command="true"), backend="local")
    job.wait(timeout=60)
    # recorded by earlier submits: one through pyslurm (not installed here, or for another Slurm), one over SSH
    # to a login node that is down now (nothing listens on port 1)
    remember(JobInfo("4242", "via-pyslurm", "pyslurm", str(tmp_path / "out" / "4242")))
    remember(JobInfo("4343", "via-ssh", "ssh", "/home/u/ti-slurm-jobs/4343", host="root@127.0.0.1:1"))
    listed = {s.job_id: s for s in ti_slurm.jobs()}
    assert listed[job.id].state is JobState.COMPLETED
    assert listed["4343"].state is JobState.UNKNOWN and "cannot reach its ssh backend on root@127.0.0.1:1" in (
        listed["4343"].reason
    )
    if "pyslurm" in listed["4242"].reason:  # where pyslurm for this Slurm is installed, the job is simply not found
        assert listed["4242"].state is JobState.UNKNOWN and "cannot reach its pyslurm backend" in listed["4242"].reason
    res = run_cli("list")
    assert res.returncode == 0, res.stderr
    rows = {line.split()[0]: line for line in res.stdout.splitlines()[1:]}
    assert "COMPLETED" in rows[job.id] and "UNKNOWN" in rows["4343"] and "cannot reach" in rows["4343"]


def test_api_misuse_is_one_clear_error(tmp_path: Path) -> None:
    job = ti_slurm.submit(spec(tmp_path, mode="mpi", nodes=1, command="true"), backend="local")
    for call in (
        lambda: ti_slurm.get_job(job.id, host=5),  # type: ignore[arg-type]
        lambda: ti_slurm.submit(spec(tmp_path, mode="mpi", nodes=1, command="true"), host=5),  # type: ignore[arg-type]
        lambda: ti_slurm.jobs(host=["login"]),  # type: ignore[arg-type]
        lambda: job.wait(timeout="x"),  # type: ignore[arg-type]
        lambda: job.wait(timeout=-1),
    ):
        with pytest.raises(ti_slurm.ConfigError):
            call()
    assert job.wait(timeout=60).state is JobState.COMPLETED


def test_wait_notices_at_once_that_a_local_jobs_supervisor_was_killed(tmp_path: Path) -> None:
    import os
    import signal

    marker = f"sleep 8{uuid.uuid4().int % 1000:03d}"
    path = tmp_path / "job.yaml"
    path.write_text(f"mode: mpi\nnodes: 1\ncommand: '{marker}'\noutput_dir: {tmp_path / 'out'}\n")
    waiting = subprocess.Popen(["ti-slurm", "submit", "--local", "--wait", str(path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    job_id = waiting.stdout.readline().split()[0] if waiting.stdout else ""
    deadline = time.monotonic() + 30
    while not processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    pid = int((tmp_path / "out" / job_id / "supervisor.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)  # as the OOM killer does
    _, err = waiting.communicate(timeout=30)  # not the 150 s a controller's silent job waits
    assert waiting.returncode == 1 and "ended without a final record" in err, err
