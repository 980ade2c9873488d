"""Every single-group mode on the real test Slurm cluster, with real PyTorch and Open MPI."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.cluster.conftest import Island
from tests.conftest import ROOT, fake_sysfs, processes_matching, run_cli, slurm_conf
from tests.testcluster import this_cluster
from ti_slurm.job.contract import RDMA_ENV

pytestmark = pytest.mark.usefixtures("cluster")
SEED_DDP = (
    "python -m torch.distributed.launch --nproc_per_node $GPU_NUM_PER_NODE --nnodes $WORLD_SIZE "
    "--node_rank $RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT train.py"
)
TORCHRUN = (
    "torchrun --nproc_per_node $GPU_NUM_PER_NODE --nnodes $WORLD_SIZE "
    "--node_rank $RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT train.py"
)
SEED_MPIRUN = "mpirun --allow-run-as-root -np $GPU_NUM -H $NODE_IP_SLOT_LIST"


class Job:
    """A spec submitted with ``ti-slurm submit --wait`` and what it left behind."""

    def __init__(self, tmp_path: Path, body: str, wait: bool = True, env: dict[str, str] | None = None) -> None:
        self.dir = tmp_path
        self.env = {"XDG_STATE_HOME": str(tmp_path / "state"), **(env or {})}
        spec = tmp_path / "job.yaml"
        spec.write_text(body + f"\noutput_dir: {tmp_path / 'out'}\n")
        args = ["submit", "--wait", str(spec)] if wait else ["submit", str(spec)]
        self.result = run_cli(*args, cwd=tmp_path, env=self.env)
        assert self.result.stdout.strip(), self.result.stderr
        self.id = self.result.stdout.split()[0]
        self.job_dir = tmp_path / "out" / self.id

    def logs(self) -> str:
        return "".join(p.read_text() for p in sorted((self.job_dir / "logs").glob("*.log")))

    def status(self) -> dict[str, object]:
        res = run_cli("status", self.id, "--json", env=self.env)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    def explain(self) -> str:
        """What a failed assertion should show: the status as printed, the batch output's end, the nodes' logs."""
        shown = run_cli("status", self.id, env=self.env)
        tail = "\n".join(str(line) for line in self.status().get("batch_tail") or [])  # type: ignore[attr-defined]
        return f"{shown.stdout}{shown.stderr}\n-- batch output --\n{tail}\n-- logs --\n{self.logs()}"


@pytest.fixture
def ddp_dir(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "examples" / "ddp" / "train.py", tmp_path / "train.py")
    return tmp_path


@pytest.mark.parametrize("launcher", [SEED_DDP, TORCHRUN], ids=["torch.distributed.launch", "torchrun"])
def test_ddp_trains_across_two_nodes(ddp_dir: Path, launcher: str) -> None:
    job = Job(ddp_dir, f"mode: ddp\nnodes: 2\ngpus_per_node: 2\ncommand: {launcher} --epochs 10")
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    logs = job.logs()
    ranks = dict(re.findall(r"rank (\d)/4 on (node\d\d)", logs))
    assert sorted(ranks) == ["0", "1", "2", "3"]
    assert {ranks["0"], ranks["1"]} != {ranks["2"], ranks["3"]}  # two processes on each of two nodes
    assert len(set(ranks.values())) == 2
    assert logs.count("in_sync=True") == 4
    status = job.status()
    assert status["state"] == "COMPLETED"
    assert status["components"][0]["nodes"] == sorted(set(ranks.values()))


def test_ddp_master_that_prepares_data_first_still_trains(ddp_dir: Path) -> None:
    """The ModelArts data-copy pattern: rank 0 works a while before it opens MASTER_PORT."""
    cmd = f"if [ $RANK = 0 ]; then sleep 5; fi; {TORCHRUN} --epochs 2"
    job = Job(ddp_dir, f"mode: ddp\nnodes: 2\ngpus_per_node: 1\nrendezvous_timeout: 60\ncommand: '{cmd}'")
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    assert job.logs().count("in_sync=True") == 2


@pytest.mark.parametrize("command", ["echo rank=$RANK", "env | grep -c ^MASTER_"], ids=["echo", "env-dump"])
def test_ddp_commands_that_never_open_the_master_port_complete(tmp_path: Path, island: Island, command: str) -> None:
    started = time.monotonic()  # on an island: the job starts at once, so its time is its own
    job = Job(tmp_path, f"mode: ddp\nnodes: 2\npartition: {island.name}\ncommand: '{command}'")  # rendezvous: 300 s
    assert job.result.returncode == 0, job.result.stderr
    assert time.monotonic() - started < 60


def test_a_ddp_worker_fails_fast_while_the_master_still_runs(tmp_path: Path, island: Island) -> None:
    marker = f"sleep 7{uuid.uuid4().int % 1000:03d}"
    started = time.monotonic()
    command = f"'if [ $RANK = 1 ]; then exit 7; fi; {marker}'"
    job = Job(tmp_path, f"mode: ddp\nnodes: 3\npartition: {island.name}\ncommand: {command}")
    assert job.result.returncode == 1
    assert re.search(r"FAILED: ddp node node\d\d \(index 1\) exited 7", job.result.stderr), job.result.stderr
    assert time.monotonic() - started < 60
    time.sleep(1)
    assert processes_matching(marker) == []


@pytest.fixture(scope="module")
def allreduce(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mpi") / "allreduce"
    subprocess.run(["mpicc", "-O2", "-o", str(out), str(ROOT / "examples" / "mpi" / "allreduce.c")], check=True)
    return out


def test_seed_mpirun_line_runs_on_every_node_of_the_allocation(tmp_path: Path, allreduce: Path) -> None:
    job = Job(tmp_path, f"mode: horovod\nnodes: 3\ngpus_per_node: 2\ncommand: {SEED_MPIRUN} {allreduce}")
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    logs = job.logs()
    hosts = re.findall(r"rank \d/6 on (node\d\d)", logs)
    assert len(hosts) == 6 and len(set(hosts)) == 3
    assert all(hosts.count(h) == 2 for h in hosts)  # slots=2 per node
    assert "allreduce sum=15 expected=15" in logs


def test_the_seed_mpirun_line_is_run_again_in_place_after_a_failure(tmp_path: Path, allreduce: Path) -> None:
    once = '[ "$TI_SLURM_RESTART_COUNT" != 0 ] || exit 5'  # the first attempt fails after its mpirun
    body = f"mode: horovod\nnodes: 3\ncommand: '{SEED_MPIRUN} {allreduce}; {once}'\n"
    job = Job(tmp_path, body + "restart: {max: 0, on: [failure], in_place: 1}")
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    first = (job.job_dir / "attempts" / "0" / "logs" / "horovod-0.log").read_text()
    for log in (first, job.logs()):
        hosts = re.findall(r"rank \d/3 on (node\d\d)", log)
        assert len(set(hosts)) == 3 and "allreduce sum=3 expected=3" in log
    attempts = job.status()["attempts"]
    assert isinstance(attempts, list) and [(a["state"], a["in_place"]) for a in attempts] == [
        ("FAILED", True),
        ("COMPLETED", False),
    ]


def test_mpi_mode_runs_the_command_on_every_node(tmp_path: Path) -> None:
    job = Job(tmp_path, "mode: mpi\nnodes: 3\ncommand: 'echo \"$TI_SLURM_ROLE $INDEX $(hostname)\" > ran-$INDEX'")
    assert job.result.returncode == 0, job.result.stderr
    ran = sorted((tmp_path / f"ran-{i}").read_text().split()[0] for i in range(3))
    assert ran == ["launcher", "worker", "worker"]
    hostfile = (job.dir / "out" / job.id / "hostfile").read_text().splitlines()
    assert len(hostfile) == 3 and all(re.fullmatch(r"node\d\d slots=1", line) for line in hostfile)


def test_horovod_workers_are_reachable_and_the_launcher_decides(tmp_path: Path) -> None:
    cmd = "for hp in ${NODE_IP_SLOT_LIST//,/ }; do ssh ${hp%:*} hostname; done; exit 7"
    job = Job(tmp_path, f"mode: horovod\nnodes: 3\ncommand: '{cmd}'")
    assert job.result.returncode == 1 and "exited 7" in job.result.stderr
    names = re.findall(r"^(node\d\d)$", job.logs(), re.M)
    assert len(names) == 3 and len(set(names)) == 3  # ssh <ip> reached each node of the job
    assert list((job.job_dir / "logs").glob("*.log")) == [job.job_dir / "logs" / "horovod-0.log"]


@pytest.fixture
def site_config(tmp_path: Path) -> dict[str, str]:
    """The test cluster's site config, with a sysfs in which the RDMA nodes' HCA ports are ACTIVE."""
    for node in ("node05", "node06"):
        fake_sysfs(tmp_path / "sys" / node, {"mlx5_bond_0": "4: ACTIVE"})
    path = tmp_path / "site.toml"
    site = (ROOT / "ci" / "slurm-cluster" / "site.toml").read_text()
    path.write_text(site + f'sysfs_root = "{tmp_path}/sys/{{node}}"\n')
    return {"TI_SLURM_CONFIG": str(path)}


@pytest.mark.parametrize(
    "partition,gpus,expected",
    [("rdma", 8, RDMA_ENV), ("debug", 8, {}), ("rdma", 2, {})],
    ids=["rdma-whole-nodes", "debug", "rdma-part-nodes"],
)
def test_rdma_variables_on_rdma_partitions_for_whole_8_gpu_nodes(
    tmp_path: Path, site_config: dict[str, str], partition: str, gpus: int, expected: dict[str, str]
) -> None:
    cmd = 'env | grep -E "^(NCCL|GLOO|TCCL)_" > nccl-$INDEX; true'
    body = f"mode: mpi\nnodes: 2\ngpus_per_node: {gpus}\npartition: {partition}\ncommand: '{cmd}'"
    job = Job(tmp_path, body, env=site_config)
    assert job.result.returncode == 0, job.result.stderr
    for i in range(2):
        seen = dict(line.split("=", 1) for line in (tmp_path / f"nccl-{i}").read_text().splitlines())
        assert seen == expected


def fails_preflight(tmp_path: Path, body: str, line: str, env: dict[str, str] | None = None) -> None:
    """Submit ``body`` and see it fail within seconds with ``line`` (a node named, and its cause)."""
    started = time.monotonic()
    job = Job(tmp_path, body, env=env)
    assert job.result.returncode == 1
    assert f"FAILED: {line}" in job.result.stderr, job.result.stderr
    assert time.monotonic() - started < 30


def test_preflight_fails_an_rdma_job_whose_hca_port_is_down_naming_the_node(
    tmp_path: Path, site_config: dict[str, str]
) -> None:
    fake_sysfs(tmp_path / "sys" / "node05", {"mlx5_bond_0": "1: DOWN"})
    fails_preflight(
        tmp_path,
        "mode: ddp\nnodes: 2\ngpus_per_node: 8\npartition: rdma\ncommand: sleep 100",
        "ddp node node05 (index 0) failed preflight on node05: RDMA mlx5_bond_0 port 1 DOWN (NCCL_IB_HCA=mlx5_bond)",
        env=site_config,
    )


def test_preflight_fails_a_job_whose_master_port_is_taken(tmp_path: Path, island: Island) -> None:
    master, other = island.nodes[:2]
    holder = subprocess.Popen(  # another program holds the port on the node the master lands on
        ["nsenter", f"--net={this_cluster().netns(master)}", sys.executable, "-c",
         "import socket, time; s = socket.create_server(('0.0.0.0', 62111)); time.sleep(60)"]
    )  # fmt: skip
    try:
        time.sleep(1)
        fails_preflight(
            tmp_path,
            f"mode: ddp\nnodes: 2\nmaster_port: 62111\npartition: {island.name}\n"
            f"sbatch: {{nodelist: '{master},{other}'}}\ncommand: sleep 100",
            f"ddp node {master} (index 0) failed preflight on {master}: port 62111 (MASTER_PORT) is taken on this "
            "node; another program holds it",
        )
    finally:
        holder.kill()


def test_preflight_names_the_node_that_resolves_the_master_elsewhere(tmp_path: Path, island: Island) -> None:
    master, other = island.nodes[:2]
    hosts = this_cluster().hosts_file(other)
    saved = hosts.read_text()
    entry = re.search(rf"^(\S+) {master}\b.*$", saved, re.M)
    assert entry, saved
    addr = entry.group(1)
    hosts.write_text(saved.replace(entry.group(0), f"10.77.0.99 {master}"))
    try:
        fails_preflight(
            tmp_path,
            f"mode: ddp\nnodes: 2\npartition: {island.name}\nsbatch: {{nodelist: '{master},{other}'}}\n"
            "command: sleep 100",
            f"ddp node {other} (index 1) failed preflight on {other}: resolves {master} to 10.77.0.99, but the job "
            f"uses {addr} for it (check /etc/hosts or DNS on this node)",
        )
        # an admin's doctor on that node runs the same check against the controller's addresses
        doctor = subprocess.run(
            ["srun", "-p", island.name, "-w", other, "ti-slurm", "doctor"], capture_output=True, text=True
        )
        assert doctor.returncode == 1
        assert f"resolves {master} to 10.77.0.99, but the controller has {addr} for it" in doctor.stdout
    finally:
        hosts.write_text(saved)


def test_preflight_names_the_node_that_sees_fewer_gpus(tmp_path: Path, island: Island) -> None:
    first, faulty = island.nodes[:2]
    fault = this_cluster().state / f"fault-{faulty}"  # every task there sees one GPU of the two the job asked for
    fault.write_text("export CUDA_VISIBLE_DEVICES=0\n")
    try:
        body = (
            f"mode: mpi\nnodes: 2\ngpus_per_node: 2\npartition: {island.name}\n"
            f"sbatch: {{nodelist: '{first},{faulty}'}}\ncommand: sleep 100"
        )
        fails_preflight(
            tmp_path,
            body,
            f"mpi node {faulty} (index 1) failed preflight on {faulty}: sees 1 GPU(s) (CUDA_VISIBLE_DEVICES=0), the "
            "job asked for 2 per node",
        )
        (tmp_path / "off").mkdir()
        off = Job(tmp_path / "off", body.replace("sleep 100", "'true'") + "\npreflight: off")
        assert off.result.returncode == 0, off.result.stderr  # what the check is for: it ran with one GPU
    finally:
        fault.unlink()


def test_the_submitting_shells_step_layout_does_not_reach_the_job(tmp_path: Path) -> None:
    leaks = {"SLURM_CPU_BIND": "map_cpu:0", "SLURM_MEM_PER_CPU": "1", "SBATCH_EXCLUSIVE": "1", "MY_SETTING": "kept"}
    command = 'env | grep -E "^(SLURM_CPU_BIND|SLURM_MEM_PER_CPU|SBATCH_|MY_SETTING|SLURM_CONF)" | sort > seen-$INDEX'
    job = Job(tmp_path, f"mode: mpi\nnodes: 2\ncommand: '{command}'", env={**leaks, "SLURM_CONF": str(slurm_conf())})
    assert job.result.returncode == 0, job.result.stderr
    for i in range(2):
        assert (tmp_path / f"seen-{i}").read_text() == f"MY_SETTING=kept\nSLURM_CONF={slurm_conf()}\n"


def test_a_failing_node_ends_the_whole_job(ddp_dir: Path) -> None:
    cmd = f"if [ $RANK = 2 ]; then sleep 8; echo rank 2 gives up >&2; exit 3; fi; exec {SEED_DDP} --epochs 1000000"
    job = Job(ddp_dir, f"mode: ddp\nnodes: 4\ngpus_per_node: 1\ncommand: '{cmd}'")
    assert job.result.returncode == 1
    assert re.search(r"FAILED: ddp node node\d\d \(index 2\) exited 3", job.result.stderr), job.result.stderr
    # the failed node's last words, and how to see all of them
    assert f"(all of it: ti-slurm logs {job.id} --node ddp-2)" in job.result.stderr
    assert "  | rank 2 gives up\n" in job.result.stderr
    status = job.status()
    assert status["state"] == "FAILED" and status["failed"]["exit_code"] == 3
    time.sleep(1)
    assert processes_matching(str(ddp_dir / "out")) == []
    assert processes_matching("train.py --epochs 1000000") == []


def running_two_node_job(tmp_path: Path, marker: str) -> Job:
    """A 2-node MPI job whose command (``marker``) runs on both nodes by the time this returns."""
    job = Job(tmp_path, f"mode: mpi\nnodes: 2\ncommand: {marker}", wait=False)
    deadline = time.monotonic() + 60
    while len(processes_matching(marker)) < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert len(processes_matching(marker)) == 2
    return job


def test_cancel_mid_job_leaves_no_process(tmp_path: Path) -> None:
    marker = f"sleep 9{uuid.uuid4().int % 1000:03d}"
    job = running_two_node_job(tmp_path, marker)
    assert run_cli("cancel", job.id, env=job.env).returncode == 0
    deadline = time.monotonic() + 60
    while processes_matching(marker) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert processes_matching(marker) == []
    assert job.status()["state"] == "CANCELLED"


def test_workers_give_up_when_the_master_never_comes_up(tmp_path: Path) -> None:
    job = Job(tmp_path, "mode: ddp\nnodes: 2\nrendezvous_timeout: 3\ncommand: 'sleep 120'")
    assert job.result.returncode == 1 and "exited 124" in job.result.stderr
    assert re.search(
        rf"rendezvous timeout: master {this_cluster().node_addr_rx}:\d+ did not come up within 3s", job.logs()
    )


def test_status_and_logs_per_node(tmp_path: Path) -> None:
    job = Job(tmp_path, "mode: mpi\nnodes: 2\ncommand: echo hello from $INDEX")
    assert job.result.returncode == 0
    status = job.status()
    assert [(c["name"], c["state"], len(c["nodes"])) for c in status["components"]] == [("mpi", "COMPLETED", 2)]
    node1 = status["components"][0]["nodes"][1]
    for selector in ("1", node1, "mpi-1"):
        assert run_cli("logs", job.id, "--node", selector, env=job.env).stdout == "hello from 1\n"
    listing = run_cli("list", env=job.env).stdout
    assert re.search(rf"^{job.id}\s+ti-slurm\s+COMPLETED", listing, re.M)
    # the start timeline: the queue wait, then the batch script's start to both nodes' commands
    shown = run_cli("status", job.id, env=job.env).stdout
    start = re.search(r"^  start: queued [^,]+, supervisor \+[^,]+, steps launched \+[^,]+, node steps \+[^,]+, "
                      r"commands \+[^,]+ \(last: mpi-[01]\)$", shown, re.M)  # fmt: skip
    assert start, shown
    timeline = status["attempts"][0]["timeline"]
    assert timeline["batch"] < timeline["supervisor"] < timeline["launched"] < timeline["commands"][1]
    assert timeline["all"] is True and timeline["steps"][0] <= timeline["commands"][0]


def test_status_of_an_unknown_job_is_one_line(tmp_path: Path) -> None:
    res = run_cli("status", "999999999", env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "job 999999999: not queued and no record" in res.stderr


def test_print_env_shows_each_nodes_contract_in_a_running_job(tmp_path: Path) -> None:
    """docs/running.md's recipe: the job's own step, with --print-env, run again inside the allocation."""
    from ti_slurm.job import main_command

    job = Job(tmp_path, "mode: mpi\nnodes: 2\ngpus_per_node: 2\ncommand: sleep 120", wait=False)
    try:
        plan = job.job_dir / "plan.json"
        deadline = time.monotonic() + 60
        while not plan.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        step = main_command("python3", "node", str(plan), "0", str(job.job_dir), "--print-env")
        out = subprocess.run(
            ["srun", f"--jobid={job.id}", "--overlap", "-N", "2", "-l", *step],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        per_task = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in out.splitlines() if "INDEX=" in line}
        assert per_task == {"0": "export INDEX=0", "1": "export INDEX=1"}
        ip_lists = {line.split("=", 1)[1] for line in out.splitlines() if "NODE_IP_SLOT_LIST=" in line}
        assert len(ip_lists) == 1 and re.fullmatch(
            rf"{(addr := this_cluster().node_addr_rx)}:2,{addr}:2", ip_lists.pop()
        )
    finally:
        subprocess.run(["scancel", job.id], check=False)


def test_a_killed_supervisor_ends_the_job_and_status_says_so(tmp_path: Path) -> None:
    marker = f"sleep 6{uuid.uuid4().int % 1000:03d}"
    job = running_two_node_job(tmp_path, marker)
    supervisors = processes_matching(f"ti_slurm.job supervise {job.job_dir}")
    assert len(supervisors) == 1, supervisors
    subprocess.run(["kill", "-9", supervisors[0].split()[0]], check=True)
    deadline = time.monotonic() + 60  # the batch script is gone: Slurm ends the job and its steps
    while processes_matching(marker) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert processes_matching(marker) == []
    status = job.status()
    deadline = time.monotonic() + 50  # a one-shot status may take another follower's answer up to 30 s old
    while status["state"] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(1)
        status = job.status()
    assert status["state"] == "FAILED" and "without a final record" in str(status["reason"])


def test_preflight_allreduce_names_the_node_whose_network_is_broken(tmp_path: Path, island: Island) -> None:
    first, faulty, *healthy = island.nodes
    fault = this_cluster().state / f"fault-{faulty}"  # its gloo looks for an interface it does not have
    fault.write_text("export GLOO_SOCKET_IFNAME=nosuch0\n")
    try:
        body = (
            f"mode: ddp\nnodes: 2\npreflight: {{allreduce: true}}\npartition: {island.name}\n"
            f"sbatch: {{nodelist: '{first},{faulty}'}}\ncommand: sleep 100"
        )
        fails_preflight(
            tmp_path,
            body,
            f"ddp node {faulty} (index 1) failed preflight on {faulty}: an all-reduce across the job's 2 nodes "
            "failed: ",
        )
        (tmp_path / "ok").mkdir()
        on_healthy = body.replace(f"{first},{faulty}", ",".join(healthy[:2])).replace("sleep 100", "'true'")
        ok = Job(tmp_path / "ok", on_healthy)
        assert ok.result.returncode == 0, ok.result.stderr  # the same collective on healthy nodes
    finally:
        fault.unlink()


def test_a_batch_step_that_fails_before_its_record_shows_why(tmp_path: Path) -> None:
    # Debian's python3 has no ti-slurm: the batch script's supervisor cannot even start
    job = Job(tmp_path, "mode: mpi\nnodes: 1\ncommand: hostname\npython: /usr/bin/python3\npreflight: off")
    res = job.result
    out = tmp_path / "out" / f"slurm-{job.id}.out"
    assert res.returncode == 1, res.stderr
    assert "ended without a final record" in res.stderr and f"its batch output: {out}" in res.stderr
    assert "last " in res.stderr and "No module named 'ti_slurm'" in res.stderr, res.stderr
    shown = run_cli("status", job.id, env=job.env)
    assert shown.returncode == 0 and "  | " in shown.stdout and "No module named 'ti_slurm'" in shown.stdout
    status = job.status()
    assert status["batch_output"] == str(out) and any("No module named 'ti_slurm'" in x for x in status["batch_tail"])
