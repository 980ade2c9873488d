"""``ti-slurm``: a thin command line over the library.

Bad input prints one line (``ti-slurm: error: <field>: <value>: <why>``) and
exits 2; a failed job exits 1. Heavy modules (pydantic, jinja2) are imported
only by the commands that need them, so ``ti-slurm exec``/``env`` stay light
inside jobs. Each node's step of a ti-slurm job does not come through here at
all: it runs :mod:`ti_slurm.jobpath` on the bare interpreter.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ti_slurm import __version__
from ti_slurm.errors import TiSlurmError

if TYPE_CHECKING:
    from ti_slurm.backends.base import Backend, JobInfo
    from ti_slurm.backends.ssh import SSHBackend
    from ti_slurm.plan import JobPlan
    from ti_slurm.status import JobStatus

MODES = ("ddp", "mpi", "horovod", "ps-worker", "ray")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ti-slurm", description="Run TI-platform / ModelArts distributed training jobs on Slurm.")
    p.add_argument("--version", action="version", version=f"ti-slurm {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", parser_class=_Parser)

    r = sub.add_parser("render", help="print the sbatch script for a spec")
    r.add_argument("spec", help="job spec (YAML or JSON)")
    r.add_argument("--python", help="Python the job runs ti-slurm with (default: this one)")

    remote = _Parser(add_help=False)
    remote.add_argument(
        "--host", help="run on this login node over SSH: host, user@host[:port] or an ~/.ssh/config alias"
    )
    remote.add_argument("--accept-new-host-key", action="store_true", help="record the key of a host never seen before")
    remote.add_argument("--ssh-config", help="SSH config file (default ~/.ssh/config)")

    s = sub.add_parser("submit", help="submit a job (prints its id)", parents=[remote])
    s.add_argument("spec", help="job spec (YAML or JSON)")
    s.add_argument("--local", action="store_true", help="run every node as a process on this machine (no Slurm)")
    s.add_argument("--wait", action="store_true", help="show progress; exit 0 only if the job succeeds")
    s.add_argument("--sync", metavar="DIR", help="with --host: first upload DIR's changed files to the remote workdir")

    st = sub.add_parser("status", help="state of a job, its components and steps", parents=[remote])
    st.add_argument("job")
    st.add_argument("--json", action="store_true", help="machine-readable output")

    lg = sub.add_parser("logs", help="print a job's logs", parents=[remote])
    lg.add_argument("job")
    lg.add_argument("--node", help="one node: its INDEX, its name, or <component>-<n>")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")

    c = sub.add_parser("cancel", help="cancel a job", parents=[remote])
    c.add_argument("job")

    sub.add_parser("list", help="your jobs and their states", parents=[remote])
    sub.add_parser("doctor", help="check this node: Slurm, het jobs, partitions, gres, munge, MPI, RDMA")

    for name, helptext in (
        ("env", "print this node's contract variables (inside a job)"),
        ("exec", "run a command with this node's contract (srun ti-slurm exec --mode M -- CMD)"),
    ):
        e = sub.add_parser(name, help=helptext)
        e.add_argument("--mode", required=True, choices=MODES)
        e.add_argument("--gpus-per-node", type=int, default=None, help="default: Slurm's SLURM_GPUS_ON_NODE, else 0")
        e.add_argument("--master-port", type=int, default=None)
        e.add_argument("--rdma", choices=("auto", "on", "off"), default="auto")
        e.add_argument("--group", type=int, default=None, help="component index in a heterogeneous job")
        e.add_argument("--rendezvous-timeout", type=int, default=300)
        if name == "env":
            e.add_argument("--format", choices=("shell", "json"), default="shell")
        else:
            e.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")

    for name in ("supervise", "local-run"):  # used inside jobs (each node's step: ti_slurm.jobpath)
        i = sub.add_parser(name)
        i.add_argument("--plan", required=True)
        i.add_argument("--job-dir", required=True)
        i.add_argument("--job-id", type=int, default=0)
    return p


# -- spec -> plan --------------------------------------------------------------
def plan_from_spec(path: str, python: str | None = None, submission: str = "", remote: bool = False) -> JobPlan:
    """Load, validate and plan a spec.

    Here, relative paths are taken from the current directory. For a remote
    submission they stay relative to the remote workdir (``remote.workdir``, else
    the login's home directory), and the job's Python is the remote ``python3``.
    """
    from ti_slurm.contract import MAX_ENV_STRING, worst_case_sizes
    from ti_slurm.errors import SpecError
    from ti_slurm.plan import make_plan
    from ti_slurm.site import SiteConfig, load_site_config
    from ti_slurm.spec import load_spec

    spec = load_spec(path)
    if remote:
        base = spec.remote.workdir if spec.remote and spec.remote.workdir else None
        updates = {
            "output_dir": os.path.join(base, spec.output_dir) if base else spec.output_dir,
            "workdir": spec.workdir or base,
        }
        python = spec.python or "python3"
        site = SiteConfig()  # the cluster's own site config applies on the cluster side
    else:
        updates = {
            "output_dir": os.path.abspath(spec.output_dir),
            "workdir": os.path.abspath(spec.workdir or os.getcwd()),
        }
        site = load_site_config()
    spec = spec.model_copy(update=updates)
    plan = make_plan(spec, site, python=python, submission=submission)
    for name, size in worst_case_sizes(plan).items():
        if size > MAX_ENV_STRING:
            raise SpecError(
                "nodes",
                plan.total_nodes,
                f"{name} could reach {size} bytes, over Linux's {MAX_ENV_STRING}-byte "
                "limit for one environment variable (E2BIG at exec); split the job or use fewer tasks",
            )
    return plan


def cmd_render(args: argparse.Namespace) -> int:
    from ti_slurm.render import render

    sys.stdout.write(render(plan_from_spec(args.spec, args.python)))
    return 0


def remote_host(args: argparse.Namespace, spec_path: str | None = None) -> str:
    """``--host``, else the spec's ``remote.host``, else the user config's; empty for local commands."""
    if getattr(args, "host", None):
        return str(args.host)
    if spec_path:
        from ti_slurm.spec import load_spec

        spec = load_spec(spec_path)
        if spec.remote:
            return spec.remote.host
    return user_remote_host()


def user_remote_host() -> str:
    """``host`` under ``[remote]`` in ``$XDG_CONFIG_HOME/ti-slurm/config.toml`` (``~/.config/...``)."""
    import tomllib

    from ti_slurm.errors import SpecError

    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    path = os.path.join(base, "ti-slurm", "config.toml")
    if not os.path.exists(path):
        return ""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SpecError("user config", path, f"cannot read: {exc}") from None
    remote = data.get("remote", {})
    host = remote.get("host", "") if isinstance(remote, dict) else None
    if not isinstance(host, str) or set(data) - {"remote"} or set(remote) - {"host"}:
        raise SpecError("user config", path, 'expected only [remote] host = "login"')
    return host


def open_backend(name: str, args: argparse.Namespace, host: str = "") -> Backend:
    from ti_slurm.backends import get_backend

    return get_backend(
        name,
        host=host,
        accept_new_host_key=getattr(args, "accept_new_host_key", False),
        ssh_config=getattr(args, "ssh_config", None),
    )


def open_ssh_backend(args: argparse.Namespace, host: str) -> SSHBackend:
    from ti_slurm.backends.ssh import SSHBackend

    backend = open_backend("ssh", args, host)
    assert isinstance(backend, SSHBackend)
    return backend


def cmd_submit(args: argparse.Namespace) -> int:
    import uuid

    from ti_slurm.backends.base import remember
    from ti_slurm.render import render

    host = "" if args.local else remote_host(args, args.spec)
    submission = uuid.uuid4().hex[:16]
    remote: tuple[SSHBackend, Any] | None = None
    if host and not args.sync:
        # Connect and start the remote half of the submit first: it waits for its input
        # while the spec is validated and rendered here, so the remote login shell starts
        # meanwhile. If the spec is invalid, its input ends empty and nothing is submitted.
        ssh = open_ssh_backend(args, host)
        remote = ssh, ssh.start_submit(submission)
    try:
        plan = plan_from_spec(args.spec, submission=submission, remote=bool(host))
        script = render(plan)
    except BaseException:
        if remote is not None:
            remote[0].abandon_submit(remote[1])
        raise
    backend: Backend
    if remote is not None:
        backend, info = remote[0], remote[0].finish_submit(remote[1], plan, script)
    elif host:  # --sync: the files must be there before the job is
        from ti_slurm.backends.ssh import sync_tree

        backend = ssh = open_ssh_backend(args, host)
        sent = sync_tree(ssh.session, args.sync, plan.workdir or ".")
        print(f"ti-slurm: synced {sent} changed file(s) to {host}:{plan.workdir or '~'}", file=sys.stderr)
        info = backend.submit(plan, script)
    else:
        os.makedirs(plan.output_dir, exist_ok=True)
        backend = open_backend("local" if args.local else "slurm", args)
        info = backend.submit(plan, script)
    remember(info)
    print(info.job_id, flush=True)
    if not args.wait:
        return 0
    try:
        status = wait_for(backend, info)
    except KeyboardInterrupt:
        print(
            f"\nti-slurm: stopped following job {info.job_id}; it keeps running "
            f"(ti-slurm status {info.job_id}, ti-slurm cancel {info.job_id})",
            file=sys.stderr,
        )
        return 130
    return 0 if status.state == "COMPLETED" else 1


# -- watching jobs ---------------------------------------------------------
def find_job(job_id: str, args: argparse.Namespace) -> tuple[Backend, JobInfo]:
    """The job's record (from this account's registry) and the backend that reaches it."""
    from ti_slurm.backends.base import JobInfo, recall

    info = recall(job_id)
    host = getattr(args, "host", None) or (info.host if info else "")
    if info is None:
        if job_id.startswith("local-"):
            raise TiSlurmError(f"job {job_id}: unknown local job (not submitted from this account)")
        backend = open_backend("ssh" if host else "slurm", args, host)
        job_dir = backend.job_dir_of(job_id) if hasattr(backend, "job_dir_of") else None
        return backend, JobInfo(job_id, backend=backend.name, job_dir=job_dir or "", host=host)
    return open_backend("ssh" if host else info.backend, args, host), info


def current_status(backend: Backend, info: JobInfo) -> JobStatus:
    from ti_slurm.status import job_status, read_events

    queued = backend.queue_states([info]).get(info.job_id)
    events = read_events(backend, info)
    status = job_status(info, events, queued)
    if queued is None and not status.final and info.job_dir:
        time.sleep(1.0)  # the job just left the queue; its last line may still be landing
        status = job_status(info, read_events(backend, info), None)
    return status


def wait_for(backend: Backend, info: JobInfo) -> JobStatus:
    """Poll with backoff until the job ends; print each change on stderr."""
    delay, last = 0.2, ""
    while True:
        status = current_status(backend, info)
        line = f"{status.state}" + (f" ({status.reason})" if status.reason and not status.final else "")
        if status.state == "RUNNING" and status.components:
            line += " on " + "; ".join(f"{c.name}: {c.state.lower()}" for c in status.components)
        if line != last:
            print(f"ti-slurm: job {info.job_id}: {line}", file=sys.stderr, flush=True)
            last = line
        if status.final or (status.state in ("FAILED", "UNKNOWN") and not status.components):
            break
        time.sleep(delay)
        delay = min(delay * 1.5, 5.0)
    if status.state == "COMPLETED":
        print(f"ti-slurm: job {info.job_id} COMPLETED", file=sys.stderr)
    else:
        print(f"ti-slurm: job {info.job_id} {status.state}: {status.reason}", file=sys.stderr)
        print(failed_node_tail(backend, status), end="", file=sys.stderr)
    return status


def failed_node_tail(backend: Backend, status: JobStatus, lines: int = 20) -> str:
    """The last lines of the failed node's log, with the command that shows all of it ("" if none)."""
    from ti_slurm.status import node_label, node_log

    comp, index = status.failed.get("component"), status.failed.get("index")
    if comp is None or index is None or not status.job_dir:
        return ""
    label = node_label(comp, index)
    text = backend.read_text(node_log(status.job_dir, comp, index))
    if not text:
        return ""
    tail = text.splitlines()[-lines:]
    everything = f"ti-slurm logs {status.job_id} --node {label}"
    head = f"ti-slurm: last {len(tail)} lines of {label}.log (all of it: {everything}):\n"
    return head + "".join(f"  | {line}\n" for line in tail)


