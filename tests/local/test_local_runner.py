"""The local runner: every simulated node a real process, same contract and success rule."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT, SmallDisk, run_cli


def spec(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(body + f"\noutput_dir: {tmp_path / 'out'}\nworkdir: {tmp_path}\n")
    return path


def job_dir(tmp_path: Path, res: subprocess.CompletedProcess[str]) -> Path:
    return tmp_path / "out" / res.stdout.split()[0]


def no_process_with(marker: str) -> bool:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False).stdout
    return out.strip() == ""


def test_ddp_example_trains_on_two_simulated_nodes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    res = run_cli(
        "submit", "--local", "--wait", "examples/ddp/job.yaml", cwd=ROOT, env={"XDG_STATE_HOME": str(tmp_path)}
    )
    assert res.returncode == 0, res.stderr
    jd = ROOT / "ti-slurm-jobs" / res.stdout.split()[0]
    logs = "".join(p.read_text() for p in sorted((jd / "logs").glob("*.log")))
    ranks = sorted(re.findall(r"rank (\d/4) on", logs))  # processes of one node share a log
    assert ranks == ["0/4", "1/4", "2/4", "3/4"]
    assert logs.count("in_sync=True") == 4


def test_mindspore_example_trains_on_two_simulated_nodes(tmp_path: Path) -> None:
    """ti-slurm's scheduler on node 0, a worker per node (the machine's MindSpore, whatever its NumPy)."""
    pytest.importorskip("mindspore")
    res = run_cli(
        "submit", "--local", "--wait", "examples/mindspore/job.yaml", cwd=ROOT, env={"XDG_STATE_HOME": str(tmp_path)}
    )
    assert res.returncode == 0, res.stderr
    jd = ROOT / "ti-slurm-jobs" / res.stdout.split()[0]
    logs = "".join(p.read_text() for p in sorted((jd / "logs").glob("*.log")))
    assert sorted(re.findall(r"rank (\d/2) on \S+ loss=\S+ in_sync=True", logs)) == ["0/2", "1/2"]


def test_failing_node_fails_the_job_and_is_named(tmp_path: Path) -> None:
    marker = f"sleep 6{uuid.uuid4().int % 1000:03d}"
    command = f"if [ $INDEX = 1 ]; then sleep 1; echo node $INDEX gives up; exit 3; fi; {marker}"
    body = f"mode: mpi\nnodes: 3\ncommand: '{command}'"
    path = spec(tmp_path, body)
    start = time.monotonic()
    res = run_cli("submit", "--local", "--wait", str(path), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 1
    assert "FAILED" in res.stderr and "(index 1) exited 3" in res.stderr
    job_id = res.stdout.split()[0]
    assert f"(all of it: ti-slurm logs {job_id} --node mpi-1)" in res.stderr and "  | node 1 gives up\n" in res.stderr
    assert time.monotonic() - start < 60
    status = json.loads(run_cli("status", job_id, "--json", env={"XDG_STATE_HOME": str(tmp_path)}).stdout)
    assert status["state"] == "FAILED" and status["failed"]["exit_code"] == 3 and status["failed"]["index"] == 1
    table = run_cli("status", job_id, env={"XDG_STATE_HOME": str(tmp_path)}).stdout
    assert f"(index 1) exited 3; its log: ti-slurm logs {job_id} --node mpi-1" in table
    assert no_process_with(marker)
    # every node's command started before one failed: the start line shows all three, the last one named
    assert re.search(r"^  start: queued [^,]+, steps launched \+[^,]+, node steps \+[^,]+, commands \+[^,]+ "
                     r"\(last: mpi-[012]\)$", table, re.M), table  # fmt: skip
    assert status["attempts"][0]["timeline"]["all"] is True


def test_ps_are_stopped_after_workers_succeed(tmp_path: Path) -> None:
    marker = f"sleep 7{uuid.uuid4().int % 1000:03d}"
    body = (
        "mode: ps-worker\nps: {nodes: 2}\nworker: {nodes: 2}\n"
        f'command: \'python3 -c "import json,os; c=json.loads(os.environ[\\"TF_CONFIG\\"]); print(c[\\"task\\"])";'
        f" if [ $TI_SLURM_ROLE = ps ]; then {marker}; fi'"
    )
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    jd = job_dir(tmp_path, res)
    assert "{'type': 'worker', 'index': 1}" in (jd / "logs" / "worker-1.log").read_text()
    assert "{'type': 'ps', 'index': 0}" in (jd / "logs" / "ps-0.log").read_text()
    events = [json.loads(x) for x in (jd / "status.jsonl").read_text().splitlines()]
    assert events[-1]["state"] == "COMPLETED"
    assert [e["stopped"] for e in events if e["event"] == "step-exit" and e["component"] == "ps"] == [True, True]
    assert no_process_with(marker)


def test_ps_dying_while_workers_run_fails_the_job(tmp_path: Path) -> None:
    body = (
        "mode: ps-worker\nps: {nodes: 1}\nworker: {nodes: 1}\n"
        "command: 'if [ $TI_SLURM_ROLE = ps ]; then exit 0; fi; sleep 30'"
    )
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 1
    assert "ps node" in res.stderr and "while the job was still running" in res.stderr


def test_horovod_runs_on_the_launcher_only_and_takes_its_exit_code(tmp_path: Path) -> None:
    body = "mode: horovod\nnodes: 3\ncommand: 'touch ran-$INDEX; exit 5'"
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 1 and "exited 5" in res.stderr
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == ["ran-0"]


def test_workers_give_up_when_the_master_never_comes_up(tmp_path: Path) -> None:
    # every node runs a command that never opens MASTER_PORT: the workers' watch stops them
    body = "mode: ddp\nnodes: 2\nrendezvous_timeout: 2\ncommand: 'sleep 30'"
    started = time.monotonic()
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 1 and "ddp node localhost (index 1) exited 124" in res.stderr
    assert time.monotonic() - started < 20
    log = (job_dir(tmp_path, res) / "logs" / "ddp-1.log").read_text()
    assert "rendezvous timeout: master 127.0.0.1:" in log and "within 2s" in log


@pytest.mark.parametrize(
    "command",
    ["echo rank=$RANK", "env | grep -c ^MASTER_", "if [ $RANK = 0 ]; then sleep 2; fi; echo prepared $RANK"],
    ids=["echo", "env-dump", "master-prepares-data"],
)
def test_ddp_commands_that_never_open_the_master_port_complete(tmp_path: Path, command: str) -> None:
    """Every node's command starts at once; nobody waits for a port that the command never opens."""
    body = f"mode: ddp\nnodes: 2\ncommand: '{command}'"  # the default rendezvous_timeout: 300 s
    started = time.monotonic()
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - started < 30


