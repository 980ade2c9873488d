"""Hostile and broken input: each is one line on stderr, exit 2, and nothing is created or submitted."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli


def submit_local(tmp_path: Path, path: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("submit", "--local", str(path), cwd=tmp_path, env={"XDG_STATE_HOME": str(tmp_path / "state")})


def one_line_error(res: subprocess.CompletedProcess[str], needle: str) -> None:
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("ti-slurm: error: "), res.stderr
    assert needle in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


BASE = {"mode": "mpi", "command": "true", "nodes": 1}
DEEP_JSON = '{"mode": "mpi", "command": "x", "nodes": 1, "env": ' + "[" * 100_000 + "]" * 100_000 + "}"
NESTED = json.dumps({**BASE, "env": {"A": [[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]}})


@pytest.mark.parametrize(
    "name,text,needle",
    [
        ("deep.json", DEEP_JSON, "spec"),
        ("deep.yaml", "mode: mpi\ncommand: x\nnodes: 1\nenv: " + "[" * 5000 + "]" * 5000 + "\n", "spec"),
        ("nested.json", NESTED, "nested more than"),
        ("digits.json", '{"mode": "mpi", "command": "x", "nodes": ' + "1" * 5000 + "}", "invalid value"),
        ("digits.yaml", "mode: mpi\ncommand: x\nnodes: " + "1" * 5000 + "\n", "invalid value"),
        ("surrogate.json", '{"mode": "mpi", "command": "x", "nodes": 1, "workdir": "a\\ud800"}', "workdir"),
        ("surrogate-env.json", '{"mode": "mpi", "command": "x", "nodes": 1, "env": {"A": "\\udfff"}}', "env.A"),
        ("nodir.json", json.dumps({**BASE, "workdir": "/nonexistent/dir"}), "workdir: '/nonexistent/dir': no such"),
        ("channel.yaml", "mode: ddp\nnodes: 1\ncommand: x\ninputs: {my-data: /tmp}\n", "inputs.my-data: 'my-data': a"),
        (
            "twice.yaml",
            "mode: ddp\nnodes: 1\ncommand: x\ninputs: {train: /tmp, TRAIN: /tmp}\n",
            "inputs.TRAIN: 'TRAIN': is channel 'train' again (both are TI_SLURM_INPUT_TRAIN)",
        ),
        (
            "nopath.yaml",
            "mode: ddp\nnodes: 1\ncommand: x\ninputs: {train: /nonexistent/x}\n",
            "inputs.train: '/nonexistent/x': no such file or directory",
        ),
        (
            "outputs-in-code.yaml",
            "mode: ddp\nnodes: 1\ncommand: x\ncode: .\noutputs: runs\n",
            "outputs: 'runs': is inside code (.): each job's outputs would be the next job's code",
        ),
        (
            "in-place.yaml",
            "mode: ddp\nnodes: 1\ncommand: x\nrestart: {in_place: 2}\n",
            "restart.in_place: 2: restarts in place follow failure or hang, which restart.on does not list",
        ),
        (
            "in-place-neg.yaml",
            "mode: ddp\nnodes: 1\ncommand: x\nrestart: {on: [failure], in_place: -1}\n",
            "restart.in_place",
        ),
        (  # sbatch takes the last of two equal options: these would drop the checkpoint signal and the requeue
            "sbatch-undoes-restart.yaml",
            "mode: ddp\nnodes: 1\ncommand: x\nrestart: {max: 2}\nsbatch: {signal: 'B:USR1@30', no-requeue: true}\n",
            "--signal: ti-slurm sets it for the checkpoint signal before the time limit (signal, restart); "
            "--no-requeue: it undoes --requeue, which ti-slurm sets for requeueing a preempted or failed job (restart)",
        ),
        (
            "spare-no-restart.yaml",
            "mode: ddp\nnodes: 2\ncommand: x\nspare_nodes: 1\n",
            "spare_nodes: 1: a spare takes a lost node's place when the job restarts in place; "
            "set restart.in_place and list node_fail in restart.on",
        ),
        (
            "spare-ray-groups.yaml",
            "mode: ray\ncommand: x\nhead: {}\nworker_groups: [{nodes: 1}, {nodes: 2}]\nspare_nodes: 1\n"
            "restart: {on: [node_fail], in_place: 1}\n",
            "spare_nodes: 1: spare nodes and a range of nodes go to ray's one worker group: "
            "a job of several worker groups takes neither",
        ),
        (
            "spare-neg.yaml",
            "mode: ddp\nnodes: 2\ncommand: x\nspare_nodes: -1\n",
            "spare_nodes",
        ),
        (
            "range-backwards.yaml",
            "mode: ddp\nnodes: {min: 3, max: 2}\ncommand: x\n",
            "nodes: {'min': 3, 'max': 2}: min (3) is more than max (2)",
        ),
        ("range-zero.yaml", "mode: ddp\nnodes: {min: 0, max: 2}\ncommand: x\n", "nodes.min: 0:"),
        ("range-bool.yaml", "mode: ddp\nnodes: true\ncommand: x\n", "nodes: True: expected a number, not true/false"),
        (
            "range-ps.yaml",
            "mode: ps-worker\ncommand: x\nps: {nodes: {min: 1, max: 2}}\nworker: {nodes: 2}\n",
            "ps.nodes: {'min': 1, 'max': 2}: the ps nodes of mode ps-worker are fixed in number; "
            "only worker.nodes may be a range",
        ),
        (
            "range-horovod.yaml",
            "mode: horovod\ncommand: x\nnodes: {min: 2, max: 4}\n",
            "nodes: {'min': 2, 'max': 4}: horovod's workers run no step of their own",
        ),
        (
            "ma-env.yaml",
            "mode: ddp\nplatform: modelarts\nnodes: 2\ncommand: x\nenv:\n  MA_NUM_HOSTS: 4\n",
            "env.MA_NUM_HOSTS: '4': MA_* variables are set by platform modelarts on every node",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and len(value) < 30 and "." in value else "",
)
def test_broken_specs_are_one_line(tmp_path: Path, name: str, text: str, needle: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    one_line_error(submit_local(tmp_path, path), needle)
    assert not (tmp_path / "ti-slurm-jobs").exists()


@pytest.mark.parametrize("where", ["file", "below-file"])
def test_an_output_dir_that_is_a_file_is_one_line(tmp_path: Path, where: str) -> None:
    (tmp_path / "taken").write_text("not a directory")
    out = tmp_path / "taken" if where == "file" else tmp_path / "taken" / "jobs"
    path = tmp_path / "job.json"
    path.write_text(json.dumps({**BASE, "output_dir": str(out)}))
    one_line_error(submit_local(tmp_path, path), "output_dir")
    assert (tmp_path / "taken").read_text() == "not a directory"


@pytest.mark.parametrize(
    "args,needle",
    [
        (["env", "--mode", "ddp", "--gpus-per-node", "-5"], "--gpus-per-node: '-5'"),
        (["env", "--mode", "ddp", "--master-port", "99999999"], "--master-port: '99999999'"),
        (["env", "--mode", "ddp", "--rendezvous-timeout", "١"], "--rendezvous-timeout"),
        (["status", "123", "--host", "a" * 300], "host: 'aaaa"),  # the resolver's UnicodeError before
        (["status", "123", "--host", "n." + "b" * 70 + ".org"], "labels of at most 63"),
    ],
)
def test_bad_flags_are_one_line(args: list[str], needle: str) -> None:
    res = run_cli(*args)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and needle in res.stderr, res.stderr


@pytest.mark.parametrize(
    "env,needle",
    [
        ({"SLURM_JOB_ID": "../../etc", "SLURM_JOB_NODELIST": "n1", "SLURM_NODEID": "0"}, "SLURM_JOB_ID='../../etc'"),
        ({"SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NODEID": "١"}, "SLURM_NODEID='١' is not a"),
        ({"SLURM_JOB_ID": "1" * 5000, "SLURM_JOB_NODELIST": "n1", "SLURM_NODEID": "0"}, "is not a"),
    ],
    ids=["path-job-id", "arabic-digit", "huge-job-id"],
)
def test_hostile_slurm_variables_in_exec_are_one_line(tmp_path: Path, env: dict[str, str], needle: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TI_SLURM_"))}
    res = subprocess.run(
        ["ti-slurm", "exec", "--mode", "ddp", "--", "true"],
        env={**clean, **env, "TMPDIR": str(tmp_path), "TI_SLURM_NODE_ADDR": "10.0.0.1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and needle in res.stderr, res.stderr
    made = [p.name for p in tmp_path.glob("ti-slurm-*/*")]
    assert made == ([env["SLURM_JOB_ID"]] if env["SLURM_JOB_ID"] == "12" else [])  # none from a hostile job id


@pytest.mark.parametrize(
    "env,needle",
    [
        ({"SLURM_HET_SIZE": "999999999999"}, "SLURM_HET_SIZE='999999999999': Slurm makes at most 128 components"),
        ({"SLURM_HET_SIZE": "2", "SLURM_JOB_NODELIST_HET_GROUP_0": "n1"}, "SLURM_JOB_NODELIST_HET_GROUP_1 is not set"),
        ({"SLURM_GPUS_ON_NODE": "99999"}, "SLURM_GPUS_ON_NODE='99999': more than 64 GPUs per node"),
    ],
    ids=["huge-het-size", "missing-het-group", "huge-gpu-count"],
)
def test_slurm_variables_out_of_bounds_in_env_are_one_line(env: dict[str, str], needle: str) -> None:
    """Where a huge SLURM_HET_SIZE made ti-slurm env hang, and a missing group's list was not named."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TI_SLURM_"))}
    base = {"SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "n1", "SLURM_NODEID": "0", "TI_SLURM_NODE_ADDR": "10.0.0.1"}
    res = subprocess.run(
        ["ti-slurm", "env", "--mode", "ray"], env={**clean, **base, **env}, capture_output=True, text=True,
        check=False, timeout=30,
    )  # fmt: skip
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and needle in res.stderr, res.stderr[-300:]


def test_broken_records_do_not_break_status_or_list(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    path = tmp_path / "job.json"
    path.write_text(json.dumps({**BASE, "output_dir": str(tmp_path / "out")}))
    res = run_cli("submit", "--local", "--wait", str(path), cwd=tmp_path, env=env)
    job = res.stdout.split()[0]
    status_file = tmp_path / "out" / job / "status.jsonl"
    lines = status_file.read_text().splitlines()
    start = json.loads(lines[0])
    # valid JSON that is not an event, and a start event without nodes, before the real ones
    no_nodes = json.dumps({**start, "components": [{"name": "mpi"}]})
    status_file.write_text("\n".join(["[1, 2]", '"text"', no_nodes, *lines]))
    (tmp_path / "state" / "ti-slurm" / "jobs" / "9.json").write_text("[1, 2, 3]\n")
    assert json.loads(run_cli("status", job, "--json", env=env).stdout)["state"] == "COMPLETED"
    listing = run_cli("list", env=env)
    assert listing.returncode == 0 and job in listing.stdout


def test_host_without_the_ssh_extra_is_one_line(tmp_path: Path) -> None:
    fake = tmp_path / "site"
    (fake / "paramiko").mkdir(parents=True)
    (fake / "paramiko" / "__init__.py").write_text("raise ImportError(\"No module named 'paramiko'\")\n")
    path = tmp_path / "job.json"
    path.write_text(json.dumps(BASE))
    res = run_cli("submit", str(path), "--host", "login", env={"PYTHONPATH": str(fake)})
    one_line_error(res, "needs paramiko: pip install 'ti-slurm[ssh]'")


def test_a_registry_that_cannot_be_written_is_a_warning_after_the_job_id(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("a file where the registry's directory would go")
    path = tmp_path / "job.json"
    path.write_text(json.dumps({**BASE, "output_dir": str(tmp_path / "out")}))
    res = run_cli("submit", "--local", str(path), cwd=tmp_path, env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert res.returncode == 0 and res.stdout.startswith("local-"), res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("ti-slurm: warning: job local-"), res.stderr
    assert "is submitted, but recording it" in res.stderr and "Traceback" not in res.stderr
    assert (tmp_path / "out" / res.stdout.strip()).is_dir()  # the job itself went ahead
    assert f"its files are in {tmp_path / 'out' / res.stdout.strip()}" in res.stderr  # a local job has no other trace


@pytest.mark.parametrize(
    "args,line",
    [
        (
            ["--backend", "pyslurm", "--host", "login1"],
            "ti-slurm: error: backend: 'pyslurm': runs on this machine; a host (login1) means the Slurm commands "
            "over SSH\n",
        ),
        (["--backend", "nosuch"], "invalid choice: 'nosuch'"),
    ],
)
def test_a_backend_that_cannot_serve_the_submit_is_one_line(tmp_path: Path, args: list[str], line: str) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("mode: ddp\nnodes: 1\ncommand: 'true'\n")
    res = run_cli("submit", *args, str(spec), env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode in (1, 2) and res.stderr.count("\n") == 1 and line in res.stderr, res.stderr
    assert not (tmp_path / "ti-slurm").exists()  # nothing recorded: nothing was submitted


@pytest.mark.skipif(os.geteuid() != 0, reason="ci/slurm-cluster/up runs as root only")
@pytest.mark.parametrize(
    "args,line",
    [
        (["--nodes", "abc"], "up: --nodes 'abc': expected a whole number from 3 to 228 (240 nodes less the islands)\n"),
        (["--nodes", "2"], "up: --nodes '2': expected a whole number from 3 to 228 (240 nodes less the islands)\n"),
        (["--slurm", "9.9"], "up: --slurm '9.9': expected 22.05 or 25.11\n"),
        (
            ["--accounting", "--slurm", "25.11"],
            "up: --accounting: only with --slurm 22.05 (Debian's slurmdbd; the 25.11 build has no MySQL plugin)\n",
        ),
        (["--frobnicate"], "up: unknown argument '--frobnicate' (usage: up [--slurm 22.05|25.11] [--nodes N] "
         "[--accounting] | up --twin)\n"),
    ],
)  # fmt: skip
def test_bad_test_cluster_options_are_one_line_and_change_nothing(args: list[str], line: str) -> None:
    before = subprocess.run(["pgrep", "-x", "slurmctld"], capture_output=True, text=True).stdout
    up = Path(__file__).resolve().parents[2] / "ci" / "slurm-cluster" / "up"
    res = subprocess.run([str(up), *args], capture_output=True, text=True, timeout=30)
    assert (res.returncode, res.stderr, res.stdout) == (2, line, "")
    assert subprocess.run(["pgrep", "-x", "slurmctld"], capture_output=True, text=True).stdout == before


@pytest.mark.parametrize(
    "job_id",
    ["--me", "--state=RUNNING", "", "../../../evil", "1 2", "123;rm", "-1", "local-", "12_x", "١٢", "1" * 40],
)
def test_what_is_not_a_job_id_never_reaches_slurm_or_the_registry(tmp_path: Path, job_id: str) -> None:
    # a scancel/scontrol/squeue on PATH that would tell if it were run
    shims = tmp_path / "bin"
    shims.mkdir()
    for tool in ("scancel", "scontrol", "squeue"):
        (shims / tool).write_text(f'#!/bin/sh\necho {tool} "$@" >> {tmp_path / "ran"}\n')
        (shims / tool).chmod(0o755)
    env = {"PATH": f"{shims}:{os.environ['PATH']}", "XDG_STATE_HOME": str(tmp_path / "state")}
    for command in ("cancel", "status", "logs"):
        res = run_cli(command, "--", job_id, env=env)
        assert res.returncode == 2, (command, res.stderr)
        assert res.stderr.startswith(f"ti-slurm: error: job id: {job_id!r}: not a job id"), res.stderr
        assert res.stderr.count("\n") == 1
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("job_id", [None, 123, b"123", ""])
def test_get_job_refuses_what_is_not_a_job_id(job_id: object) -> None:
    import ti_slurm

    with pytest.raises(ti_slurm.ConfigError, match=r"^job id: "):
        ti_slurm.get_job(job_id)  # type: ignore[arg-type]


def fake_scontrol(tmp_path: Path, job_id: str, state: str) -> dict[str, str]:
    """A PATH on which ``scontrol -o show job`` says job ``job_id`` of this user is in ``state``."""
    shims = tmp_path / "bin"
    shims.mkdir(exist_ok=True)
    line = f"JobId={job_id} JobName=x UserId=root({os.getuid()}) JobState={state} Reason=None NodeList=node01"
    (shims / "scontrol").write_text(f"#!/bin/sh\necho '{line}'\n")
    (shims / "scontrol").chmod(0o755)
    return {"PATH": f"{shims}:{os.environ['PATH']}"}


@pytest.mark.parametrize("where", ["planted by another user", "runtime dir not writable"])
def test_the_queue_cache_is_used_only_when_it_is_private(tmp_path: Path, where: str) -> None:
    from dataclasses import asdict

    from ti_slurm.backends import JobInfo
    from ti_slurm.backends.answers import cache_key
    from ti_slurm.follow.registry import remember

    env = {"XDG_STATE_HOME": str(tmp_path / "state"), **fake_scontrol(tmp_path, "4242", "RUNNING")}
    os.environ["XDG_STATE_HOME"] = env["XDG_STATE_HOME"]
    try:
        remember(JobInfo("4242", "x", "slurm", str(tmp_path / "out" / "4242")))
    finally:
        del os.environ["XDG_STATE_HOME"]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    planted = tmp / f"ti-slurm-{os.getuid()}"
    if where == "planted by another user":  # made first by uid 65534, world-writable, with an answer of its own
        planted.mkdir()
        answer = {"time": 4e9, "jobs": {"4242": asdict(JobInfo("4242", "x", "slurm")) | {"state": "CANCELLED"}}}
        (planted / f"queue-{cache_key('slurm', '')}.json").write_text(json.dumps(answer))
        for path in (planted, *planted.iterdir()):
            os.chown(path, 65534, 65534)
        planted.chmod(0o777)
        env |= {"TMPDIR": str(tmp), "XDG_RUNTIME_DIR": ""}
    else:  # after su or sudo -u: the runtime dir of someone else
        env |= {"XDG_RUNTIME_DIR": "/proc/self"}
    res = run_cli("status", "4242", "--json", env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["state"] == "RUNNING"  # what the controller says, not the planted answer
    assert res.stderr.count("warning:") == 1 and "without the shared cache" in res.stderr, res.stderr
    if where == "planted by another user":
        assert sorted(p.name for p in planted.iterdir()) == [f"queue-{cache_key('slurm', '')}.json"]  # nothing added


def run_batch_script(tmp_path: Path, job_id: str) -> subprocess.CompletedProcess[str]:
    """The rendered batch script, run by bash as Slurm runs it (its supervisor is /bin/echo here)."""
    spec = tmp_path / "job.yaml"
    spec.write_text(f"mode: mpi\nnodes: 1\ncommand: 'true'\npython: /bin/echo\noutput_dir: {tmp_path / 'out'}\n")
    script = tmp_path / "job.sh"
    script.write_text(run_cli("render", str(spec), env={"XDG_STATE_HOME": str(tmp_path / "state")}).stdout)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")} | {"SLURM_JOB_ID": job_id}
    return subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("planted", ["a directory of uid 65534, mode 777", "a symlink to a directory of mine"])
def test_a_job_directory_made_first_by_someone_else_is_never_used(tmp_path: Path, planted: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o1777)  # a shared output directory
    job_dir = out / "5000"  # job ids are predictable: the next one, made in advance
    if planted.startswith("a directory"):
        job_dir.mkdir()
        os.chown(job_dir, 65534, 65534)
        job_dir.chmod(0o777)
    else:
        elsewhere = tmp_path / "mine"
        elsewhere.mkdir(mode=0o700)
        job_dir.symlink_to(elsewhere)
    res = run_batch_script(tmp_path, "5000")
    assert res.returncode == 1 and "is not a private directory of uid" in res.stderr, res.stderr
    assert list((job_dir if planted.startswith("a directory") else tmp_path / "mine").iterdir()) == []  # no plan


def test_a_job_directory_is_made_private_and_an_earlier_jobs_own_is_kept(tmp_path: Path) -> None:
    first = run_batch_script(tmp_path, "5001")
    job_dir = tmp_path / "out" / "5001"
    assert first.returncode == 0 and "-m ti_slurm.job supervise" in first.stdout, first.stderr
    assert (job_dir.stat().st_mode & 0o777, (job_dir / "plan.json").stat().st_mode & 0o077) == (0o700, 0)
    (job_dir / "status.jsonl").write_text("an earlier job's record\n")
    (job_dir / "plan.json").write_text('{"comment": "ti-slurm:0123456789abcdef"}\n')  # another submission's
    again = run_batch_script(tmp_path, "5001")  # a later job that got the same id (an id reset)
    assert again.returncode == 0, again.stderr
    earlier = [p for p in (tmp_path / "out").iterdir() if p.name.startswith("5001.earlier.")]
    assert len(earlier) == 1 and (earlier[0] / "status.jsonl").read_text() == "an earlier job's record\n"
    assert not (job_dir / "status.jsonl").exists()


@pytest.mark.parametrize("output_dir", ["/proc/self", "/sys/kernel"])
def test_an_output_dir_that_cannot_hold_a_job_directory_is_one_line(tmp_path: Path, output_dir: str) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(f"mode: mpi\nnodes: 1\ncommand: 'true'\noutput_dir: {output_dir}\n")
    res = run_cli("submit", "--local", str(spec), env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert res.returncode == 2 and res.stdout == "", res.stderr
    assert res.stderr.startswith(f"ti-slurm: error: output_dir: '{output_dir}': cannot hold a job directory")
    assert res.stderr.count("\n") == 1


WRONG_SHAPES = [
    {"components": 5},
    {"components": [{"name": 5, "nodes": ["n"]}]},
    {"records": 5},
    {"records": [1, 2]},
    {"time": 1e300},
    {"time": float("nan")},
    {"time": -1e20},
    {"attempt": True},
    {"exit_code": "3"},
    {"lost_nodes": "node01"},
    {"failed": [1]},
]


@pytest.mark.parametrize("wrong", WRONG_SHAPES, ids=[json.dumps(w) for w in WRONG_SHAPES])
def test_events_of_the_wrong_shape_are_skipped_by_status_logs_and_list(tmp_path: Path, wrong: dict) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    path = tmp_path / "job.json"
    path.write_text(json.dumps({**BASE, "output_dir": str(tmp_path / "out")}))
    job = run_cli("submit", "--local", "--wait", str(path), cwd=tmp_path, env=env).stdout.split()[0]
    status_file = tmp_path / "out" / job / "status.jsonl"
    lines = status_file.read_text().splitlines()
    damaged = [json.dumps({**json.loads(line), **wrong}) for line in lines]  # every event, damaged alike
    status_file.write_text("\n".join([*lines, *damaged]) + "\n")  # after the good ones: they would win
    for args in (["status", job], ["status", job, "--json"], ["logs", job], ["list"]):
        res = run_cli(*args, env=env)
        assert res.returncode == 0 and "Traceback" not in res.stderr, (args, res.stderr[-500:])
    assert json.loads(run_cli("status", job, "--json", env=env).stdout)["state"] == "COMPLETED"


def test_fifos_and_dangling_links_neither_crash_nor_hang_status_logs_and_list(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    path = tmp_path / "job.json"
    path.write_text(json.dumps({**BASE, "output_dir": str(tmp_path / "out")}))
    job = run_cli("submit", "--local", "--wait", str(path), cwd=tmp_path, env=env).stdout.split()[0]
    jobs = tmp_path / "state" / "ti-slurm" / "jobs"
    (jobs / "77.json").symlink_to(tmp_path / "nowhere.json")  # a registry entry that dangles
    os.mkfifo(jobs / "78.json")  # a registry entry that is a FIFO
    log = next((tmp_path / "out" / job / "logs").iterdir())
    log.unlink()
    os.mkfifo(log)  # a node's log that is a FIFO
    for args in (["status", job], ["logs", job], ["list"]):
        res = run_cli(*args, env=env, timeout=20)
        assert res.returncode == 0 and "Traceback" not in res.stderr, (args, res.stderr[-500:])
    status = tmp_path / "out" / job / "status.jsonl"
    status.unlink()
    os.mkfifo(status)  # the job's record itself
    res = run_cli("status", job, env=env, timeout=20)
    assert "Traceback" not in res.stderr, res.stderr[-500:]


@pytest.mark.parametrize(
    "variable,value,needle",
    [
        ("TMPDIR", "/nonexistent", "TMPDIR='/nonexistent': cannot hold the job's files"),
        ("TMPDIR", "a file", "TMPDIR="),
        ("TI_SLURM_JOB_DIR", "/proc/self/x", "TI_SLURM_JOB_DIR: '/proc/self/x' cannot hold the job's files"),
    ],
)
def test_a_job_directory_the_node_cannot_use_is_one_line_naming_the_variable(
    tmp_path: Path, variable: str, value: str, needle: str
) -> None:
    if value == "a file":
        value = str(tmp_path / "afile")
        Path(value).write_text("")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TI_SLURM_"))}
    env = {**clean, "SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "n1", "SLURM_NODEID": "0", variable: value}
    for command in (["env", "--mode", "ddp"], ["exec", "--mode", "ddp", "--", "true"]):
        res = subprocess.run(["ti-slurm", *command], env=env, capture_output=True, text=True, check=False)
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and needle in res.stderr, res.stderr[-300:]


def test_a_fifo_or_a_device_as_the_spec_or_the_points_file_is_one_line_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)  # nobody writes it: reading it would wait forever
    one_line_error(submit_local(tmp_path, Path("spec.yaml")), "spec: 'spec.yaml': is not a regular file (a FIFO or a")
    one_line_error(submit_local(tmp_path, Path("/dev/zero")), "spec: '/dev/zero': is not a regular file")
    (tmp_path / "job.yaml").write_text("mode: ddp\nnodes: 1\ncommand: echo {lr}\n")
    points = tmp_path / "points.yaml"
    os.mkfifo(points)
    res = run_cli("sweep", "--local", "job.yaml", "--points", "points.yaml", cwd=tmp_path,
                  env={"XDG_STATE_HOME": str(tmp_path / "state")})  # fmt: skip
    one_line_error(res, "--points: 'points.yaml': is not a regular file (a FIFO or a device)")


def test_a_points_file_nested_thousands_deep_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("mode: ddp\nnodes: 1\ncommand: echo {lr}\n")
    for name, text in (("p.json", "[" * 100_000 + "]" * 100_000), ("p.yaml", "- " + "[" * 5000 + "]" * 5000)):
        (tmp_path / name).write_text(text)
        res = run_cli("sweep", "--local", "job.yaml", "--points", name, cwd=tmp_path,
                      env={"XDG_STATE_HOME": str(tmp_path / "state")})  # fmt: skip
        one_line_error(res, "--points: ")
    assert not (tmp_path / "state").exists() or not list((tmp_path / "state").rglob("*.json"))


@pytest.mark.parametrize(
    "outputs,why",
    [
        ("/dev/null", "is not a directory: each job's outputs go in a folder of it"),
        ("job.yaml", "is not a directory: each job's outputs go in a folder of it"),
        ("/proc/self", "is a system folder, not storage: name a folder of yours"),
    ],
)
def test_outputs_that_are_no_folder_of_storage_are_one_line(tmp_path: Path, outputs: str, why: str) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(f"mode: ddp\nnodes: 1\ncommand: 'true'\noutputs: {outputs}\n")
    one_line_error(submit_local(tmp_path, spec), f"outputs: '{outputs}': {why}")
    assert not (tmp_path / "ti-slurm-jobs").exists()


def test_after_with_the_local_runner_is_one_line_not_ignored(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("mode: ddp\nnodes: 1\ncommand: 'true'\n")
    res = run_cli("submit", "--local", str(spec), "--after", "123", cwd=tmp_path,
                  env={"XDG_STATE_HOME": str(tmp_path / "state")})  # fmt: skip
    one_line_error(res, "--after: ['123']: the local runner starts every job at once: pipelines (after:, --after) need")
    assert not (tmp_path / "ti-slurm-jobs").exists()
    local_id = run_cli("submit", "--local", str(spec), "--after", "local-405605379", cwd=tmp_path)  # not a Slurm id
    one_line_error(local_id, "pipelines (after:, --after) need Slurm; submit without --local")


def test_control_characters_from_jobs_and_specs_never_reach_the_terminal(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    # a failure file and a log tail holding escape sequences (retitle the window, clear the screen)
    command = r'printf "bad\033]0;pwned\007\033[2J\n" | tee $TI_SLURM_OUTPUT_DIR/failure; exit 1'
    (tmp_path / "job.yaml").write_text(f"mode: ddp\nnodes: 1\noutput_dir: out\ncommand: '{command}'\n")
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path, env=env)
    assert res.returncode == 1
    assert "\x1b" not in res.stderr and "\x07" not in res.stderr, res.stderr
    assert "bad\\x1b]0;pwned\\x07\\x1b[2J" in res.stderr, res.stderr
    job = res.stdout.split()[0]
    status = run_cli("status", job, cwd=tmp_path, env=env).stdout
    assert "\x1b" not in status and "bad\\x1b]0;pwned" in status, status
    # a spec's key, as its error names it
    (tmp_path / "bad.yaml").write_text('mode: ddp\nnodes: 1\ncommand: x\nenv: {"\\e[2JA": "1"}\n')
    res = run_cli("submit", "--local", "bad.yaml", cwd=tmp_path, env=env)
    assert res.returncode == 2 and "\x1b" not in res.stderr and "env" in res.stderr, res.stderr
    # a sweep's value, in its table
    (tmp_path / "sweep.yaml").write_text("mode: ddp\nnodes: 1\noutput_dir: out\ncommand: 'true {tag}'\n")
    res = run_cli("sweep", "--local", "sweep.yaml", "--param", "tag=a\x1b[2Jb", "--wait", cwd=tmp_path, env=env)
    assert res.returncode == 0 and "\x1b" not in res.stderr and "a\\x1b[2Jb" in res.stderr, res.stderr
    # data stays data: logs print what the job wrote, byte for byte
    logs = run_cli("logs", job, cwd=tmp_path, env=env)
    assert logs.returncode == 0 and "bad\x1b]0;pwned\x07\x1b[2J" in logs.stdout, logs


def test_a_cluster_that_hangs_is_left_behind_and_nothing_of_it_outlives_ti_slurm(tmp_path: Path) -> None:
    """`ti-slurm clusters` (and `--cluster auto`) asks every cluster at once: one whose Slurm command hangs is
    said as not answering within 8 s, and its command is ended when ti-slurm exits, not left running."""
    import time

    hung = tmp_path / "hung-bin"
    hung.mkdir()
    for name in ("sinfo", "sbatch"):
        (hung / name).write_text(f"#!/bin/sh\necho $$ >> {tmp_path}/pids\nexec sleep 120\n")
        (hung / name).chmod(0o755)
    (tmp_path / "slurm.conf").write_text("ClusterName=hung\n")
    (tmp_path / "config" / "ti-slurm").mkdir(parents=True)
    (tmp_path / "config" / "ti-slurm" / "config.toml").write_text(
        f'[[cluster]]\nname = "hung"\nslurm_conf = "{tmp_path / "slurm.conf"}"\nbin_dir = "{hung}"\n'
    )
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}
    started = time.monotonic()
    res = run_cli("clusters", cwd=tmp_path, env=env, timeout=60)
    assert time.monotonic() - started < 20, res.stdout + res.stderr
    assert "no answer within 8 s" in res.stdout, res.stdout + res.stderr
    time.sleep(0.5)
    pids = (tmp_path / "pids").read_text().split()
    def alive(pid: str) -> bool:  # a zombie has ended (its reaper is this machine's init, whatever it does)
        status = Path(f"/proc/{pid}/status")
        return status.exists() and "State:\tZ" not in status.read_text()

    assert pids and not any(alive(pid) for pid in pids), "a hung sinfo outlived ti-slurm"


def test_an_mpi_job_without_mpirun_stops_before_its_command_naming_what_to_install(tmp_path: Path) -> None:
    """The quick start's MPI block on a machine without Open MPI: the node says, before the command runs, that
    mpirun is missing and what to install (it failed with the shell's `mpirun: command not found`)."""
    import shutil
    import sys

    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("sh", "bash", "env", "cat", "sleep", "echo"):
        (tools / name).symlink_to(shutil.which(name) or f"/bin/{name}")
    (tmp_path / "job.yaml").write_text("mode: mpi\nnodes: 2\ncommand: mpirun -np 2 hostname\n")
    env = {"PATH": f"{tools}:{Path(sys.executable).parent}", "XDG_STATE_HOME": str(tmp_path / "state")}
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path, env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "mpirun (the start command's launcher) is not on this node's PATH: install Open MPI (Debian: apt" in (
        res.stderr
    ), res.stderr
    assert "command not found" not in res.stderr


def test_msrun_under_local_is_refused_in_one_line_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(
        "mode: mindspore\nnodes: 2\ncommand: msrun --worker_num=$MS_WORKER_NUM --local_worker_num=1"
        " --master_addr=$MS_SCHED_HOST --master_port=$MS_SCHED_PORT --node_rank=$MS_NODE_ID --join=True train.py\n"
    )
    res = run_cli("submit", "--local", "job.yaml", cwd=tmp_path, env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stderr
    assert "msrun under --local: every simulated node is this machine" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]  # nothing written: no job dir, no msrun logs


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ('[rest]\nurl = 5\n', "rest.url: 5: expected text"),
        ('[[cluster]]\nnmae = "gpu"\nhost = "login"\n', "cluster.0.nmae: 'gpu': unknown key; did you mean 'name'?"),
        ('[remote]\nhots = "login"\n', "remote.hots: 'login': unknown key; did you mean 'host'?"),
        ('backend = "sbatch"\n', "backend: 'sbatch': expected one of: slurm, pyslurm, rest, local"),
        ('[[notify]]\nurl = "ftp://x"\n', "notify.0.url: 'ftp://x': expected an http:// or https:// URL"),
    ],
)
def test_a_user_config_mistake_is_one_line_naming_the_key_and_nothing_is_submitted(
    tmp_path: Path, config: str, said: str
) -> None:
    """Each key of the user config is checked as the spec's fields are: the file, the key, the value, why (the
    nearest key for a typo), exit 2, and no job anywhere."""
    (tmp_path / "config" / "ti-slurm").mkdir(parents=True)
    path = tmp_path / "config" / "ti-slurm" / "config.toml"
    path.write_text(config)
    (tmp_path / "job.yaml").write_text(f"mode: ddp\nnodes: 1\ncommand: touch {tmp_path / 'ran'}\n")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}
    res = run_cli("submit", "job.yaml", "--wait", cwd=tmp_path, env=env, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith(f"ti-slurm: error: user config {path}: {said}"), res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "state").exists()
