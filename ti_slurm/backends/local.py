"""Local backend: the whole job as processes on this machine (no Slurm needed).

Every simulated node is a process with the same contract a Slurm step gets
(``MASTER_ADDR=127.0.0.1``, a port per node), supervised by the same
supervisor and success rule, with one log per node in ``<job dir>/logs``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from ti_slurm.backends.base import JobInfo, read_local_text
from ti_slurm.errors import TiSlurmError
from ti_slurm.plan import JobPlan
from ti_slurm.step import write_atomic


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as gone
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def port_is_free(port: int) -> bool:
    """Whether a server could listen on ``port`` on every address right now (IPv4 and, where there is one, IPv6).

    Servers such as torch's TCPStore bind the wildcard address, which fails when
    anything holds the port on any address.
    """
    import socket

    try:
        sock = socket.socket(socket.AF_INET6)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # one bind covers IPv4 too
        address: tuple[str, int] = ("::", port)
    except OSError:  # no IPv6 on this machine
        sock, address = socket.socket(), ("0.0.0.0", port)
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError:
            return False
    return True


def local_job_number(plan: JobPlan, output_dir: str, start: int, tries: int = 64) -> int:
    """The first job number from ``start`` whose job dir is new and whose local ports are free.

    Every simulated node listens on this one machine, where other programs
    (and other users' jobs) hold ports too; the contract derives the ports from
    the job number, so pick a number whose ports nobody holds.
    """
    from ti_slurm.contract import job_ports
    from ti_slurm.modes import MODES

    groups = tuple(("localhost",) * comp.nodes for comp in plan.components)
    width = MODES[plan.mode].PORTS_PER_NODE
    for number in range(start, start + tries):
        if os.path.exists(os.path.join(output_dir, f"local-{number}")):
            continue
        nodes = [port for group in job_ports(plan, number, groups, per_node=True) for port in group]
        if all(port_is_free(port + k) for port in nodes for k in range(width)):
            return number
    lo, hi = plan.port_range
    raise TiSlurmError(f"port_min..port_max {lo}-{hi}: no free ports for a local job after {tries} tries")


class LocalBackend:
    """Runs jobs as local processes."""

    name = "local"

    def submit(self, plan: JobPlan, script: str) -> JobInfo:
        number = local_job_number(plan, plan.output_dir, int(time.time() * 1000) % 1_000_000_000)
        job_id = f"local-{number}"
        job_dir = os.path.join(plan.output_dir, job_id)
        os.makedirs(job_dir)
        plan_path = os.path.join(job_dir, "plan.json")
        write_atomic(plan_path, plan.to_json() + "\n")
        with open(os.path.join(job_dir, "supervisor.log"), "wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ti_slurm",
                    "local-run",
                    "--plan",
                    plan_path,
                    "--job-dir",
                    job_dir,
                    "--job-id",
                    str(number),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=plan.workdir or None,
                start_new_session=True,
            )
        write_atomic(os.path.join(job_dir, "supervisor.pid"), f"{proc.pid}\n")
        return JobInfo(job_id, plan.name, self.name, job_dir, "RUNNING", submission=plan.submission)

    def _pid(self, job_dir: str) -> int | None:
        try:
            with open(os.path.join(job_dir, "supervisor.pid")) as fh:
                return int(fh.read().strip())
        except (OSError, ValueError):
            return None

    def queue_states(self, jobs: list[JobInfo]) -> dict[str, JobInfo]:
        out = {}
        for job in jobs:
            pid = self._pid(job.job_dir) if job.job_dir else None
            if pid is not None and _alive(pid):
                out[job.job_id] = JobInfo(job.job_id, job.name, self.name, job.job_dir, "RUNNING", nodes="localhost")
        return out

    def cancel(self, job: JobInfo) -> None:
        pid = self._pid(job.job_dir)
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGTERM)

    def read_text(self, path: str) -> str | None:
        return read_local_text(path)


def local_run(plan_path: str, job_dir: str, job_id: int) -> int:
    """The detached supervisor process of a local job."""
    from ti_slurm.supervisor import LocalLauncher, Supervisor

    with open(plan_path, encoding="utf-8") as fh:
        plan = JobPlan.from_json(fh.read())
    launcher = LocalLauncher(plan, plan_path, job_dir, job_id)
    return Supervisor(plan, job_dir, launcher).run().exit_code