def test_a_ddp_worker_fails_fast_while_the_master_still_runs(tmp_path: Path) -> None:
    marker = f"sleep 6{uuid.uuid4().int % 1000:03d}"
    body = f"mode: ddp\nnodes: 3\ncommand: 'if [ $RANK = 1 ]; then exit 7; fi; {marker}'"
    started = time.monotonic()
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 1 and "ddp node localhost (index 1) exited 7" in res.stderr
    assert time.monotonic() - started < 30
    assert no_process_with(marker)


def test_cancel_stops_every_process(tmp_path: Path) -> None:
    marker = f"linger-{uuid.uuid4().hex[:8]}"
    # a command that takes a second to exit after SIGTERM: CANCELLED must still mean gone
    (tmp_path / "linger.py").write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1), sys.exit(0)))\n"
        "time.sleep(600)\n"
    )
    env = {"XDG_STATE_HOME": str(tmp_path)}
    body = f"mode: mpi\nnodes: 2\ncommand: python3 linger.py {marker}"
    res = run_cli("submit", "--local", str(spec(tmp_path, body)), env=env)
    job = res.stdout.split()[0]
    deadline = time.monotonic() + 20
    while no_process_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not no_process_with(marker)
    assert run_cli("cancel", job, env=env).returncode == 0
    deadline = time.monotonic() + 30
    while "CANCELLED" not in run_cli("status", job, env=env).stdout and time.monotonic() < deadline:
        time.sleep(0.3)
    assert "CANCELLED" in run_cli("status", job, env=env).stdout
    assert no_process_with(marker)


