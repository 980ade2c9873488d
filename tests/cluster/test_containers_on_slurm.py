"""Every mode inside a training image on the real test cluster: enroot (runtime pyxis) and crun (runtime oci).

The images come from ``ci/containers/setup``: ``base`` (Debian bookworm + python3) and ``train``
(+ Open MPI and torch). Neither holds anything of ti-slurm; both carry ``/.image-method``, a file
the nodes themselves do not have, so a command that reads it ran inside the image.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from pathlib import Path

import pytest

from tests.cluster.conftest import Island
from tests.cluster.test_modes_on_slurm import SEED_DDP, SEED_MPIRUN, Job
from tests.conftest import ROOT, processes_matching, ray_processes, run_cli, slurm_conf
from tests.testcluster import this_cluster

IMAGES = Path(os.environ.get("TI_SLURM_IMAGES", "/var/lib/ti-slurm-test/images"))
RUNTIMES = {"pyxis": ("train.sqsh", "base.sqsh"), "oci": ("train/bundle", "base/bundle")}


@pytest.fixture(scope="module", autouse=True)
def images(cluster: None) -> None:
    if not (IMAGES / "train.sqsh").exists() or shutil.which("enroot") is None:
        if os.environ.get("TI_SLURM_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"no test images in {IMAGES} or no enroot (run ci/containers/setup)")
        pytest.skip(f"no test images in {IMAGES} or no enroot (run ci/containers/setup as root)")


def container(runtime: str, image: str = "train", extra: str = "") -> str:
    """The spec's ``container:`` section (flow style) for one of the test images."""
    path = IMAGES / RUNTIMES[runtime][0 if image == "train" else 1]
    return f"{{image: {path}, runtime: {runtime}{extra}}}"


@pytest.mark.parametrize("runtime", ["pyxis", "oci"])
def test_ddp_with_the_seed_launch_line_trains_in_sync_inside_the_image(tmp_path: Path, runtime: str) -> None:
    shutil.copy(ROOT / "examples" / "ddp" / "train.py", tmp_path / "train.py")
    # the seed's line unchanged: `python` is the image's (its torch), not this machine's
    job = Job(
        tmp_path,
        f"mode: ddp\nnodes: 2\ngpus_per_node: 2\ncontainer: {container(runtime)}\ncommand: {SEED_DDP} --epochs 5",
    )
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    logs = job.logs()
    ranks = dict(re.findall(r"rank (\d)/4 on (node\d\d)", logs))
    assert sorted(ranks) == ["0", "1", "2", "3"] and len(set(ranks.values())) == 2
    assert logs.count("in_sync=True") == 4


def test_the_seed_mpirun_line_inside_the_image_runs_in_every_nodes_container(tmp_path: Path) -> None:
    probe = 'bash -c "echo rank \\$OMPI_COMM_WORLD_RANK on \\$(hostname) in \\$(cat /.image-method)"'
    job = Job(
        tmp_path,
        f"mode: horovod\nnodes: 3\ngpus_per_node: 2\ncontainer: {container('pyxis')}\ncommand: '{SEED_MPIRUN} {probe}'",
    )
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    ranks = re.findall(r"rank (\d) on (node\d\d) in mmdebstrap", job.logs())
    assert sorted(r for r, _ in ranks) == [str(i) for i in range(6)]
    hosts = [h for _, h in ranks]
    assert len(set(hosts)) == 3 and all(hosts.count(h) == 2 for h in hosts)


PS_WORKER = """
import json, os, sys, time
try:
    import torch
    has = "torch"
except ImportError:
    has = "no torch"
tf = json.loads(os.environ["TF_CONFIG"])
print(tf["task"]["type"], tf["task"]["index"], has, len(tf["cluster"]["ps"]), len(tf["cluster"]["worker"]), flush=True)
if tf["task"]["type"] == "ps":
    time.sleep(600)  # parameter servers never end by themselves
"""


@pytest.mark.parametrize("runtime", ["pyxis", "oci"])
def test_ps_worker_with_parameter_servers_in_a_smaller_image(tmp_path: Path, runtime: str) -> None:
    (tmp_path / "task.py").write_text(PS_WORKER)
    body = (
        f"mode: ps-worker\ncommand: python3 task.py\ncontainer: {container(runtime)}\n"
        f"ps: {{nodes: 1, container: {container(runtime, 'base')}}}\nworker: {{nodes: 2}}"
    )
    job = Job(tmp_path, body)
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    lines = sorted(line for line in job.logs().splitlines() if line.startswith(("ps ", "worker ")))
    assert lines == ["ps 0 no torch 1 2", "worker 0 torch 1 2", "worker 1 torch 1 2"]
    assert job.status()["state"] == "COMPLETED"
    assert processes_matching(str(tmp_path / "out")) == []


