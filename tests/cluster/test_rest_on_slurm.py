"""The rest backend on the real test cluster's slurmrestd (JWT authentication, as a site runs it for services),
with Slurm's commands out of the client's reach: each of ``sbatch``, ``squeue``, ``scontrol``, ``scancel`` and
``sinfo`` on its PATH is a stub that refuses and notes the call (inside a job, where the supervisor and
``srun`` need them, the real one runs). Jobs go through the CLI, as a portal's scripts would, and through the
API; their records are the ones the Slurm commands make."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.test_modes_on_slurm import Job
from tests.conftest import run_cli
from tests.testcluster import this_cluster

pytestmark = pytest.mark.usefixtures("cluster")
STUBBED = ("sbatch", "squeue", "scontrol", "scancel", "sinfo")


def rest_url() -> str:
    site = this_cluster().site_config.read_text()
    return next(line.split("=", 1)[1].strip().strip('"') for line in site.splitlines() if line.startswith("rest_url"))


def new_token(lifespan: int = 600) -> str:
    """A token as a user gets one: ``scontrol token`` (the real one, before the stubs)."""
    out = subprocess.run(
        ["scontrol", "token", f"lifespan={lifespan}"], capture_output=True, text=True, check=True
    ).stdout
    return out.strip().split("=", 1)[1]


class NoSlurmCommands:
    """A PATH whose Slurm commands refuse outside a job, each call noted in ``calls``."""

    def __init__(self, folder: Path) -> None:
        self.bin, self.calls = folder / "bin", folder / "slurm-calls.log"
        self.bin.mkdir(parents=True)
        for name in STUBBED:
            real = shutil.which(name)
            assert real, name
            (self.bin / name).write_text(
                "#!/bin/sh\n"
                f'[ -n "$SLURM_JOB_ID" ] && exec {real} "$@"\n'
                f'echo "{name} $*" >> {self.calls}\n'
                f'echo "{name}: not here (the rest backend must not run it)" >&2\nexit 127\n'
            )
            (self.bin / name).chmod(0o755)

    def env(self, token: str, **extra: str) -> dict[str, str]:
        """The client's environment: these commands, ``token`` as ``SLURM_JWT``, a registry of its own."""
        state = str(self.bin.parent / "state")
        return {"PATH": f"{self.bin}:{os.environ['PATH']}", "SLURM_JWT": token, "XDG_STATE_HOME": state, **extra}

    def called(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture
def no_slurm(tmp_path: Path) -> NoSlurmCommands:
    return NoSlurmCommands(tmp_path / "client")


def rest_site(tmp_path: Path, **keys: str) -> str:
    """The cluster's site config with ``backend = "rest"`` (and ``keys``), as a portal's machine has it."""
    site = tmp_path / "site-rest.toml"
    extra = "".join(f'{k} = "{v}"\n' for k, v in keys.items())
    site.write_text(this_cluster().site_config.read_text() + 'backend = "rest"\n' + extra)
    return str(site)


def test_a_ddp_job_runs_to_completed_through_slurmrestd(tmp_path: Path, no_slurm: NoSlurmCommands) -> None:
    token = new_token()
    env = no_slurm.env(token, TI_SLURM_CONFIG=rest_site(tmp_path))
    cmd = 'echo "rank $RANK of $WORLD_SIZE on $(hostname) master $MASTER_ADDR"; env'
    job = Job(tmp_path, f"mode: ddp\nnodes: 2\ncommand: '{cmd}'", env=env)
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    status = job.status()
    assert status["state"] == "COMPLETED", job.explain()
    assert len(status["components"][0]["nodes"]) == 2
    logs = job.logs()
    assert "rank 0 of 2" in logs and "rank 1 of 2" in logs
    assert no_slurm.called() == []  # not one Slurm command on the client
    # the token is nowhere in what the job left, nor in its environment
    assert "SLURM_JWT" not in logs and token not in logs
    for path in job.job_dir.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path


def test_a_ps_worker_job_and_a_sweep_through_slurmrestd(tmp_path: Path, no_slurm: NoSlurmCommands) -> None:
    env = no_slurm.env(new_token(), TI_SLURM_CONFIG=rest_site(tmp_path))
    body = "mode: ps-worker\nps: {nodes: 1}\nworker: {nodes: 2}\ncommand: 'echo $TF_CONFIG'"
    job = Job(tmp_path, body, env=env)
    assert job.result.returncode == 0, job.result.stderr + job.logs()
    assert job.status()["state"] == "COMPLETED", job.explain()
    assert job.logs().count('"cluster"') == 3
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    (sweep_dir / "s.yaml").write_text(f"mode: ddp\nnodes: 1\noutput_dir: {sweep_dir / 'out'}\ncommand: echo lr={{lr}}")
    res = run_cli("sweep", "s.yaml", "--param", "lr=1,2,3,4", "--wait", cwd=sweep_dir, env=env)
    assert res.returncode == 0, res.stderr
    finals = sorted(p.read_text() for p in (sweep_dir / "out").glob("*/logs/*.log"))
    assert finals == [f"lr={k}\n" for k in (1, 2, 3, 4)]
    assert no_slurm.called() == []


def test_cancel_and_a_pipeline_through_slurmrestd(tmp_path: Path, no_slurm: NoSlurmCommands) -> None:
    env = no_slurm.env(new_token(), TI_SLURM_CONFIG=rest_site(tmp_path))
    (tmp_path / "long.yaml").write_text(f"mode: ddp\nnodes: 1\noutput_dir: {tmp_path / 'out'}\ncommand: sleep 300\n")
    first = run_cli("submit", "long.yaml", cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    long_id = first.stdout.strip()
    (tmp_path / "after.yaml").write_text(
        f"mode: ddp\nnodes: 1\noutput_dir: {tmp_path / 'out'}\nafter: {{jobs: [{long_id}], when: ok}}\n"
        "command: echo after\n"
    )
    second = run_cli("submit", "after.yaml", cwd=tmp_path, env=env)
    assert second.returncode == 0, second.stderr
    after_id = second.stdout.strip()
    time.sleep(3)
    shown = run_cli("status", after_id, cwd=tmp_path, env=env)
    assert "PENDING" in shown.stdout, shown.stdout + shown.stderr  # waits for the first
    cancelled = run_cli("cancel", long_id, cwd=tmp_path, env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    waited = run_cli("wait", long_id, cwd=tmp_path, env=env, timeout=120)
    assert "CANCELLED" in waited.stdout + waited.stderr
    listed = run_cli("list", cwd=tmp_path, env=env)
    assert long_id in listed.stdout and after_id in listed.stdout
    assert no_slurm.called() == []


def test_the_api_through_slurmrestd(tmp_path: Path, no_slurm: NoSlurmCommands) -> None:
    script = (
        "import ti_slurm, sys\n"
        f"spec = {{'mode': 'ddp', 'nodes': 2, 'command': 'echo api', 'output_dir': '{tmp_path / 'out'}'}}\n"
        "job = ti_slurm.submit(spec, backend='rest')\n"
        "print(job.wait().state.value)\n"
    )
    env = {**os.environ, **no_slurm.env(new_token()), "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run(["python3", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "COMPLETED", done.stderr
    assert no_slurm.called() == []


def test_the_queue_asked_again_through_slurmrestd_asks_what_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real slurmrestd's "nothing changed since" (22.05: a 304; 25.11: an empty list and its warning) is
    read as such, and 25.11's answer carries the mark to ask with; 22.05's carries none (asked whole)."""
    from ti_slurm.backends.rest import RestBackend

    monkeypatch.setenv("SLURM_JWT", new_token())
    backend = RestBackend(rest_url(), "env")
    queued, mark = backend.user_queue_since(0)
    assert queued is not None
    if this_cluster().version == "22.05":
        assert mark == 0
    else:
        assert time.time() - 600 < mark <= time.time() + 5  # the server's time of its answer
    future = int(time.time()) + 3600  # no job can have changed after it
    assert backend.user_queue_since(future) == (None, future)


def test_a_refused_token_is_one_line_saying_how_to_get_one(tmp_path: Path, no_slurm: NoSlurmCommands) -> None:
    token = new_token()
    env = no_slurm.env(token[:-4] + "AAAA", TI_SLURM_CONFIG=rest_site(tmp_path))  # its signature broken
    (tmp_path / "job.yaml").write_text(f"mode: ddp\nnodes: 1\noutput_dir: {tmp_path / 'out'}\ncommand: true\n")
    res = run_cli("submit", "job.yaml", cwd=tmp_path, env=env)
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused the token" in lines[0] and "scontrol token" in lines[0], res.stderr
    assert token[:-4] not in res.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing submitted


def test_a_process_outliving_its_token_gets_a_new_one_unnoticed(tmp_path: Path, no_slurm: NoSlurmCommands) -> None:
    """Tokens from a command live 10 s here; a program that submits, follows and cancels over half a minute
    (a portal, the console) gets new ones as they run out, and never sees a refusal."""
    real = shutil.which("scontrol")
    issued = tmp_path / "issued.log"
    getter = tmp_path / "get-token"
    getter.write_text(f"#!/bin/sh\necho issued >> {issued}\nexec {real} token lifespan=10\n")
    getter.chmod(0o755)
    env = {**os.environ, **no_slurm.env("", TI_SLURM_CONFIG=rest_site(tmp_path, rest_token=f"command:{getter}"))}
    env.pop("SLURM_JWT")
    script = (
        "import time, ti_slurm\n"
        f"spec = {{'mode': 'ddp', 'nodes': 1, 'command': 'sleep 300', 'output_dir': '{tmp_path / 'out'}'}}\n"
        "job = ti_slurm.submit(spec)\n"
        "for _ in range(3):\n"
        "    time.sleep(10)\n"
        "    print(job.status().state.value, flush=True)\n"
        "job.cancel()\n"
        "print(job.wait(timeout=120).state.value)\n"
    )
    done = subprocess.run(["python3", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    states = done.stdout.split()
    assert states[-1] == "CANCELLED" and set(states[:-1]) <= {"PENDING", "RUNNING"}, done.stdout
    assert len(issued.read_text().splitlines()) >= 3  # one per life of 10 s, each asked for before it ran out
    assert no_slurm.called() == []


def test_a_job_at_its_time_limit_saves_and_is_requeued_through_slurmrestd(
    tmp_path: Path, no_slurm: NoSlurmCommands
) -> None:
    """``restart:`` through slurmrestd: the checkpoint signal comes ``signal.before`` seconds ahead of the time limit
    (asked of Slurm on 25.11; on 22.05, whose API cannot ask for it, timed by the supervisor from the job's end),
    the command saves, and the job is requeued and completes."""
    env = no_slurm.env(new_token(), TI_SLURM_CONFIG=rest_site(tmp_path))
    first = 'trap "echo saved at \\$(date +%s); exit 0" USR2; echo started at $(date +%s); sleep 200 & wait'
    cmd = f'if [ "$TI_SLURM_RESTART_COUNT" = 0 ]; then {first}; else echo resumed; fi'
    body = f"mode: ddp\nnodes: 1\ntime: '1'\nsignal: {{before: 45}}\nrestart: {{max: 1}}\ncommand: '{cmd}'"
    job = Job(tmp_path, body, env=env)
    assert job.result.returncode == 0, job.result.stderr + job.explain()
    status = job.status()
    assert [(a["state"], a["requeued"]) for a in status["attempts"]] == [("TIMEOUT", True), ("COMPLETED", False)]
    first_log = (job.job_dir / "attempts" / "0" / "logs" / "ddp-0.log").read_text()
    saved = int(re.findall(r"saved at (\d+)", first_log)[0])
    # timed from the allocation's own start (the batch script ran; its limit is 60 s from there), not from the
    # command's start, which comes late on a loaded machine
    began = status["attempts"][0]["timeline"].get("batch") or status["attempts"][0]["started"]
    # due 60 - 45 s in; slurmctld looks for signals due every 30 s (its periodic time-limit pass), so it comes
    # 15 to 45 s in: never Slurm's kill at the limit (60 s), which no trap would have answered with "saved"
    assert 0 <= saved - began <= 50, (first_log, status["attempts"][0])
    assert job.logs() == "resumed\n"
    assert no_slurm.called() == []


def test_a_job_from_a_host_without_slurm_finds_slurms_commands_on_its_nodes(tmp_path: Path) -> None:
    """The case REST is for: the client has no Slurm command at all (its PATH: a shell's tools and Python), and
    the job runs with that PATH; its supervisor finds ``srun`` on the node (the site config's slurm_bin_dir)
    and the job completes, where it failed with ``FileNotFoundError: ... 'srun'``."""
    import sys

    tools = tmp_path / "client-tools"
    tools.mkdir()
    for name in ("sh", "bash", "mkdir", "stat", "grep", "mv", "cat", "date", "id", "env", "dirname", "hostname"):
        real = shutil.which(name)
        assert real, name
        (tools / name).symlink_to(real)
    path = f"{tools}:{Path(sys.executable).parent}"
    assert shutil.which("srun", path=path) is None and shutil.which("sbatch", path=path) is None
    env = {"PATH": path, "SLURM_JWT": new_token(), "TI_SLURM_CONFIG": rest_site(tmp_path)}
    job = Job(tmp_path, "mode: ddp\nnodes: 2\ncommand: 'echo ran on $(hostname)'", env=env)
    assert job.result.returncode == 0, job.result.stderr + job.explain()
    assert job.status()["state"] == "COMPLETED", job.explain()
    assert job.logs().count("ran on") == 2


def test_every_backend_answers_the_clusters_questions_alike(tmp_path: Path) -> None:
    """``clusters`` and ``--cluster auto`` ask backends, never past them: the Slurm commands, pyslurm (where it
    fits this Slurm) and slurmrestd name the same idle nodes per partition, and each says when a job that fits
    would start (slurmrestd, which has no test-only submit: now, or not known)."""
    from ti_slurm.backends.pyslurm import PyslurmBackend, pyslurm_mismatch
    from ti_slurm.backends.rest import RestBackend
    from ti_slurm.backends.slurm import SlurmBackend
    from ti_slurm.submitting.planning import plan_job
    from ti_slurm.submitting.script import render
    from ti_slurm.submitting.spec import parse_spec

    rest = RestBackend(rest_url(), "env")
    # the token for slurmrestd alone: in this process's environment, libslurm (pyslurm, loaded here) would take
    # it for its own authentication and keep it past its expiry for every later pyslurm test of this worker
    rest.client.tokens.environ = {"SLURM_JWT": new_token()}
    backends = {"slurm": SlurmBackend(), "rest": rest}
    if not pyslurm_mismatch():
        backends["pyslurm"] = PyslurmBackend()
    assert all(b.knows_free_nodes for b in backends.values())
    for _ in range(10):  # other tests' jobs come and go between the questions: ask until one moment agrees
        idle = {name: b.idle_nodes() for name, b in backends.items()}
        if len({tuple(sorted(answer.items())) for answer in idle.values()}) == 1:
            break
        time.sleep(1)
    assert len({tuple(sorted(answer.items())) for answer in idle.values()}) == 1, idle
    assert "debug" in idle["slurm"] and all(n >= 0 for n in idle["slurm"].values())
    spec = parse_spec({"mode": "ddp", "nodes": 1, "command": "true", "partition": "debug",
                       "output_dir": str(tmp_path)})  # fmt: skip
    plan = plan_job(spec)
    said = {name: b.start_estimate(plan, render(plan)) for name, b in backends.items()}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", said["slurm"].start), said
    assert said["rest"].start in ("now", "") and said["rest"].why == "", said
    if "pyslurm" in said:
        assert said["pyslurm"].start, said
