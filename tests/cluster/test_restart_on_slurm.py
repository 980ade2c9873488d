"""Jobs that survive, on the real test cluster with real PyTorch (gloo, CPU): time limits, preemption,
a lost node, a failing rank, a hung rank, and a multi-role job preempted.

Each training run is seeded and deterministic (examples/ddp/resume.py), so the model of an interrupted
run must equal, parameter for parameter, the model of the same run without interruption.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import ti_slurm
from tests.cluster.conftest import Island
from tests.conftest import api_spec, processes_matching, ray_processes, run_cli, slurm_version
from tests.testcluster import this_cluster
from ti_slurm import JobState
from ti_slurm.follow.status import JobStatus

# a test that preempts (the urgent job asks for every node of lowprio, exclusively) or kills a node has an island
# of the cluster to itself (tests/cluster/conftest.py)
pytestmark = pytest.mark.usefixtures("cluster", "own_registry")
ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "ci" / "slurm-cluster"
IN_PLACE_ON_NODE_FAIL = "restart: {max: 0, on: [node_fail], in_place: 1}"
SEED_DDP = (
    "python -m torch.distributed.launch --nproc_per_node 1 --nnodes $WORLD_SIZE --node_rank $RANK "
    "--master_addr $MASTER_ADDR --master_port $MASTER_PORT resume.py"
)


def training(tmp_path: Path, steps: int, out: str, extra: str = "", **fields: object) -> dict[str, object]:
    """A 2-node DDP spec that trains ``steps`` steps of 0.5 s with examples/ddp/resume.py."""
    shutil.copy(ROOT / "examples" / "ddp" / "resume.py", tmp_path / "resume.py")
    command = f"{SEED_DDP} --steps {steps} --step-seconds 0.5 --out {out} {extra}"
    return api_spec(tmp_path, mode="ddp", nodes=2, workdir=str(tmp_path), command=command, **fields)


def training_file(tmp_path: Path, args: str, *lines: str, nodes: str = "2", partition: str = "") -> Path:
    """A spec file on disk, as users write one: DDP on ``nodes`` nodes training examples/ddp/resume.py ``args``
    through the seed's launch line; ``lines``: more of the spec's YAML."""
    shutil.copy(ROOT / "examples" / "ddp" / "resume.py", tmp_path / "resume.py")
    where = f"partition: {partition}\n" if partition else ""
    path = tmp_path / "job.yaml"
    path.write_text(
        f"mode: ddp\nnodes: {nodes}\n{where}workdir: {tmp_path}\noutput_dir: {tmp_path / 'jobs'}\n"
        f"command: {SEED_DDP} {args}\n" + "".join(f"{line}\n" for line in lines)
    )
    return path


def reference(tmp_path: Path, steps: int) -> dict[str, object]:
    """The final model of the same training, uninterrupted (run locally, without the sleeps)."""
    ref = tmp_path / "reference"
    ref.mkdir()
    shutil.copy(ROOT / "examples" / "ddp" / "resume.py", ref / "resume.py")
    command = f"{SEED_DDP} --steps {steps} --out model.json"
    spec = api_spec(ref, mode="ddp", nodes=2, workdir=str(ref), command=command)
    assert ti_slurm.submit(spec, backend="local").wait(timeout=300).state is JobState.COMPLETED
    return json.loads((ref / "model.json").read_text())


def wait_for_step(job: ti_slurm.Job, step: int, timeout: float = 180) -> None:
    """Until rank 0's log shows training at ``step``."""
    log = Path(job.job_dir) / "logs" / "ddp-0.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and f"step {step} " in log.read_text():
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job.id} did not reach step {step}: {log.read_text() if log.exists() else ''}")


def preempted_once(job: ti_slurm.Job, island: Island, running: Callable[[], bool]) -> JobStatus:
    """Once ``running()`` holds, preempt the job (in ``island.lowprio``); it must then complete in a second attempt."""
    deadline = time.monotonic() + 180
    while not running() and time.monotonic() < deadline:
        time.sleep(1)
    time.sleep(8)
    island.preempt()
    final = job.wait(timeout=600)
    assert final.state is JobState.COMPLETED, final.reason
    assert attempts(final) == [("PREEMPTED", True), ("COMPLETED", False)]
    return final


def assert_slurm_ran_it(job: ti_slurm.Job, times: int) -> None:
    """Slurm's own view agrees: the job ran ``times`` times and is not queued to run again. (Its state may read
    PREEMPTED on 25.11: Slurm keeps a preemption's grace flag through a requeue asked for during the grace.)"""
    shown: dict[str, str] = {}
    for _ in range(8):  # over a few seconds: a requeue at the end would show as PENDING again, Restarts + 1
        fields = subprocess.run(
            ["scontrol", "-o", "show", "job", job.id], capture_output=True, text=True, check=True
        ).stdout.split()
        shown = dict(f.split("=", 1) for f in fields if "=" in f)
        assert shown.get("JobState") not in ("PENDING", "RUNNING", "REQUEUED"), shown.get("JobState")
        time.sleep(1)
    assert shown.get("Restarts") == str(times - 1)