def cmd_status(args: argparse.Namespace) -> int:
    from ti_slurm.status import format_status

    backend, info = find_job(args.job, args)
    status = current_status(backend, info)
    if status.state == "UNKNOWN" and not status.components and not info.name:
        raise TiSlurmError(f"job {args.job}: not queued and no record of it here (unknown id, or not yours)")
    print(status.to_json() if args.json else format_status(status))
    return 0


def log_files(status: JobStatus, node: str | None) -> list[tuple[str, str]]:
    """(label, path) of the logs to show; ``node`` picks one by INDEX, name or <component>-<n>."""
    from ti_slurm.status import node_label, node_log

    files: list[tuple[str, str]] = []
    index = 0
    for comp in status.components:
        for n, name in enumerate(comp.nodes):
            label = node_label(comp.name, n)
            if node is None or node in (label, name, str(index)):
                files.append((f"{label} ({name})", node_log(status.job_dir, comp.name, n)))
            index += 1
    if node is not None and not files:
        raise TiSlurmError(
            f"--node {node}: no such node in job {status.job_id} (use an INDEX, a node name or <component>-<n>)"
        )
    return files


def cmd_logs(args: argparse.Namespace) -> int:
    backend, info = find_job(args.job, args)
    offsets: dict[str, int] = {}
    while True:
        status = current_status(backend, info)
        for label, path in log_files(status, args.node):
            text = backend.read_text(path)
            if text is None:
                continue
            seen = offsets.get(path, 0)
            if len(text) > seen:
                if not args.node:
                    print(f"==> {label} <==")
                sys.stdout.write(text[seen:])
                sys.stdout.flush()
                offsets[path] = len(text)
        if not args.follow or status.final or (status.state == "FAILED" and not status.components):
            return 0
        time.sleep(1.0)


