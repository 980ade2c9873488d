"""Local backend: the whole job as processes on this machine (no Slurm needed).

Every simulated node is a process with the same contract a Slurm step gets
(``MASTER_ADDR=127.0.0.1``, a port per node), supervised by the same
supervisor and success rule, with one log per node in ``<job dir>/logs``.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from ti_slurm.backends.base import (
    JobInfo,
    StartEstimate,
    SubmitsInOneStep,
    make_output_dir,
)
from ti_slurm.core.errors import BackendError, ConfigError, SpecError, SubmissionError
from ti_slurm.core.files import write_atomic
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.job.contract import job_ports
from ti_slurm.job.modes import get_mode
from ti_slurm.job.net import port_is_free
from ti_slurm.job.process import alive, start_group, start_time
from ti_slurm.transports import LocalFiles


def local_job_number(plan: JobPlan, output_dir: str, start: int, tries: int = 64) -> int:
    """The first job number from ``start`` whose local ports are free and whose job dir this call made.

    Every simulated node listens on this one machine, where other programs
    (and other users' jobs) hold ports too; the contract derives the ports from
    the job number, so pick a number whose ports nobody holds.
    """
    nodes = tuple(("localhost",) * comp.nodes for comp in plan.components)
    width = get_mode(plan.mode).ports_per_node
    for number in range(start, start + tries):
        ports = [port for component in job_ports(plan, number, nodes, per_node=True) for port in component]
        if not all(port_is_free(port + k) for port in ports for k in range(width)):
            continue
        try:  # claimed atomically: two submits in the same millisecond get different numbers
            os.mkdir(JobPaths.of(output_dir, f"local-{number}").root, 0o700)
        except FileExistsError:
            continue
        except OSError as exc:  # /proc/self, /sys/kernel, another user's 0755 directory
            raise SpecError("output_dir", output_dir, f"cannot hold a job directory: {exc.strerror}") from None
        return number
    lo, hi = plan.port_range
    raise SubmissionError(f"port_min..port_max {lo}-{hi}: no free ports for a local job after {tries} tries")


NO_MSRUN = (
    "msrun under --local: every simulated node is this machine, and each node's msrun would start its own"
    " scheduler on the one port; leave msrun out under --local (mode: mindspore runs the scheduler), or"
    " submit without --local"
)
NO_PIPELINES = (
    "the local runner starts every job at once: pipelines (after:, --after) need Slurm; submit without --local"
)


class LocalBackend(SubmitsInOneStep, LocalFiles):
    """Runs jobs as local processes."""

    name = "local"
    queues_jobs = job_arrays = finds_jobs_by_id = False  # every job starts at once, as processes here
    knows_free_nodes = False  # no partitions: a job always starts now

    def batch_log(self, paths: JobPaths) -> str:
        return paths.supervisor_log  # the supervisor runs in place of the batch script

    def submit(self, plan: JobPlan, script: str, check_fit: bool = True) -> JobInfo:
        if plan.dependency:  # said, not ignored: the job would start before the jobs it waits for end
            raise ConfigError("after", plan.dependency, NO_PIPELINES)
        from ti_slurm.job.preflight import runs

        if plan.mode == "mindspore" and any(runs(plan.command_of(k), "msrun") for k in range(len(plan.components))):
            raise ConfigError("command", plan.command, NO_MSRUN)
        make_output_dir(plan.output_dir)
        number = local_job_number(plan, plan.output_dir, int(time.time() * 1000) % 1_000_000_000)
        job_id = f"local-{number}"
        paths = JobPaths.of(plan.output_dir, job_id)
        try:
            write_atomic(paths.plan, plan.to_json() + "\n")
        except OSError as exc:  # a full disk: nothing is left of the job
            import shutil

            shutil.rmtree(paths.root, ignore_errors=True)
            raise SpecError("output_dir", plan.output_dir, f"cannot write the job's plan: {exc.strerror}") from None
        with open(paths.supervisor_log, "wb") as log:
            argv = [sys.executable, "-m", "ti_slurm.job", "local-run", paths.root, str(number)]
            proc = start_group(argv, cwd=plan.workdir or None, output=log)
        write_atomic(paths.supervisor_pid, f"{proc.pid} {start_time(proc.pid)}\n")
        return JobInfo(job_id, plan.name, self.name, paths.root, JobState.RUNNING, submission=plan.submission)

    def _pid(self, job_dir: str) -> int | None:
        """The pid of the job's supervisor while that same process runs (a pid alone may be reused)."""
        try:
            with open(JobPaths(job_dir).supervisor_pid) as fh:
                pid_text, started = fh.read().split()
            pid = int(pid_text)
        except (OSError, ValueError):
            return None
        return pid if start_time(pid) == started and alive(pid) else None

    def queue_states(self, jobs: list[JobInfo]) -> dict[str, JobInfo]:
        out = {}
        for job in jobs:
            if job.job_dir and self._pid(job.job_dir) is not None:
                out[job.job_id] = JobInfo(
                    job.job_id, job.name, self.name, job.job_dir, JobState.RUNNING, nodes="localhost"
                )
        return out

    def cancel(self, job: JobInfo) -> None:
        pid = self._pid(job.job_dir)
        if pid is None:  # its directory was removed, or its pid file damaged: say so, never "requested"
            raise BackendError(
                f"job {job.job_id}: its supervisor cannot be reached (no live process in "
                f"{JobPaths(job.job_dir).supervisor_pid}); if it still runs, stop it by hand"
            )
        os.kill(pid, signal.SIGTERM)

    def find_job_dir(self, job_id: str) -> str | None:
        return None  # a local job is known only from this account's registry

    def idle_nodes(self) -> dict[str, int]:
        return {}  # knows_free_nodes is False: no partitions here

    def partition_sizes(self) -> dict[str, int]:
        return {}

    def start_estimate(self, plan: JobPlan, script: str) -> StartEstimate:
        return StartEstimate("now")  # every local job starts at once