def test_a_job_directory_deleted_while_the_job_runs_stops_it_and_stays_deleted(tmp_path: Path) -> None:
    marker = f"deleted-{uuid.uuid4().hex[:8]}"
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    body = f"mode: mpi\nnodes: 2\ncommand: sleep 600 && echo {marker}"
    job = run_cli("submit", "--local", str(spec(tmp_path, body)), env=env).stdout.split()[0]
    deadline = time.monotonic() + 20
    while no_process_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    folder = tmp_path / "out" / job
    shutil.rmtree(folder)  # a clean-up script, or a user's rm -rf of the wrong folder
    waited = run_cli("wait", job, "--timeout", "60", env=env)
    assert waited.returncode == 1 and "Traceback" not in waited.stderr, waited.stderr
    assert f"its job directory {folder} is gone (deleted while the job ran?)" in waited.stderr, waited.stderr
    deadline = time.monotonic() + 30  # the supervisor notices within seconds and stops every node's command
    while not no_process_with(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert no_process_with(marker)
    assert not folder.exists()  # nothing made it again (open to all, as a plain mkdir would)
    status = run_cli("status", job, env=env)
    assert "COMPLETED" not in status.stdout and "is gone" in status.stdout, status.stdout


def test_logs_by_node(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path)}
    res = run_cli(
        "submit", "--local", "--wait", str(spec(tmp_path, "mode: mpi\nnodes: 2\ncommand: echo hello-$INDEX")), env=env
    )
    job = res.stdout.split()[0]
    assert run_cli("logs", job, "--node", "1", env=env).stdout == "hello-1\n"
    assert "hello-0" in run_cli("logs", job, env=env).stdout
    bad = run_cli("logs", job, "--node", "7", env=env)
    assert bad.returncode == 2 and "no such node" in bad.stderr


def test_exec_outside_a_job_is_a_clear_error() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    res = subprocess.run(
        ["ti-slurm", "exec", "--mode", "ddp", "--", "true"], env=env, capture_output=True, text=True, check=False
    )
    assert res.returncode == 2 and "SLURM_JOB_NODELIST is not set" in res.stderr