def cmd_cancel(args: argparse.Namespace) -> int:
    backend, info = find_job(args.job, args)
    backend.cancel(info)
    print(f"ti-slurm: cancel requested for job {info.job_id}", file=sys.stderr)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from ti_slurm.backends.base import recall_all
    from ti_slurm.status import job_status, read_events

    jobs = recall_all()
    if getattr(args, "host", None):
        jobs = [j for j in jobs if j.host == args.host]
    queued: dict[str, JobInfo] = {}
    backends: dict[tuple[str, str], Backend] = {}
    for key in sorted({(j.backend, j.host) for j in jobs}):  # one queue query per backend and host
        backends[key] = open_backend(key[0], args, key[1])
        queued.update(backends[key].queue_states([j for j in jobs if (j.backend, j.host) == key]))
    print(f"{'JOB':<18} {'NAME':<20} {'STATE':<10} REASON")
    for job in jobs:
        backend = backends[(job.backend, job.host)]
        st = job_status(job, read_events(backend, job), queued.get(job.job_id))
        print(f"{job.job_id:<18} {job.name:<20} {st.state:<10} {st.reason}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from ti_slurm.doctor import doctor

    return doctor()


# -- inside jobs ---------------------------------------------------------------
def _adhoc(args: argparse.Namespace) -> tuple[JobPlan, dict[str, str], int, str]:
    from ti_slurm.step import adhoc_job_dir, adhoc_plan

    env = dict(os.environ)
    plan, group = adhoc_plan(
        args.mode, env, args.gpus_per_node, args.master_port, args.rdma, args.group, args.rendezvous_timeout
    )
    return plan, env, group, adhoc_job_dir(env)


def cmd_env(args: argparse.Namespace) -> int:
    import json

    from ti_slurm.jobpath import env_changes, print_env
    from ti_slurm.step import prepare_step

    plan, env, group, job_dir = _adhoc(args)
    _, full = prepare_step(plan, group, job_dir, env)
    if args.format == "json":
        print(json.dumps(env_changes(full, env), indent=2, sort_keys=True))
    else:
        print_env(full, env)
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    import shlex

    from ti_slurm.step import run_step

    words = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not words:
        raise TiSlurmError("exec: no command given (ti-slurm exec --mode M -- CMD ...)")
    plan, env, group, job_dir = _adhoc(args)
    plan = plan.replace(command=" ".join(shlex.quote(w) for w in words), workdir=os.getcwd())
    return run_step(plan, group, job_dir, env)


def cmd_internal(args: argparse.Namespace) -> int:
    if args.cmd == "supervise":
        from ti_slurm.supervisor import supervise

        return supervise(args.plan, args.job_dir)
    from ti_slurm.backends.local import local_run

    return local_run(args.plan, args.job_dir, args.job_id)


COMMANDS = {
    "render": cmd_render,
    "submit": cmd_submit,
    "status": cmd_status,
    "logs": cmd_logs,
    "cancel": cmd_cancel,
    "list": cmd_list,
    "doctor": cmd_doctor,
    "env": cmd_env,
    "exec": cmd_exec,
    "supervise": cmd_internal,
    "local-run": cmd_internal,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.cmd](args)
    except TiSlurmError as exc:
        print(f"ti-slurm: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def entry() -> NoReturn:
    """The ``ti-slurm`` command: :func:`main`, then exit without tearing the interpreter down.

    Finalizing an interpreter that has pydantic, jinja2 or paramiko loaded takes
    60-90 ms (module teardown, garbage collection) and does nothing a finished
    command needs: its files are closed by then. So flush the standard streams
    and leave.
    """
    from contextlib import suppress

    code = main()
    for stream in (sys.stdout, sys.stderr):
        with suppress(BrokenPipeError, ValueError):  # a reader that went away (| head), a closed stream
            stream.flush()
    os._exit(code)