@pytest.mark.parametrize("runtime", ["pyxis", "oci"])
def test_a_node_sees_the_image_the_job_directory_the_mounts_and_the_contract(tmp_path: Path, runtime: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-0").write_text("from the host\n")
    probe = (
        "echo image=$(cat /.image-method) data=$(cat /data/shard-0) rank=$RANK master=$MASTER_ADDR "
        "path=$PATH pwd=$(pwd); touch /data/written 2>/dev/null || echo data read-only; "
        "echo $INDEX > $TI_SLURM_JOB_DIR/seen-$INDEX; test -d $TI_SLURM_CHECKPOINT_DIR && echo checkpoint dir"
    )
    extra = f", mounts: ['{data}:/data:ro'], workdir: /tmp"
    job = Job(tmp_path, f"mode: ddp\nnodes: 2\ncontainer: {container(runtime, 'base', extra)}\ncommand: '{probe}'")
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    logs = job.logs()
    for rank in (0, 1):
        line = re.search(
            rf"image=mmdebstrap data=from the host rank={rank} master={this_cluster().node_addr_rx} (.*)", logs
        )
        assert line, logs
        # the image's own PATH (not this machine's), and the container's workdir
        assert line.group(1) == "path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin pwd=/tmp"
        assert (job.job_dir / f"seen-{rank}").read_text() == f"{rank}\n"  # the job directory, at its own path
    assert logs.count("data read-only") == 2 and not (data / "written").exists()
    assert logs.count("checkpoint dir") == 2


def test_the_ray_seed_example_runs_inside_the_image(tmp_path: Path, island: Island) -> None:
    """Ray's head, workers and driver all run the image's ray (this machine's is not on the image's PATH); the
    seed's own command, `cd /opt/ml/code; python job.py`, with the code snapshot where TI's images have it."""
    (tmp_path / "code").mkdir()
    for name in ("job.py", "rank.py"):
        shutil.copy(ROOT / "examples" / "ray" / name, tmp_path / "code" / name)
    body = (
        f"mode: ray\ncode: {tmp_path / 'code'}\ncommand: cd /opt/ml/code; python job.py && python rank.py && "
        "python -c 'import ray; print(\"ray from\", ray.__file__)'\nrendezvous_timeout: 120\n"
        f"partition: {island.name}\n"
        f"container: {container('pyxis')}\nhead: {{cpus_per_node: 1}}\nworker_groups:\n"
        "  - {nodes: 1, cpus_per_node: 1}\n  - {nodes: 1, cpus_per_node: 2, gpus_per_node: 1}"
    )
    job = Job(tmp_path, body)
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    head_log = (job.job_dir / "logs" / "head-0.log").read_text()
    assert "计数器结果: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]" in head_log
    assert re.search(r"f\(1, 2, 3\) = 6 on node\d\d \(RANK=1\)", head_log)
    # the driver's ray is the image's (this machine's is in /root/.pyenv, not mounted there)
    assert "ray from /usr/local/lib/python3.11/dist-packages/ray/__init__.py" in head_log
    time.sleep(1)
    assert ray_processes(job.id) == []


def fails_at_once(tmp_path: Path, body: str, cause: str, node: str = r"node\d\d") -> None:
    """The job fails before its command with one line naming a node (the first to report) and ``cause``."""
    started = time.monotonic()
    command = f"sleep 3{uuid.uuid4().int % 1000:03d}"  # this test's own: the node whose image works started it
    job = Job(tmp_path, f"mode: ddp\nnodes: 2\n{body}\ncommand: {command}")
    assert job.result.returncode == 1
    line = rf"FAILED: ddp node ({node}) \(index \d\) failed container on \1: {re.escape(cause)}"
    assert re.search(line, job.result.stderr), job.result.stderr
    assert job.status()["state"] == "FAILED"
    assert time.monotonic() - started < 120  # not the command's 300 s: it never started (or was stopped)
    deadline = time.monotonic() + 30
    while processes_matching(command) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_matching(command) == []


@pytest.mark.parametrize("runtime", ["pyxis", "oci"])
def test_a_missing_image_fails_the_job_naming_the_node(tmp_path: Path, runtime: str) -> None:
    missing = tmp_path / ("nothing.sqsh" if runtime == "pyxis" else "nothing")
    cause = "no such file" if runtime == "pyxis" else "no config.json"
    fails_at_once(
        tmp_path,
        f"container: {{image: {missing}, runtime: {runtime}}}",
        f"image {missing}: {cause}",
    )


def test_a_bad_mount_fails_the_job_naming_the_node(tmp_path: Path) -> None:
    extra = f", mounts: ['{tmp_path}/absent:/data']"
    fails_at_once(
        tmp_path,
        f"container: {container('pyxis', 'base', extra)}",
        f"mount {tmp_path}/absent: no such file or directory on this node",
    )


def test_a_node_without_the_runtime_fails_the_job_naming_it(tmp_path: Path, island: Island) -> None:
    first, faulty = island.nodes[:2]
    fault = this_cluster().state / f"fault-{faulty}"  # its tasks find no enroot (it is in /usr/local/bin)
    fault.write_text("export PATH=/usr/sbin:/usr/bin:/sbin:/bin\n")
    try:
        fails_at_once(
            tmp_path,
            f"partition: {island.name}\nsbatch: {{nodelist: '{first},{faulty}'}}\n"
            f"container: {container('pyxis', 'base')}",
            "runtime pyxis needs enroot, which is not on this node's PATH",
            node=faulty,
        )
    finally:
        fault.unlink()


@pytest.mark.parametrize("runtime", ["pyxis", "oci"])
def test_cancel_leaves_no_container_and_no_process(tmp_path: Path, runtime: str) -> None:
    command = f"sleep 8{uuid.uuid4().int % 1000:03d}"
    job = Job(tmp_path, f"mode: mpi\nnodes: 2\ncontainer: {container(runtime, 'base')}\ncommand: {command}", wait=False)
    marker = f"^{command}$"  # the command itself, running in the image (not the runtime's line that starts it)
    deadline = time.monotonic() + 60
    while len(processes_matching(marker)) < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert len(processes_matching(marker)) == 2
    image = str(IMAGES / "base")
    # the runtime's own processes: enroot's squashfuse of the image, crun of the job's containers
    runtime_processes = re.escape(image) if runtime == "pyxis" else rf"crun.* \S+\.{job.id}\.\S+$"
    assert processes_matching(runtime_processes)
    assert run_cli("cancel", job.id, env=job.env).returncode == 0
    patterns = (command, runtime_processes, re.escape(str(tmp_path / "out")))

    def crun_state() -> list[Path]:  # crun's state of the job's containers, deleted once each has exited
        return list(Path("/run/crun-slurm").glob(f"*/*.{job.id}.*"))

    deadline = time.monotonic() + 60
    while (any(processes_matching(p) for p in patterns) or crun_state()) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert processes_matching(command) == []
    assert processes_matching(runtime_processes) == []
    assert processes_matching(str(tmp_path / "out")) == []
    assert job.status()["state"] == "CANCELLED"
    if runtime == "oci":  # crun's state of the job's containers: gone
        assert crun_state() == []
    else:  # enroot's mounts of the image: gone
        assert image not in Path("/proc/mounts").read_text()


@pytest.mark.parametrize("runtime", ["pyxis", "oci"])
def test_a_command_in_an_image_that_ti_slurm_stops_leaves_nothing(tmp_path: Path, runtime: str) -> None:
    """The workers' rendezvous guard stops their commands (not Slurm): the image's processes go too, although
    an OCI runtime starts them in a session of their own."""
    command = f"sleep 7{uuid.uuid4().int % 1000:03d}"
    body = f"mode: ddp\nnodes: 2\nrendezvous_timeout: 3\ncontainer: {container(runtime, 'base')}\ncommand: {command}"
    job = Job(tmp_path, body)
    assert job.result.returncode == 1 and "exited 124" in job.result.stderr, job.result.stderr
    assert "rendezvous timeout" in job.logs()
    runtime_processes = re.escape(str(IMAGES / "base")) if runtime == "pyxis" else rf"crun.* \S+\.{job.id}\."
    deadline = time.monotonic() + 30
    while (processes_matching(command) or processes_matching(runtime_processes)) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert processes_matching(command) == [] and processes_matching(runtime_processes) == []
    assert not list(Path("/run/crun-slurm").glob(f"*/*.{job.id}.*"))


def test_doctor_says_which_runtimes_a_node_can_use(tmp_path: Path) -> None:
    res = run_cli("doctor")
    conf_dir = slurm_conf().parent  # /etc/slurm (22.05) or /etc/slurm-25.11: doctor asks Slurm where it is
    assert re.search(r"container: pyxis +ok .*enroot 4\.\d+\.\d+; pyxis /\S+/slurm/spank_pyxis\.so", res.stdout)
    assert re.search(rf"container: oci +ok .*{conf_dir}/oci\.conf: /usr/local/bin/crun-slurm", res.stdout)
    # a node with neither: no enroot on PATH, a Slurm config directory without oci.conf
    shutil.copy(conf_dir / "slurm.conf", tmp_path / "slurm.conf")
    env = {
        "PATH": "/usr/bin:/bin:" + os.path.dirname(shutil.which("ti-slurm") or ""),
        "SLURM_CONF": str(tmp_path / "slurm.conf"),
    }
    res = run_cli("doctor", env=env)
    assert re.search(
        r"container: pyxis +warn .*enroot not found: specs with container runtime pyxis cannot run", res.stdout
    )
    assert re.search(rf"container: oci +warn .*no RunTimeRun in {tmp_path}/oci\.conf", res.stdout)


def layout_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """A code directory and a data channel, as a user has them on the shared filesystem."""
    code, data = tmp_path / "code", tmp_path / "data" / "train"
    code.mkdir()
    data.mkdir(parents=True)
    (data / "part-0").write_text("ten thousand images\n")
    (code / "show.py").write_text(
        "import argparse, os, socket\n"
        "p = argparse.ArgumentParser(); p.add_argument('--data-dir'); a = p.parse_args()\n"
        "rank = os.environ.get('OMPI_COMM_WORLD_RANK', os.environ.get('INDEX'))\n"
        "seen = open(os.path.join(a.data_dir, 'part-0')).read().strip()\n"
        "image = open('/.image-method').read().strip()\n"
        "print(f'rank {rank} on {socket.gethostname()} in {image} from {os.getcwd()}: {seen}', flush=True)\n"
        "open(f'/opt/ml/model/m-{rank}', 'w').write('model')\n"
    )
    return code, data


@pytest.mark.parametrize("runtime", ["pyxis", "oci"])
def test_the_seeds_opt_ml_paths_hold_inside_the_image(tmp_path: Path, runtime: str) -> None:
    """TI's layout in the image: the code snapshot at /opt/ml/code, a channel at /opt/ml/input/data/<name>."""
    code, data = layout_dirs(tmp_path)
    body = (
        f"mode: ddp\nnodes: 2\ncode: {code}\ninputs: {{train: {data}}}\noutputs: {tmp_path / 'runs'}\n"
        f"container: {container(runtime, 'base')}\n"
        "command: cd /opt/ml/code; python3 show.py --data-dir /opt/ml/input/data/train"
    )
    job = Job(tmp_path, body)
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    lines = sorted(re.findall(r"rank (\d) on node\d\d in \S+ from (\S+): (.*)", job.logs()))
    assert lines == [("0", "/opt/ml/code", "ten thousand images"), ("1", "/opt/ml/code", "ten thousand images")]
    assert sorted(p.name for p in (tmp_path / "runs" / job.id / "model").iterdir()) == ["m-0", "m-1"]


def test_the_seed_mpirun_line_reads_its_data_dir_inside_the_image(tmp_path: Path) -> None:
    code, data = layout_dirs(tmp_path)
    command = f"cd /opt/ml/code; {SEED_MPIRUN} python3 show.py --data-dir /opt/ml/input/data/train"
    body = (
        f"mode: horovod\nnodes: 2\ngpus_per_node: 2\ncode: {code}\ninputs: {{train: {data}}}\n"
        f"container: {container('pyxis')}\ncommand: '{command}'"
    )
    job = Job(tmp_path, body)
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    ranks = re.findall(r"rank (\d) on (node\d\d) in \S+ from /opt/ml/code: ten thousand images", job.logs())
    assert sorted(r for r, _ in ranks) == ["0", "1", "2", "3"] and len({n for _, n in ranks}) == 2