def assert_nothing_left(marker: str) -> None:
    deadline = time.monotonic() + 30
    while processes_matching(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_matching(marker) == []


def killed_and_followed(job: ti_slurm.Job, lost: str, timeout: float = 300) -> JobStatus:
    """Kill node ``lost`` (its slurmd and every process of it), follow the job to its end, revive the node."""
    subprocess.run([str(CLUSTER / "node"), "kill", lost], check=True)
    try:
        return job.wait(timeout=timeout)
    finally:
        subprocess.run([str(CLUSTER / "node"), "revive", lost], check=True)


def restarted_in_place_after_losing(job: ti_slurm.Job, lost: str) -> JobStatus:
    """Kill node ``lost`` and follow the job to its end: it completed in two attempts, the first ended by the
    loss and restarted in place."""
    final = killed_and_followed(job, lost)
    assert final.state is JobState.COMPLETED, final.reason
    shown = [(a.state, a.in_place) for a in final.attempts]
    assert shown == [("NODE_FAIL", True), ("COMPLETED", False)], [(a.state, a.reason) for a in final.attempts]
    return final


def attempts(status: JobStatus) -> list[tuple[str, bool]]:
    return [(a.state, a.requeued) for a in status.attempts]


def test_a_job_longer_than_its_time_limit_completes_through_requeues(tmp_path: Path) -> None:
    out = f"model-{uuid.uuid4().hex[:8]}.json"
    spec = training(tmp_path, 240, out, time="2", restart={"max": 4}, signal={"before": 30})
    job = ti_slurm.submit(spec)
    final = job.wait(timeout=900)
    assert final.state is JobState.COMPLETED, final.reason
    assert len(final.attempts) >= 2 and all(a == ("TIMEOUT", True) for a in attempts(final)[:-1])
    assert attempts(final)[-1] == ("COMPLETED", False)
    assert json.loads((tmp_path / out).read_text()) == reference(tmp_path, 240)
    first = Path(job.job_dir) / "attempts" / "0" / "logs" / "ddp-0.log"
    assert "saved step" in first.read_text()  # each attempt's logs are kept
    assert "starts at step 0" not in (Path(job.job_dir) / "logs" / "ddp-0.log").read_text()
    assert_nothing_left(out)


def test_a_preempted_job_saves_is_requeued_and_resumes(tmp_path: Path, island: Island) -> None:
    out = f"model-{uuid.uuid4().hex[:8]}.json"
    job = ti_slurm.submit(training(tmp_path, 100, out, partition=island.lowprio, restart={"max": 2}))
    wait_for_step(job, 40)
    urgent = island.preempt()
    final = job.wait(timeout=600)
    assert final.state is JobState.COMPLETED, final.reason
    assert attempts(final) == [("PREEMPTED", True), ("COMPLETED", False)]
    assert final.attempts[0].ended is not None and final.attempts[1].started is not None
    assert json.loads((tmp_path / out).read_text()) == reference(tmp_path, 100)
    assert urgent.isdigit()
    assert_slurm_ran_it(job, 2)
    assert_nothing_left(out)


@pytest.mark.parametrize("runtime", ["pyxis", "oci"])
def test_a_preempted_job_in_a_training_image_saves_and_resumes(tmp_path: Path, island: Island, runtime: str) -> None:
    """The checkpoint signal reaches the command inside the image, and only it (enroot's squashfuse, which
    holds the image's files, dies of SIGUSR2), and the image outlives torch's launcher, which dies of it."""
    images = Path("/var/lib/ti-slurm-test/images")
    image = images / ("train.sqsh" if runtime == "pyxis" else "train/bundle")
    if not image.exists():
        pytest.skip(f"no {image} (ci/containers/setup)")
    out = f"model-{uuid.uuid4().hex[:8]}.json"
    container = {"image": str(image), "runtime": runtime}
    spec = training(tmp_path, 100, out, partition=island.lowprio, restart={"max": 2}, container=container)
    job = ti_slurm.submit(spec)
    wait_for_step(job, 40)
    island.preempt()
    final = job.wait(timeout=600)
    assert final.state is JobState.COMPLETED, final.reason
    assert attempts(final) == [("PREEMPTED", True), ("COMPLETED", False)]
    first = (Path(job.job_dir) / "attempts" / "0" / "logs" / "ddp-0.log").read_text()
    assert "saved step" in first
    assert json.loads((tmp_path / out).read_text()) == reference(tmp_path, 100)  # the image's torch, the same model
    assert_slurm_ran_it(job, 2)
    assert_nothing_left(out)
    assert_nothing_left(re.escape(str(image)) if runtime == "pyxis" else rf"crun.* \S+\.{job.id}\.")


@pytest.mark.parametrize(
    "index",
    [1, 0],
    ids=[
        "another node: the supervisor requeues the job",
        "the batch node: the supervisor dies with it, Slurm requeues the job, the next attempt records the loss",
    ],
)
def test_a_job_that_loses_a_node_is_requeued_without_it(tmp_path: Path, island: Island, index: int) -> None:
    out = f"model-{uuid.uuid4().hex[:8]}.json"
    job = ti_slurm.submit(training(tmp_path, 100, out, partition=island.name, restart={"max": 2}))
    wait_for_step(job, 40)
    lost = job.status().components[0].nodes[index]  # node 0 runs the batch step, and so the supervisor
    final = killed_and_followed(job, lost, timeout=600)
    assert final.state is JobState.COMPLETED, final.reason
    assert attempts(final) == [("NODE_FAIL", True), ("COMPLETED", False)]
    assert final.attempts[0].lost_nodes == [lost] and lost in final.attempts[0].reason
    assert lost not in final.attempts[1].nodes
    assert json.loads((tmp_path / out).read_text()) == reference(tmp_path, 100)
    assert_nothing_left(out)


def test_a_shared_filesystem_stalled_for_a_minute_loses_no_node(tmp_path: Path) -> None:
    stallable = this_cluster().stallable  # the test cluster's filesystem that stall-fs freezes
    if not os.path.ismount(stallable):
        pytest.skip(f"{stallable} is not mounted (ci/slurm-cluster/up mounts it where loop devices work)")
    marker = f"sleep 3{uuid.uuid4().int % 1000:03d}"
    out = stallable / f"jobs-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "job.yaml"  # node03 fails while the filesystem is frozen: a failure, not a lost node
    spec.write_text(
        f"mode: mpi\nnodes: 3\npreflight: off\nrestart: {{max: 1, on: [node_fail]}}\noutput_dir: {out}\n"
        f"workdir: {tmp_path}\ncommand: 'if [ $INDEX = 2 ]; then sleep 15; exit 3; fi; {marker}'\n"
    )
    res = run_cli("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job = ti_slurm.get_job(res.stdout.split()[0])
    deadline = time.monotonic() + 120
    while len(list((out / job.id / "heartbeat").glob("*.step"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(6)  # every node's step has written its liveness file; now its first beats go out
    stall = subprocess.Popen([str(CLUSTER / "stall-fs"), "60"])
    try:
        final = job.wait(timeout=300)
    finally:
        stall.kill()
        subprocess.run(["fsfreeze", "-u", str(stallable)], capture_output=True, check=False)
    assert final.state is JobState.FAILED, final.reason
    assert re.fullmatch(r"mpi node node0\d \(index 2\) exited 3", final.reason), final.reason  # not "... lost"
    assert attempts(final) == [("FAILED", False)] and final.attempts[0].lost_nodes == []
    assert_nothing_left(marker)


def test_a_failing_rank_is_restarted_once_then_the_job_fails_naming_both_attempts(tmp_path: Path) -> None:
    out = f"model-{uuid.uuid4().hex[:8]}.json"
    spec = training(tmp_path, 40, out, "--fail-rank 1 --fail-step 5", restart={"max": 1, "on": ["failure"]})
    job = ti_slurm.submit(spec)
    final = job.wait(timeout=300)
    assert final.state is JobState.FAILED
    assert attempts(final) == [("FAILED", True), ("FAILED", False)]
    # rank 1 exits 3; torch's launcher on its node then exits 1
    assert final.failed["index"] == 1 and final.failed["exit_code"] == 1
    assert final.reason.endswith("(after 2 attempts)")
    for logs in (Path(job.job_dir) / "attempts" / "0" / "logs", Path(job.job_dir) / "logs"):
        assert "rank 1: exiting 3 on purpose at step 5" in (logs / "ddp-1.log").read_text()
    shown = subprocess.run(["ti-slurm", "status", job.id], capture_output=True, text=True, check=False).stdout
    assert "FAILED -> requeued" in shown and shown.count("(index 1) exited 1") >= 2
    assert_nothing_left(out)


def test_an_expedited_requeue_starts_again_at_once_and_a_last_failure_still_ends_failed(tmp_path: Path) -> None:
    """A site config on disk with ``expedited_requeue = true`` (Slurm 25.11, slurm.conf allowing it): a rank
    that fails is requeued and the next attempt starts without Slurm's requeue delay; the second failure ends
    the job FAILED (Slurm holds an expedited job whose batch script fails, unless its requeue was turned off)."""
    if slurm_version() < (25, 11):
        pytest.skip("expedited requeue is Slurm 25.11's")
    site = tmp_path / "site.toml"
    site.write_text((CLUSTER / "site.toml").read_text() + "expedited_requeue = true\n")
    out = f"model-{uuid.uuid4().hex[:8]}.json"
    spec = training_file(
        tmp_path,
        f"--steps 40 --step-seconds 0.5 --out {out} --fail-rank 1 --fail-step 5",
        "restart: {max: 1, on: [failure]}",
    )
    res = run_cli("submit", str(spec), "--wait", env={"TI_SLURM_CONFIG": str(site)})
    assert res.returncode != 0 and res.stdout, res.stderr
    job = ti_slurm.get_job(res.stdout.split()[0])
    final = job.status()
    assert final.state is JobState.FAILED and attempts(final) == [("FAILED", True), ("FAILED", False)]
    first, second = final.attempts
    assert first.ended is not None and second.started is not None
    # a plain requeue may not start before cred_expire + 1 s (6 s on the test cluster: slurm.conf's AuthInfo)
    print(f"attempt 0 ended -> attempt 1 started: {second.started - first.ended:.1f} s")
    assert second.started - first.ended < 5

    def slurm_view() -> dict[str, str]:
        fields = subprocess.run(["scontrol", "-o", "show", "job", job.id], capture_output=True, text=True).stdout
        return dict(f.split("=", 1) for f in fields.split() if "=" in f)

    deadline = time.monotonic() + 60  # COMPLETING while its nodes end the steps and run the Epilog
    while (shown := slurm_view()).get("JobState") == "COMPLETING" and time.monotonic() < deadline:
        time.sleep(0.5)
    for _ in range(5):  # then Slurm's view, over a few seconds: ended, not held for a requeue
        assert (shown.get("JobState"), shown.get("ExpeditedRequeue")) == ("FAILED", "Yes"), shown.get("JobState")
        time.sleep(1)
        shown = slurm_view()
    assert shown.get("Restarts") == "1"
    assert "FAILED -> requeued" in run_cli("status", job.id).stdout
    assert_nothing_left(out)


def test_a_hung_rank_is_found_by_the_watchdog_with_its_stack(tmp_path: Path) -> None:
    out = f"model-{uuid.uuid4().hex[:8]}.json"
    spec = training(tmp_path, 400, out, "--hang-rank 1 --fail-step 30", watchdog={"silence": 15})
    job = ti_slurm.submit(spec)
    wait_for_step(job, 20)
    hung_at = time.monotonic()
    final = job.wait(timeout=300)
    assert time.monotonic() - hung_at < 15 + 30  # silence + a few seconds (and the follower's poll)
    assert final.state is JobState.FAILED and final.reason.startswith("HUNG: node(s)")
    hung_node = final.components[0].nodes[1]
    assert hung_node in final.reason
    log = (Path(job.job_dir) / "logs" / "ddp-1.log").read_text()
    assert "hung: printed nothing for" in log
    assert "most recent call first" in log and "resume.py" in log  # faulthandler's stack of the training
    assert_nothing_left(out)


def test_a_ps_worker_job_survives_a_preemption(tmp_path: Path, island: Island) -> None:
    """Parameter servers are restarted with the workers; each worker resumes its count."""
    marker = f"sleep 9{uuid.uuid4().int % 1000:03d}"
    worker = (
        'f=$TI_SLURM_CHECKPOINT_DIR/$INDEX; n=$(cat "$f" 2>/dev/null || echo 0); '
        'trap \'echo "$n" > "$f"; echo saved $n; exit 0\' USR2; '
        "while [ $n -lt 60 ]; do n=$((n+1)); sleep 0.5; done; "
        'echo "$INDEX done $n after $TI_SLURM_RESTART_COUNT restarts"'
    )
    spec = api_spec(
        tmp_path,
        mode="ps-worker",
        partition=island.lowprio,
        command=f'if [ "$TI_SLURM_ROLE" = ps ]; then exec {marker}; fi; {worker}',
        ps={"nodes": 1},
        worker={"nodes": 2},
        restart={"max": 2},
    )
    job = ti_slurm.submit(spec)
    preempted_once(job, island, lambda: job.status().state is JobState.RUNNING)
    logs = "\n".join(job.logs())
    for index in (1, 2):  # the workers' INDEX (the ps is 0)
        assert f"{index} done 60 after 1 restarts" in logs
    saved = sorted((Path(job.job_dir) / "attempts" / "0" / "logs").glob("worker-*.log"))
    assert saved and all("saved " in p.read_text() for p in saved)
    assert_nothing_left(marker)


def test_a_ray_job_survives_a_preemption(tmp_path: Path, island: Island) -> None:
    """The head and the workers come back together; the driver resumes its count."""
    pytest.importorskip("ray", reason="ray is not installed")
    shutil.copy(ROOT / "examples" / "ray" / "resume.py", tmp_path / "resume.py")
    spec = api_spec(
        tmp_path,
        mode="ray",
        partition=island.lowprio,
        workdir=str(tmp_path),
        command="python resume.py 60",
        rendezvous_timeout=120,
        head={"cpus_per_node": 1},
        worker_groups=[{"nodes": 1, "cpus_per_node": 1}],
        restart={"max": 2},
    )
    job = ti_slurm.submit(spec)
    head_log = Path(job.job_dir) / "logs" / "head-0.log"
    preempted_once(job, island, lambda: head_log.exists() and "starts at 0" in head_log.read_text())
    assert "saved " in (Path(job.job_dir) / "attempts" / "0" / "logs" / "head-0.log").read_text()
    log = head_log.read_text()
    assert f"sum of squares below 60: {sum(i * i for i in range(60))} after 1 restarts" in log
    assert "starts at 0" not in log
    time.sleep(1)
    assert ray_processes(job.id) == []


def test_a_requeue_slurm_refuses_ends_the_job_failed_with_its_reason(tmp_path: Path) -> None:
    """As on a site with JobRequeue=0: here the job itself is made not requeueable once submitted (as an admin's
    ``scontrol update`` would; a spec's ``sbatch: {no-requeue: true}`` is refused beside restart)."""
    spec = api_spec(
        tmp_path, mode="ddp", nodes=1, command="sleep 3; exit 3", restart={"max": 2, "on": ["failure"]},
    )  # fmt: skip
    job = ti_slurm.submit(spec)
    subprocess.run(["scontrol", "update", f"JobId={job.id}", "Requeue=0"], check=True)
    final = job.wait(timeout=120)
    assert final.state is JobState.FAILED and attempts(final) == [("FAILED", False)]
    assert final.reason.startswith("ddp node node0") and "exited 3; Slurm refused to requeue the job: " in final.reason


def test_only_the_failed_task_of_a_job_array_is_requeued(tmp_path: Path) -> None:
    """The rendered script submitted by hand as a 2-task array: task 1 fails once and is requeued alone."""
    command = 'if [ "$SLURM_ARRAY_TASK_ID" = 1 ] && [ "$TI_SLURM_RESTART_COUNT" = 0 ]; then exit 3; fi; echo ok'
    spec = api_spec(tmp_path, mode="ddp", nodes=1, command=command, restart={"max": 1, "on": ["failure"]})
    script = tmp_path / "job.sh"
    script.write_text(ti_slurm.render(spec))
    (tmp_path / "out").mkdir()
    array = subprocess.run(
        ["sbatch", "--parsable", "--array=0-1", str(script)], capture_output=True, text=True, check=True
    ).stdout.strip()
    deadline = time.monotonic() + 180
    while (
        time.monotonic() < deadline
        and subprocess.run(["squeue", "-h", "-j", array], capture_output=True, text=True, check=False).stdout.strip()
    ):
        time.sleep(1)
    shown = {
        task: subprocess.run(
            ["scontrol", "-o", "show", "job", f"{array}_{task}"], capture_output=True, text=True, check=True
        ).stdout
        for task in (0, 1)
    }
    assert "JobState=COMPLETED" in shown[0] and "Restarts=0" in shown[0]
    assert "JobState=COMPLETED" in shown[1] and "Restarts=1" in shown[1]


def test_a_failing_rank_is_restarted_in_place_and_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    """No requeue: the same allocation, Slurm's Restarts=0, and the final model equals the uninterrupted one."""
    out = f"model-{uuid.uuid4().hex[:8]}.json"
    extra = "--fail-rank 1 --fail-step 25 --fail-once --save-every 10"
    spec = training(tmp_path, 40, out, extra, restart={"max": 0, "on": ["failure"], "in_place": 2})
    job = ti_slurm.submit(spec)
    final = job.wait(timeout=300)
    assert final.state is JobState.COMPLETED, final.reason
    assert [(a.state, a.in_place) for a in final.attempts] == [("FAILED", True), ("COMPLETED", False)]
    # rank 1 exits 3 saying why in words no signature knows; the other rank's error after it is a consequence
    assert final.attempts[0].cause == "unknown" and final.attempts[0].nodes == final.attempts[1].nodes
    assert json.loads((tmp_path / out).read_text()) == reference(tmp_path, 40)
    aside = Path(job.job_dir) / "attempts" / "0" / "logs"
    assert "rank 1: exiting 3 on purpose at step 25" in (aside / "ddp-1.log").read_text()
    assert "rank 0: attempt 1 starts at step 20" in (Path(job.job_dir) / "logs" / "ddp-0.log").read_text()
    assert_slurm_ran_it(job, 1)
    shown = run_cli("status", job.id).stdout
    assert re.search(r"FAILED -> restarted in place unknown +ddp node", shown), shown
    assert_nothing_left(out)


def test_a_lost_node_is_replaced_by_a_spare_in_place_from_a_yaml_spec(tmp_path: Path, island: Island) -> None:
    """A node dies (its slurmd and every process of it): a spare held in the allocation takes its place and
    rank within seconds, the training resumes from its checkpoint, no requeue, the same model as without."""
    out = f"model-{uuid.uuid4().hex[:8]}.json"
    args = f"--steps 60 --step-seconds 0.5 --out {out} --save-every 10"
    spec = training_file(tmp_path, args, "spare_nodes: 1", IN_PLACE_ON_NODE_FAIL, partition=island.name)
    res = run_cli("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job = ti_slurm.get_job(res.stdout.split()[0])
    wait_for_step(job, 20)  # saved at step 20
    first = job.status()
    lost = first.components[0].nodes[1]  # not node 0: it runs the batch step, and so the supervisor
    killed = time.time()
    final = restarted_in_place_after_losing(job, lost)
    before, after = final.attempts
    assert before.lost_nodes == [lost] and lost in before.reason
    (spare,) = after.replaced.values()
    assert after.replaced == {lost: spare} and spare not in before.nodes and spare in island.nodes
    assert after.nodes == [before.nodes[0], spare]  # the spare took the lost node's rank
    assert after.started is not None
    print(f"node killed -> the spare's attempt started: {after.started - killed:.1f} s")
    assert json.loads((tmp_path / out).read_text()) == reference(tmp_path, 60)
    resumed = re.search(
        r"rank 1: attempt 1 starts at step (\d+)", (Path(job.job_dir) / "logs" / "ddp-1.log").read_text()
    )
    assert resumed and int(resumed[1]) >= 20  # from the checkpoint, on the spare
    assert_slurm_ran_it(job, 1)
    shown = run_cli("status", job.id).stdout
    assert f"spare {spare} took the place of lost node {lost}" in shown, shown
    assert re.search(r"spare nodes: up to 1 held idle, \d+\.\d\d node-hours \(\d+% of the job's", shown), shown
    assert_nothing_left(out)


def test_a_node_slurm_cannot_start_the_step_on_is_named_and_swapped_for_a_spare(
    tmp_path: Path, island: Island
) -> None:
    """A node's slurmd dies between two attempts (its running step lives on): Slurm cannot start the next
    attempt's step there ("Task launch ... failed on node X"). That is the node's failure, said in Slurm's words,
    not the training's: the spare takes its place and the job completes."""
    master, bad, spare = island.nodes[:3]
    first = "[ $TI_SLURM_RESTART_COUNT = 0 ] && { touch started-$INDEX; until [ -e go ]; do sleep 0.2; done; exit 3; }"
    (tmp_path / "job.yaml").write_text(
        f"mode: ddp\nnodes: 2\npartition: {island.name}\nworkdir: {tmp_path}\noutput_dir: {tmp_path / 'jobs'}\n"
        f"sbatch: {{nodelist: '{master},{bad},{spare}'}}\nspare_nodes: 1\n"
        f"command: '{first}; echo $INDEX $(hostname) > ran-$INDEX'\n"
        "restart: {max: 0, on: [failure, node_fail], in_place: 2}\n"
    )
    res = run_cli("submit", str(tmp_path / "job.yaml"))
    assert res.returncode == 0, res.stderr
    job = ti_slurm.get_job(res.stdout.split()[0])
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"started-{i}").exists() for i in range(2)) and time.monotonic() < deadline:
            time.sleep(0.3)
        subprocess.run([str(CLUSTER / "node"), "refuse", bad], check=True)  # its slurmd only
        (tmp_path / "go").touch()  # attempt 0 fails (exit 3); attempt 1's step cannot start on the bad node
        final = job.wait(timeout=240)
    finally:
        subprocess.run([str(CLUSTER / "node"), "revive", bad], check=True)
    assert final.state == "COMPLETED", final.reason
    assert [(tmp_path / f"ran-{i}").read_text().split() for i in range(2)] == [["0", master], ["1", spare]]
    refused = final.attempts[1]
    assert refused.lost_nodes == [bad] and refused.cause == "launch", refused
    assert refused.reason.startswith(f"Slurm could not start the step on node(s) {bad} ("), refused.reason
    shown = run_cli("status", job.id).stdout
    assert f"spare {spare} took the place of lost node {bad}" in shown, shown


def test_a_node_that_fails_its_preflight_is_swapped_for_a_spare_from_a_yaml_spec(
    tmp_path: Path, island: Island
) -> None:
    """One node resolves the master's name to a wrong address (its own /etc/hosts): its preflight fails, and the
    spare takes its place and rank in a restart in place; the job completes on the master and the spare."""
    master, bad, spare = island.nodes[:3]
    hosts = this_cluster().hosts_file(bad)
    saved = hosts.read_text()
    entry = re.search(rf"^(\S+) {master}\b.*$", saved, re.M)
    assert entry, saved
    (tmp_path / "job.yaml").write_text(
        f"mode: ddp\nnodes: 2\npartition: {island.name}\nworkdir: {tmp_path}\noutput_dir: {tmp_path / 'jobs'}\n"
        f"sbatch: {{nodelist: '{master},{bad},{spare}'}}\n"
        "command: echo $INDEX $(hostname) > ran-$INDEX\n"
        f"spare_nodes: 1\n{IN_PLACE_ON_NODE_FAIL}\n"
    )
    hosts.write_text(saved.replace(entry.group(0), f"10.77.0.99 {master}"))
    try:
        res = run_cli("submit", "--wait", str(tmp_path / "job.yaml"))
    finally:
        hosts.write_text(saved)
    assert res.returncode == 0, res.stderr
    assert [(tmp_path / f"ran-{i}").read_text().split() for i in range(2)] == [["0", master], ["1", spare]]
    shown = run_cli("status", res.stdout.split()[0]).stdout
    assert f"failed preflight on {bad}: resolves {master} to 10.77.0.99" in shown, shown
    assert f"spare {spare} took the place of lost node {bad}" in shown, shown


def test_an_elastic_job_starts_on_what_slurm_gives_and_goes_on_without_a_lost_node(
    tmp_path: Path, island: Island
) -> None:
    """``nodes: {min: 2, max: n+1}`` on an island of n: Slurm gives what it has free (n, or fewer while a node
    of the island is still coming back from an earlier test) and the training sees that many ranks; a node
    dies with no spare: the job restarts in place on the nodes left (no requeue), and the training sees them."""
    n = len(island.nodes)
    out = f"model-{uuid.uuid4().hex[:8]}.json"
    args = f"--steps 60 --step-seconds 0.5 --out {out} --save-every 10"
    spec = training_file(
        tmp_path, args, IN_PLACE_ON_NODE_FAIL, nodes=f"{{min: 2, max: {n + 1}}}", partition=island.name
    )
    res = run_cli("submit", str(spec))
    assert res.returncode == 0, res.stderr
    job = ti_slurm.get_job(res.stdout.split()[0])
    wait_for_step(job, 20)
    logs = Path(job.job_dir) / "logs"
    given = job.status().components[0].nodes
    assert 3 <= len(given) <= n, given
    assert f"rank 0: attempt 0 starts at step 0, {len(given)} ranks" in (logs / "ddp-0.log").read_text()
    lost = given[1]  # not node 0: it runs the batch step, and so the supervisor
    final = restarted_in_place_after_losing(job, lost)
    before, after = final.attempts
    assert before.nodes == given and before.lost_nodes == [lost]
    assert after.replaced == {lost: None} and after.nodes == [name for name in before.nodes if name != lost]
    resumed = re.search(
        rf"rank 1: attempt 1 starts at step (\d+), {len(given) - 1} ranks", (logs / "ddp-1.log").read_text()
    )
    assert resumed and int(resumed[1]) >= 20  # from the checkpoint, on one node fewer
    assert json.loads((tmp_path / out).read_text())["steps"] == 60
    assert_slurm_ran_it(job, 1)
    shown = run_cli("status", job.id).stdout
    assert f"went on without lost node {lost}, on {len(given) - 1} nodes" in shown, shown
    assert_nothing_left(out)


def test_a_hang_is_restarted_in_place_once_from_a_yaml_spec(tmp_path: Path) -> None:
    """Through the CLI and a YAML file: the watchdog finds the hung rank, the commands restart in place."""
    out = f"model-{uuid.uuid4().hex[:8]}.json"
    args = f"--steps 60 --step-seconds 0.5 --out {out} --hang-rank 1 --fail-step 30 --fail-once --save-every 10"
    training_file(tmp_path, args, "watchdog: {silence: 15}", "restart: {max: 0, on: [hang], in_place: 1}")
    res = run_cli("submit", "--wait", "job.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.split()[0]
    shown = run_cli("status", job_id).stdout
    assert re.search(r"FAILED -> restarted in place hang +HUNG: node\(s\)", shown), shown
    assert json.loads((tmp_path / out).read_text()) == reference(tmp_path, 60)
    assert "attempt 1 starts at step 30" in (tmp_path / "jobs" / job_id / "logs" / "ddp-1.log").read_text()
    assert_nothing_left(out)


def test_a_ps_worker_job_restarts_in_place_ps_and_workers_together(tmp_path: Path) -> None:
    marker = f"sleep 9{uuid.uuid4().int % 1000:03d}"
    attempt = "attempt $TI_SLURM_RESTART_COUNT"
    # the workers start once the ps is up, as they would connect to it (else, on a loaded machine, the workers of
    # the second attempt may end the job before its ps has said a word)
    up = '"$TI_SLURM_JOB_DIR/ps-up-$TI_SLURM_RESTART_COUNT"'
    worker = (
        f'if [ "$TI_SLURM_RESTART_COUNT" = 0 ] && [ "$INDEX" = 2 ]; then exit 4; fi; '
        f'while [ ! -e {up} ]; do sleep 0.2; done; echo "$INDEX {attempt}"'
    )
    spec = api_spec(
        tmp_path,
        mode="ps-worker",
        command=f'if [ "$TI_SLURM_ROLE" = ps ]; then echo ps {attempt}; touch {up}; exec {marker}; fi; {worker}',
        ps={"nodes": 1},
        worker={"nodes": 2},
        restart={"max": 0, "on": ["failure"], "in_place": 1},
    )
    final = ti_slurm.submit(spec).wait(timeout=300)
    assert final.state is JobState.COMPLETED, final.reason
    assert [(a.state, a.in_place) for a in final.attempts] == [("FAILED", True), ("COMPLETED", False)]
    logs = Path(final.job_dir) / "logs"
    assert (logs / "ps-0.log").read_text() == "ps attempt 1\n"
    assert [(logs / f"worker-{i}.log").read_text() for i in (0, 1)] == ["1 attempt 1\n", "2 attempt 1\n"]
    assert_nothing_left(marker)


def test_a_ps_worker_job_swaps_a_lost_worker_for_a_spare_and_tf_config_names_it(tmp_path: Path, island: Island) -> None:
    """``worker: {nodes: 2}`` and ``spare_nodes: 1`` (spares join the workers): a worker's node dies, the spare
    takes its place and index, the ps and the workers restart in place, and every TF_CONFIG lists the spare."""
    marker = f"sleep 9{uuid.uuid4().int % 1000:03d}"
    record = f'echo "$(hostname) $TF_CONFIG" > {tmp_path}/w-$TI_SLURM_RESTART_COUNT-$INDEX'
    wait = '[ "$TI_SLURM_RESTART_COUNT" != 0 ] || sleep 300'  # the first attempt's workers wait to be killed
    (tmp_path / "job.yaml").write_text(
        f"mode: ps-worker\npartition: {island.name}\noutput_dir: {tmp_path / 'jobs'}\n"
        f"command: 'if [ $TI_SLURM_ROLE = ps ]; then exec {marker}; fi; {record}; {wait}'\n"
        f"ps: {{nodes: 1}}\nworker: {{nodes: 2}}\nspare_nodes: 1\n{IN_PLACE_ON_NODE_FAIL}\n"
    )
    res = run_cli("submit", str(tmp_path / "job.yaml"))
    assert res.returncode == 0, res.stderr
    job = ti_slurm.get_job(res.stdout.split()[0])
    first = [tmp_path / f"w-0-{i}" for i in (1, 2)]
    deadline = time.monotonic() + 120
    while not all(f.exists() for f in first) and time.monotonic() < deadline:
        time.sleep(0.5)
    lost = first[1].read_text().split()[0]  # worker index 2's node (the ps node runs the batch step)
    final = restarted_in_place_after_losing(job, lost)
    (spare,) = final.attempts[1].replaced.values()
    assert final.attempts[1].replaced == {lost: spare}
    again = [(tmp_path / f"w-1-{i}").read_text().split(maxsplit=1) for i in (1, 2)]
    assert again[1][0] == spare  # the spare took index 2
    hosts = [w.split(":")[0] for w in json.loads(again[0][1])["cluster"]["worker"]]  # TF_CONFIG: ip:port
    assert hosts == [this_cluster().node_addr(again[0][0]), this_cluster().node_addr(spare)]
    assert all(json.loads(tf)["cluster"] == json.loads(again[0][1])["cluster"] for _, tf in again)
    assert_nothing_left(marker)


def test_a_ray_job_restarts_in_place_head_workers_and_driver(tmp_path: Path) -> None:
    """The driver fails once after its work: the head and the worker daemons come back in the same
    allocation (their ports free again), and the driver runs again to the end."""
    pytest.importorskip("ray", reason="ray is not installed")
    shutil.copy(ROOT / "examples" / "ray" / "resume.py", tmp_path / "resume.py")
    spec = api_spec(
        tmp_path,
        mode="ray",
        workdir=str(tmp_path),
        command='python resume.py 10 && [ "$TI_SLURM_RESTART_COUNT" != 0 ]',
        rendezvous_timeout=120,
        head={"cpus_per_node": 1},
        worker_groups=[{"nodes": 1, "cpus_per_node": 1}],
        restart={"max": 0, "on": ["failure"], "in_place": 1},
    )
    job = ti_slurm.submit(spec)
    final = job.wait(timeout=400)
    assert final.state is JobState.COMPLETED, final.reason
    assert [(a.state, a.in_place) for a in final.attempts] == [("FAILED", True), ("COMPLETED", False)]
    squares = sum(i * i for i in range(10))
    first = (Path(job.job_dir) / "attempts" / "0" / "logs" / "head-0.log").read_text()
    assert f"sum of squares below 10: {squares} after 0 restarts" in first
    log = (Path(job.job_dir) / "logs" / "head-0.log").read_text()
    assert f"sum of squares below 10: {squares} after 1 restarts" in log
    time.sleep(1)
    assert ray_processes(job.id) == []