def test_user_config_names_the_default_remote_host(tmp_path: Path) -> None:
    (tmp_path / "ti-slurm").mkdir()
    (tmp_path / "ti-slurm" / "config.toml").write_text('[remote]\nhost = "root@127.0.0.1:1"\n')
    path = spec(tmp_path, "mode: mpi\nnodes: 1\ncommand: 'true'")
    res = run_cli("submit", str(path), env={"XDG_CONFIG_HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 1 and "cannot reach root@127.0.0.1:1" in res.stderr
    (tmp_path / "ti-slurm" / "config.toml").write_text('[remote]\nhots = "x"\n')
    res = run_cli("submit", str(path), env={"XDG_CONFIG_HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 2 and "user config" in res.stderr
    assert "remote.hots: 'x': unknown key; did you mean 'host'?" in res.stderr


@pytest.mark.parametrize("holder", ["0.0.0.0", "127.0.0.1", "::1"])
def test_local_jobs_pick_ports_nobody_holds(tmp_path: Path, holder: str) -> None:
    """On a shared machine another program may hold the port a job number maps to, on any address."""
    from ti_slurm.backends.local import local_job_number
    from ti_slurm.job.contract import job_ports
    from ti_slurm.submitting.planning import make_plan
    from ti_slurm.submitting.spec import parse_spec

    plan = make_plan(parse_spec({"mode": "ddp", "nodes": 2, "command": "train"}))
    groups = (("localhost", "localhost"),)
    start = 123456
    taken = job_ports(plan, start, groups, per_node=True)[0][1]  # node 1's port
    with socket.socket(socket.AF_INET6 if ":" in holder else socket.AF_INET) as sock:
        try:
            sock.bind((holder, taken))
        except OSError as exc:  # a machine without IPv6 loopback
            pytest.skip(f"cannot listen on {holder}: {exc}")
        sock.listen()
        number = local_job_number(plan, str(tmp_path), start)
        assert number != start and (tmp_path / f"local-{number}").is_dir()  # the number is claimed
        assert taken not in job_ports(plan, number, groups, per_node=True)[0]
    (tmp_path / f"local-{start}").mkdir()  # an earlier job's directory
    assert local_job_number(plan, str(tmp_path), start) == number + 1  # neither it nor the claimed one


def as_from_a_shell() -> None:
    """A child's signals as an interactive shell leaves them: SIGINT neither ignored nor blocked (a test
    worker's own state, which a child inherits, may differ: CI saw a follower not stop on SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_ctrl_c_stops_following_but_not_the_job(tmp_path: Path) -> None:
    marker = f"sleep 5{uuid.uuid4().int % 1000:03d}"
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    path = spec(tmp_path, f"mode: mpi\nnodes: 1\ncommand: {marker}")
    proc = subprocess.Popen(
        ["ti-slurm", "submit", "--local", "--wait", str(path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=as_from_a_shell,
    )
    deadline = time.monotonic() + 30
    while no_process_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the foreground command
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        seen = Path(f"/proc/{proc.pid}/status").read_text()
        proc.kill()
        raise AssertionError(f"the follower did not stop on SIGINT: {seen}") from None
    job = out.decode().split()[0]
    assert proc.returncode == 130 and "Traceback" not in err.decode()
    assert f"stopped following job {job}; it keeps running" in err.decode()
    assert "RUNNING" in run_cli("status", job, env={"XDG_STATE_HOME": str(tmp_path)}).stdout
    assert not no_process_with(marker)
    assert run_cli("cancel", job, env={"XDG_STATE_HOME": str(tmp_path)}).returncode == 0
    deadline = time.monotonic() + 30
    while not no_process_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert no_process_with(marker)


def test_wait_follows_a_job_submitted_earlier_and_its_exit_says_how_it_ended(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path)}
    marker = f"sleep 4{uuid.uuid4().int % 1000:03d}"
    sleeper = run_cli("submit", "--local", str(spec(tmp_path, f"mode: mpi\nnodes: 1\ncommand: {marker}")), env=env)
    job = sleeper.stdout.split()[0]
    gave_up = run_cli("wait", job, "--timeout", "1", env=env)
    assert gave_up.returncode == 124 and "Traceback" not in gave_up.stderr, gave_up.stderr
    assert gave_up.stderr.splitlines()[-1].startswith(f"ti-slurm: job {job} is still "), gave_up.stderr
    assert gave_up.stderr.endswith(
        f"stopped following job {job}: it keeps running (ti-slurm status {job}, ti-slurm cancel {job})\n"
    )
    assert not no_process_with(marker)  # giving up following leaves the job running
    run_cli("cancel", job, env=env)
    ok = run_cli("submit", "--local", str(spec(tmp_path, "mode: mpi\nnodes: 2\ncommand: 'sleep 1'")), env=env)
    done_id = ok.stdout.split()[0]
    done = run_cli("wait", done_id, env=env)
    assert done.returncode == 0 and f"ti-slurm: job {done_id} COMPLETED\n" in done.stderr, done.stderr
    assert done.stderr.endswith(f"/{done_id}/logs/ (ti-slurm logs {done_id}; ti-slurm status {done_id})\n")  # where
    failing = run_cli(
        "submit", "--local", str(spec(tmp_path, "mode: mpi\nnodes: 2\ncommand: 'sleep 1; exit 7'")), env=env
    )
    failed = run_cli("wait", failing.stdout.split()[0], env=env)
    assert failed.returncode == 1 and "FAILED" in failed.stderr and "exited 7" in failed.stderr, failed.stderr
    unknown = run_cli("wait", "999999999", env=env)
    assert unknown.returncode != 0 and len(unknown.stderr.splitlines()) == 1, unknown.stderr


def test_modelarts_platform_passes_task_name_to_each_ps_worker_task(tmp_path: Path) -> None:
    (tmp_path / "show.py").write_text(
        "import json, os, sys, time\n"
        "role = json.loads(os.environ['TF_CONFIG'])['task']['type']\n"
        "print('task', role, 'argv', sys.argv[1:], flush=True)\n"
        "time.sleep(1 if role == 'worker' else 60)  # the ps is stopped once the workers are done: print first\n"
    )
    body = "mode: ps-worker\nplatform: modelarts\nps: {nodes: 1}\nworker: {nodes: 2}\ncommand: python3 show.py --lr 0.1"
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    logs = {p.stem: p.read_text() for p in (job_dir(tmp_path, res) / "logs").glob("*.log")}
    assert "task ps argv ['--lr', '0.1', '--task_name=ps']" in logs["ps-0"]
    for name in ("worker-0", "worker-1"):
        assert "task worker argv ['--lr', '0.1', '--task_name=worker']" in logs[name]


def test_a_killed_supervisor_takes_every_node_process_with_it(tmp_path: Path) -> None:
    marker = f"sleep 5{uuid.uuid4().int % 1000:03d}"
    env = {"XDG_STATE_HOME": str(tmp_path)}
    res = run_cli("submit", "--local", str(spec(tmp_path, f"mode: mpi\nnodes: 2\ncommand: {marker}")), env=env)
    jd = job_dir(tmp_path, res)
    deadline = time.monotonic() + 20
    while no_process_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    os.kill(int((jd / "supervisor.pid").read_text().split()[0]), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not no_process_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert no_process_with(marker)
    status = json.loads(run_cli("status", res.stdout.split()[0], "--json", env=env).stdout)
    assert status["state"] == "FAILED" and "without a final record" in status["reason"]


def test_cancel_of_an_ended_job_never_kills_the_process_that_took_its_pid(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path)}
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, "mode: mpi\nnodes: 1\ncommand: 'true'")), env=env)
    pid_file = job_dir(tmp_path, res) / "supervisor.pid"
    bystander = subprocess.Popen(["sleep", "60"])
    try:  # the old supervisor's pid now names another process
        pid_file.write_text(f"{bystander.pid} {pid_file.read_text().split()[1]}\n")
        assert run_cli("cancel", res.stdout.split()[0], env=env).returncode == 0
        time.sleep(0.5)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_the_job_directory_is_private(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path)}
    body = "mode: mpi\nnodes: 1\ncommand: 'true'\nenv: {API_TOKEN: secret}"
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env=env)
    assert oct(job_dir(tmp_path, res).stat().st_mode & 0o777) == "0o700"


def test_a_node_without_ray_is_one_line_naming_it(tmp_path: Path) -> None:
    # Debian's own Python has no ray beside it, and the command's PATH has none either
    body = "mode: ray\ncommand: 'true'\npython: /usr/bin/python3\nenv: {PATH: /usr/bin:/bin}"
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 1 and "head node localhost (index 0) exited 127" in res.stderr
    log = (job_dir(tmp_path, res) / "logs" / "head-0.log").read_text()
    assert (
        log == "ti-slurm: node localhost: no ray command beside /usr/bin/python3 or on PATH"
        " (install ray for the job's Python)\n"
    )


def test_preflight_allreduce_runs_across_every_node(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    # a parameter server serves until the workers are done (one that exits 0 first fails the job)
    serve = "if [ $TI_SLURM_ROLE = ps ]; then exec sleep 60; fi"
    body = "mode: ps-worker\nps: {nodes: 1}\nworker: {nodes: 2}\npreflight: {allreduce: true}\n"
    body += f"command: '{serve}'"
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr


def test_preflight_allreduce_without_torch_is_one_line(tmp_path: Path) -> None:
    body = "mode: ddp\nnodes: 2\npython: /usr/bin/python3\npreflight: {allreduce: true}\ncommand: 'true'"
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 1
    assert re.search(
        r"FAILED: ddp node localhost \(index \d\) failed preflight on localhost: an all-reduce across the job's 2 "
        r"nodes failed: needs torch in the job's Python",
        res.stderr,
    ), res.stderr


def test_preflight_allreduce_over_a_broken_network_fails_in_seconds(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    body = "mode: ddp\nnodes: 2\npreflight: {allreduce: true}\nenv: {GLOO_SOCKET_IFNAME: nosuch0}\ncommand: sleep 100"
    started = time.monotonic()
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 1 and time.monotonic() - started < 60
    assert "failed preflight on localhost: an all-reduce across the job's 2 nodes failed: " in res.stderr
    assert "Unable to find address for: nosuch0" in res.stderr


def test_a_yaml_spec_typed_as_the_readme_prints_it_runs_as_meant(tmp_path: Path) -> None:
    # on/off, numbers and versions as users type them: YAML 1.1 would make True, False, 4 and 1.1 of them
    body = (
        "mode: mpi\nnodes: 2\nrdma: off\npreflight: off\n"
        "restart: {max: 3, on: [preempt, timeout, node_fail]}\n"
        "env: {OMP_NUM_THREADS: 4, VER: 1.10, DEBUG: yes}\n"
        'command: echo "threads=$OMP_NUM_THREADS ver=$VER debug=$DEBUG rdma=${NCCL_IB_HCA:-none}"'
    )
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    logs = [p.read_text() for p in sorted((job_dir(tmp_path, res) / "logs").glob("*.log"))]
    assert len(logs) == 2
    assert all("threads=4 ver=1.10 debug=yes rdma=none" in log for log in logs), logs


def test_a_failed_node_with_a_large_log_shows_its_last_lines_read_from_the_end(tmp_path: Path) -> None:
    from ti_slurm.backends.local import LocalBackend
    from ti_slurm.follow.files import TAIL_BYTES

    # node 1 writes 30 MB in two long lines, then its last words
    command = (
        "if [ $INDEX = 1 ]; then head -c 10000000 /dev/zero | tr '\\\\0' y; echo;"
        " head -c 20000000 /dev/zero | tr '\\\\0' z; echo; echo last words; exit 3; fi"
    )
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, f'mode: mpi\nnodes: 2\ncommand: "{command}"')),
                  env={"XDG_STATE_HOME": str(tmp_path)})  # fmt: skip
    assert res.returncode == 1, res.stderr[-2000:]
    assert res.stderr.endswith("  | last words\n") and len(res.stderr) < TAIL_BYTES + 2000, res.stderr[-300:]
    asked: list[int] = []

    class Counting(LocalBackend):  # what the tail reads, by the backend's own door
        def read_end(self, path: str, size: int) -> tuple[int, bytes] | None:
            asked.append(size)
            return super().read_end(path, size)

        def read_text(self, path: str) -> str | None:
            assert not path.endswith(".log"), "a whole log was read"
            return super().read_text(path)

    import ti_slurm
    from ti_slurm.client import Job

    os.environ["XDG_STATE_HOME"] = str(tmp_path)
    try:
        job = ti_slurm.get_job(res.stdout.split()[0])
        counted = Job(job.info, Counting())
        assert counted.failure_tail(counted.status()).endswith("  | last words\n")
    finally:
        del os.environ["XDG_STATE_HOME"]
    assert asked == [TAIL_BYTES]


def test_cancel_says_when_a_job_had_ended_and_when_it_cannot_be_reached(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path)}
    done = run_cli("submit", "--local", "--wait", str(spec(tmp_path, "mode: mpi\nnodes: 1\ncommand: 'true'")), env=env)
    first = done.stdout.split()[0]
    ended = run_cli("cancel", first, env=env)
    assert (ended.returncode, ended.stderr) == (0, f"ti-slurm: job {first} had already ended: COMPLETED\n")
    marker = f"sleep 7{uuid.uuid4().int % 1000:03d}"
    running = run_cli("submit", "--local", str(spec(tmp_path, f"mode: mpi\nnodes: 1\ncommand: '{marker}'")), env=env)
    job = running.stdout.split()[0]
    deadline = time.monotonic() + 30
    while no_process_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    pid = (job_dir(tmp_path, running) / "supervisor.pid").read_text().split()[0]
    shutil.rmtree(job_dir(tmp_path, running))  # someone removed the running job's directory
    try:
        gone = run_cli("cancel", job, env=env)
        assert gone.returncode == 1 and "its supervisor cannot be reached" in gone.stderr, gone.stderr
        assert gone.stderr.count("\n") == 1 and not no_process_with(marker)  # it said so: nothing was stopped
    finally:
        os.kill(int(pid), signal.SIGTERM)


def test_a_full_disk_at_submit_is_one_line_and_leaves_nothing(tmp_path: Path, small_disk: SmallDisk) -> None:
    disk = small_disk("2m", full=True)  # the disk is full before the submit
    path = tmp_path / "job.yaml"
    path.write_text(f"mode: mpi\nnodes: 1\ncommand: 'true'\noutput_dir: {disk / 'jobs'}\n")
    res = run_cli("submit", "--local", str(path), env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("ti-slurm: error: output_dir: '") and ": its filesystem has 0 KiB free" in res.stderr
    assert list((disk / "jobs").iterdir()) == []  # no half-made job directory


def test_a_disk_that_fills_during_the_job_is_named_in_its_reason(tmp_path: Path, small_disk: SmallDisk) -> None:
    disk = small_disk("2m")
    body = "mode: mpi\nnodes: 1\ncommand: 'head -c 4000000 /dev/zero > $TI_SLURM_JOB_DIR/fill; exit 3'\n"
    path = tmp_path / "job.yaml"
    path.write_text(body + f"output_dir: {disk}\nworkdir: {tmp_path}\n")
    res = run_cli("submit", "--local", "--wait", str(path), env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "no space left on device" in res.stderr.lower(), res.stderr


def second_node_step(tmp_path: Path, command: str, marker: str) -> tuple[str, int]:
    """Submit a 2-node local job running ``command``; once ``marker`` runs on both nodes, the job's id and the
    pid of its second node's step."""
    env = {"XDG_STATE_HOME": str(tmp_path)}
    res = run_cli("submit", "--local", str(spec(tmp_path, f"mode: mpi\nnodes: 2\ncommand: '{command}'")), env=env)
    job, folder = res.stdout.split()[0], job_dir(tmp_path, res)
    deadline = time.monotonic() + 30
    while len(subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()) < 2:
        assert time.monotonic() < deadline, "the commands did not start"
        time.sleep(0.2)
    steps = subprocess.run(["pgrep", "-f", f"main.py node .* {folder}"], capture_output=True, text=True).stdout.split()
    # a step's child between fork and exec has the step's command line and environment: not a step
    steps = [p for p in steps if Path(f"/proc/{p}/stat").read_text().rsplit(") ", 1)[1].split()[1] not in steps]
    second = [p for p in steps if b"SLURM_NODEID=1\0" in Path(f"/proc/{p}/environ").read_bytes()]
    assert len(second) == 1, steps
    return job, int(second[0])


def test_a_frozen_node_step_ends_the_job_as_a_lost_node(tmp_path: Path) -> None:
    marker = f"sleep 9{uuid.uuid4().int % 1000:03d}"
    env = {"XDG_STATE_HOME": str(tmp_path)}
    job, step = second_node_step(tmp_path, marker, marker)
    time.sleep(6)  # both steps have beaten
    os.kill(step, signal.SIGSTOP)  # a step stuck (SIGSTOP, or in the kernel): its command goes on
    try:
        waited = run_cli("logs", job, "--follow", env=env, timeout=120)  # follows until the job ends
        assert waited.returncode == 0
        status = json.loads(run_cli("status", job, "--json", env=env).stdout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(step, signal.SIGCONT)
    assert status["state"] == "NODE_FAIL" and "lost (its step stopped answering)" in status["reason"], status
    deadline = time.monotonic() + 30
    while not no_process_with(marker) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert no_process_with(marker)


def test_nothing_of_a_command_outlives_its_job_when_its_node_step_is_killed(tmp_path: Path) -> None:
    marker = f"sleep 6{uuid.uuid4().int % 1000:03d}"
    daemon = f"sleep 5{uuid.uuid4().int % 1000:03d}"
    command = f"setsid {daemon} & {marker}"  # a daemon in a session of its own, then the command
    env = {"XDG_STATE_HOME": str(tmp_path)}
    job, step = second_node_step(tmp_path, command, marker)
    os.kill(step, signal.SIGKILL)  # what the OOM killer does to a node's step
    waited = run_cli("logs", job, "--follow", env=env, timeout=120)
    assert waited.returncode == 0
    assert json.loads(run_cli("status", job, "--json", env=env).stdout)["state"] == "FAILED"
    deadline = time.monotonic() + 30
    while not (no_process_with(marker) and no_process_with(daemon)) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert no_process_with(marker) and no_process_with(daemon)


def test_a_failing_node_is_restarted_in_place_as_the_next_attempt(tmp_path: Path) -> None:
    body = (
        "mode: ddp\nnodes: 2\nrestart: {max: 0, on: [failure], in_place: 2}\n"
        "command: 'echo attempt $TI_SLURM_RESTART_COUNT rank $RANK; "
        'if [ "$TI_SLURM_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then exit 3; fi\''
    )
    env = {"XDG_STATE_HOME": str(tmp_path)}
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env=env)
    assert res.returncode == 0, res.stderr
    jd = job_dir(tmp_path, res)
    assert (jd / "attempts" / "0" / "logs" / "ddp-1.log").read_text() == "attempt 0 rank 1\n"
    assert (jd / "logs" / "ddp-1.log").read_text() == "attempt 1 rank 1\n"
    shown = run_cli("status", res.stdout.split()[0], env=env).stdout
    assert re.search(r"FAILED -> restarted in place \S+ +ddp node localhost \(index 1\) exited 3", shown), shown


def test_in_place_restarts_run_out_then_the_job_fails(tmp_path: Path) -> None:
    body = "mode: ddp\nnodes: 1\nrestart: {on: [failure], in_place: 2}\ncommand: 'exit 3'"
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 1
    assert "FAILED: ddp node localhost (index 0) exited 3; a local run is not requeued (after 3 attempts)" in res.stderr
    assert sorted(p.name for p in (job_dir(tmp_path, res) / "attempts").iterdir()) == ["0", "1"]


def test_resubmit_runs_a_job_again_as_planned_and_a_gone_plan_is_one_line(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    marker = tmp_path / "ready"
    path = spec(tmp_path, f"mode: ddp\nnodes: 2\ncommand: 'echo try $RANK; test -e {marker}'")
    first = run_cli("submit", "--local", "--wait", str(path), env=env)
    assert first.returncode == 1, first.stderr
    job = first.stdout.split()[0]
    marker.write_text("")
    path.write_text("mode: ddp\nnodes: 2\ncommand: 'exit 9'\n")  # the spec changed since: the plan is what runs
    again = run_cli("resubmit", job, "--wait", env=env)
    assert again.returncode == 0, again.stderr
    second = again.stdout.split()[0]
    assert second != job and second.startswith("local-")
    assert run_cli("logs", second, "--node", "ddp-1", env=env).stdout == "try 1\n"
    shutil.rmtree(job_dir(tmp_path, first))
    gone = run_cli("resubmit", job, env=env)
    assert gone.returncode == 2 and gone.stdout == ""
    assert gone.stderr == (
        f"ti-slurm: error: job {job}: its plan is gone (its directory {job_dir(tmp_path, first)} holds none): "
        "submit its spec again\n"
    )


@pytest.mark.parametrize(
    ("torch", "said"),
    [
        (None, "ModuleNotFoundError: No module named 'torch'; install PyTorch in the job's Python (pip install torch"),
        (
            "raise OSError('libgomp.so.1: cannot open shared object file: No such file or directory')",
            "OSError: libgomp.so.1: cannot open shared object file: No such file or directory; install libgomp1"
            " (Debian: apt install libgomp1)",
        ),
    ],
    ids=["torch not installed", "a system library missing"],
)
def test_a_framework_the_commands_python_cannot_import_stops_every_node_before_the_command(
    tmp_path: Path, torch: str | None, said: str
) -> None:
    """A DDP job whose command runs a Python without a working torch: one line on each node naming that Python,
    the import error's own last line and what to install; the command never ran."""
    import venv

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    if torch is not None:  # a torch whose import fails as one built against a library this node lacks
        site = next(env_dir.glob("lib/python*/site-packages"))
        (site / "torch").mkdir()
        (site / "torch" / "__init__.py").write_text(torch + "\n")
    python = env_dir / "bin" / "python"
    (tmp_path / "train.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    body = f"mode: ddp\nnodes: 2\ncommand: '{python} {tmp_path / 'train.py'}'"
    res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 1 and not (tmp_path / "ran").exists(), res.stderr
    assert f"preflight on localhost: {python} cannot import torch (the ddp mode's framework): {said}" in res.stderr


def test_inline_python_that_does_not_name_the_framework_runs_without_it(tmp_path: Path) -> None:
    """The quick start's PS-Worker job prints its TF_CONFIG with ``python -c``: no TensorFlow needed, none asked
    for (a Python without the framework runs it); inline code that imports it is checked as a script is."""
    import venv

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    for code, exit_code in (("import json, os; print(os.environ[chr(82)])", 0), ("import torch", 1)):
        body = f"mode: ddp\nnodes: 1\nenv: {{R: ok}}\ncommand: '{python} -c \"{code}\"'"
        res = run_cli("submit", "--local", "--wait", str(spec(tmp_path, body)), env={"XDG_STATE_HOME": str(tmp_path)})
        assert res.returncode == exit_code, res.stderr
    assert f"{python} cannot import torch (the ddp mode's framework)" in res.stderr
