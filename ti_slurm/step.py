"""The per-node step wrapper: contract env + hostfile, then the user's command.

Runs once per node in every job step (through :mod:`ti_slurm.jobpath`), so
it imports only the standard library and the light contract modules, and
those that only running the command needs (``subprocess``, ``signal``,
``socket``) only when it gets there.

It computes this node's contract, writes the hostfile and launch agent the
mode needs, waits for the master where the platform does (DDP workers wait
for ``MASTER_ADDR:MASTER_PORT``, bounded by the rendezvous timeout), runs the
command with ``bash -c`` in its own process group, forwards SIGTERM/SIGINT to
that group, and records the exit code in ``<job dir>/nodes/``.
"""

from __future__ import annotations

import os
import sys
import time

from ti_slurm.contract import NodeContract, apply, node_contract
from ti_slurm.plan import JobPlan

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping
    from types import FrameType

RENDEZVOUS_EXIT = 124  # like timeout(1)


def write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename (safe when nodes race)."""
    tmp = f"{path}.tmp.{os.getpid()}.{os.uname().nodename}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def prepare_files(plan: JobPlan, contract: NodeContract, job_dir: str) -> None:
    """Write the hostfile and the launch agent (as ``bin/ssh``) that this node's mode needs."""
    if contract.hostfile is None:
        return
    from ti_slurm import jobpath
    from ti_slurm.modes import mpi

    write_atomic(mpi.hostfile_path(job_dir), contract.hostfile)
    bindir = mpi.agent_dir(job_dir)
    os.makedirs(bindir, exist_ok=True)
    argv = " ".join(jobpath.shell_quote(word) for word in jobpath.command(plan.python, "agent"))
    agent = f'#!/bin/sh\nexec {argv} "$@"\n'
    write_atomic(os.path.join(bindir, "ssh"), agent, 0o755)
    write_atomic(os.path.join(bindir, "ti-slurm-ssh"), agent, 0o755)


def wait_for_master(addr: str, port: int, timeout: float) -> bool:
    """Poll until ``addr:port`` accepts a TCP connection, or the timeout passes."""
    import socket

    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            with socket.create_connection((addr, port), timeout=min(2.0, timeout)):
                return True
        except OSError:
            if time.monotonic() + delay > deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def record_exit(job_dir: str, plan: JobPlan, group: int, index: int, node: str, code: int, started: float) -> None:
    """Write ``nodes/<component>.<index>.json`` for the supervisor and ``ti-slurm status``."""
    from ti_slurm import lightjson

    folder = os.path.join(job_dir, "nodes")
    os.makedirs(folder, exist_ok=True)
    comp = plan.components[group].name
    record = {
        "component": comp,
        "index": index,
        "node": node,
        "exit_code": code,
        "started": started,
        "ended": time.time(),
    }
    write_atomic(os.path.join(folder, f"{comp}.{index}.json"), lightjson.dumps(record) + "\n")


def run_command(command: str, env: Mapping[str, str], workdir: str | None, grace: float) -> int:
    """Run ``bash -c command`` in its own process group and return its status.

    SIGTERM/SIGINT/SIGHUP are forwarded to the whole group; whatever is left
    ``grace`` seconds later, or once the command has exited, is killed.
    """
    import signal
    import subprocess
    from contextlib import suppress

    proc = subprocess.Popen(["/bin/bash", "-c", command], env=dict(env), cwd=workdir or None, start_new_session=True)
    kill_at: float | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal kill_at
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signum)
        if kill_at is None:
            kill_at = time.monotonic() + grace

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    try:
        while True:
            try:
                code = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if kill_at is not None and time.monotonic() > kill_at:
                    with suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # nothing of the command outlives it
    return 128 - code if code < 0 else code


def terminate(proc: subprocess.Popen[bytes], grace: float, *, group: bool) -> None:
    """SIGTERM a process (or its process group), SIGKILL after ``grace`` seconds, reap it."""
    import signal
    from contextlib import suppress

    def send(signum: int) -> None:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signum) if group else proc.send_signal(signum)

    send(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if group or proc.poll() is None:
        send(signal.SIGKILL)
    proc.wait()


def prepare_step(
    plan: JobPlan, group: int, job_dir: str, environ: Mapping[str, str]
) -> tuple[NodeContract, dict[str, str]]:
    """This node's contract, its files written, and the command's full environment."""
    os.makedirs(job_dir, exist_ok=True)
    contract = node_contract(plan, environ, group, job_dir)
    prepare_files(plan, contract, job_dir)
    return contract, apply(contract, environ, plan.env)


def run_step(plan: JobPlan, group: int, job_dir: str, environ: Mapping[str, str] | None = None) -> int:
    """Serve this node's share of the job; return the exit code to report."""
    environ = os.environ if environ is None else environ
    started = time.time()
    contract, env = prepare_step(plan, group, job_dir, environ)

    def record(code: int) -> None:
        record_exit(job_dir, plan, group, contract.index, contract.node, code, started)

    if plan.mode == "ray":
        from ti_slurm.modes.ray import run_ray_node

        return run_ray_node(plan, contract, env, record)
    if not contract.runs_command:
        # Horovod workers in a hand-written script: stay allocated until stopped.
        import signal

        signal.sigwait({signal.SIGTERM, signal.SIGINT})
        return 0
    if plan.mode == "ddp" and contract.role != "master":
        addr, port, timeout = env["MASTER_ADDR"], int(env["MASTER_PORT"]), plan.rendezvous_timeout
        if not wait_for_master(addr, port, timeout):
            print(
                f"ti-slurm: rendezvous timeout: master {addr}:{port} did not come up within {timeout}s", file=sys.stderr
            )
            record(RENDEZVOUS_EXIT)
            return RENDEZVOUS_EXIT
    code = run_command(plan.command_of(group), env, plan.workdir, plan.stop_grace)
    record(code)
    return code


# -- hand-written sbatch scripts: no spec, the plan comes from flags and Slurm ---
def adhoc_plan(
    mode: str,
    env: Mapping[str, str],
    gpus_per_node: int | None,
    master_port: int | None,
    rdma: str,
    group: int | None,
    rendezvous_timeout: int,
) -> tuple[JobPlan, int]:
    """A plan for ``ti-slurm exec``/``env`` from flags and this step's Slurm variables."""
    from ti_slurm.contract import ContractError
    from ti_slurm.hostlist import expand
    from ti_slurm.plan import Component, site_plan_fields
    from ti_slurm.site import load_site_config

    if gpus_per_node is None:
        on_node = env.get("SLURM_GPUS_ON_NODE", "0")
        gpus_per_node = int(on_node) if on_node.isdigit() else 0
    het = int(env.get("SLURM_HET_SIZE", "1") or "1")
    if het > 1:
        lists = [env.get(f"SLURM_JOB_NODELIST_HET_GROUP_{g}", "") for g in range(het)]
        counts = [len(expand(text)) for text in lists]
        if group is None:  # inside `srun --het-group=N`, SLURM_JOB_NODELIST is component N's list
            matches = [g for g, text in enumerate(lists) if text == env.get("SLURM_JOB_NODELIST")]
            if len(matches) != 1:
                raise ContractError("cannot tell this step's component: pass --group N")
            group = matches[0]
    else:
        nodelist = env.get("SLURM_JOB_NODELIST")
        if not nodelist:
            raise ContractError("SLURM_JOB_NODELIST is not set: run this inside a Slurm job (srun ti-slurm ...)")
        counts = [len(expand(nodelist))]
        group = group or 0
    if mode == "ps-worker":
        names = ["ps", "worker"]
    elif mode == "ray":
        names = ["head"] + [f"worker{i}" for i in range(1, len(counts))]
    else:
        names = [mode]
    if len(names) != len(counts):
        raise ContractError(f"mode {mode} needs {len(names)} component(s); this job has {len(counts)}")
    site = load_site_config()
    components = tuple(Component(n, c, gpus_per_node, 1) for n, c in zip(names, counts, strict=True))
    plan = JobPlan(
        name=env.get("SLURM_JOB_NAME", "ti-slurm"),
        mode=mode,
        command="",
        components=components,
        rdma=rdma,
        master_port=master_port,
        **site_plan_fields(site),
        rendezvous_timeout=rendezvous_timeout,
        python=site.python or sys.executable,
    )
    return plan, group


def adhoc_job_dir(env: Mapping[str, str]) -> str:
    """Where ``ti-slurm exec``/``env`` put the job's files.

    ``TI_SLURM_JOB_DIR`` if set; else the directory the site's Prolog made
    (``<job_dir_base>/<job id>``, when it exists and is this user's); else a
    private per-user, per-job directory under ``$TMPDIR``.
    """
    if env.get("TI_SLURM_JOB_DIR"):
        return env["TI_SLURM_JOB_DIR"]
    import stat
    import tempfile
    from contextlib import suppress

    from ti_slurm.contract import ContractError
    from ti_slurm.site import load_site_config

    prolog_dir = os.path.join(load_site_config().job_dir_base, env.get("SLURM_JOB_ID", "0"))
    try:
        info = os.lstat(prolog_dir)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
            return prolog_dir
    except OSError:
        pass

    base = os.path.join(env.get("TMPDIR") or tempfile.gettempdir(), f"ti-slurm-{os.getuid()}")
    with suppress(FileExistsError):
        os.mkdir(base, 0o700)
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ContractError(f"{base} is not a private directory of this user; refusing to write job files there")
    job_dir = os.path.join(base, env.get("SLURM_JOB_ID", "0"))
    os.makedirs(job_dir, mode=0o700, exist_ok=True)
    return job_dir
