"""The launchers: what starts the processes that serve a component's nodes, and stops them.

- :class:`SlurmLauncher` (inside the batch script) starts one background
  ``srun [--het-group=<n>]`` per component (a Slurm job step), which runs
  each node's step (:mod:`ti_slurm.job.main`) on every node of that component;
- :class:`LocalLauncher` (``submit --local``) starts one process per simulated
  node on this machine, with the same Slurm variables a step would see.

Each :class:`Launch` is one process the supervisor started and watches: an
``srun`` serving all of a component's nodes, or one local node.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ti_slurm.core.environ import SUPERVISOR_TIMES_SIGNAL
from ti_slurm.core.files import make_inside, write_atomic
from ti_slurm.core.hostlist import compress, expand
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.plan import JobPlan
from ti_slurm.job import main_command
from ti_slurm.job.process import descendants, parent_of, signal_pid, start_group, stop_trees, terminate
from ti_slurm.job.restart import SlurmControl
from ti_slurm.slurm.text import launch_failure

POLL_SECONDS = 0.1
SAID_LINES = 40  # srun's last lines of stderr kept per launch
RELAY_SETTLE = 2.0  # seconds an ended srun's stderr has to be read to its end
STOP_MARGIN = 5.0  # seconds beyond the spec's stop grace a stopped step has to end before srun is killed


@dataclass
class Launch:
    """One process the supervisor started: it serves some nodes of one component."""

    component_index: int
    component: str
    nodes: list[int]
    proc: subprocess.Popen[bytes]
    exit_code: int | None = None
    stopping: bool = False
    # node -> Slurm's words, for each node Slurm could not start this step on (srun's stderr, read as it comes)
    unlaunched: dict[str, str] = field(default_factory=dict)
    relay: threading.Thread | None = None  # the thread copying srun's stderr on, reading it for the above
    said: list[str] = field(default_factory=list)  # srun's last lines (Slurm's own word of an OOM kill: blame.py)

    def launch_failures(self) -> dict[str, str]:
        """The nodes Slurm could not start this step on, once srun has said all it has to say."""
        if self.relay is not None and self.proc.poll() is not None:
            self.relay.join(timeout=RELAY_SETTLE)
        return self.unlaunched


class Launcher(Protocol):
    """Starts the processes that serve a component's nodes (and names the nodes)."""

    # On cancel, write the job's final record before stopping its steps? Slurm
    # kills the batch script KillWait seconds after scancel, so there the record
    # goes first; locally nothing kills the supervisor, so CANCELLED means gone.
    record_before_stop_on_cancel: bool
    # Are node names resolved to addresses (Slurm), or is every node this machine (the local runner)?
    resolves_names: bool
    # How often Slurm requeued the job (its restart count), and Slurm's commands to requeue it (None: cannot).
    restart_count: int
    control: SlurmControl | None
    # Was Slurm not asked for the checkpoint signal (22.05's slurmrestd), so that the supervisor times it itself?
    times_signal: bool
    # Which attempt the launches are (the supervisor's count: requeues and restarts in place), which each
    # node's step sees as TI_SLURM_ATTEMPT (its TI_SLURM_RESTART_COUNT) and which marks its stop and signal files.
    attempt: int

    def node_names(self, component: int) -> list[str]:
        """The nodes Slurm allocated to the component (its spares too)."""

    def assign(self, nodes: list[list[str]]) -> None:
        """The nodes each component's commands run on from the next start, in rank order (a spare may have
        taken a lost node's place): each node's step finds its own place among them."""

    def start(self, plan: JobPlan, component: int, nodes: list[int]) -> list[Launch]: ...

    def stop(self, launch: Launch, grace: float, ended: Callable[[], bool] | None = None) -> None:
        """Stop ``launch`` within ``grace`` (and a margin); ``ended``: whether the nodes it still waits for
        (not the lost ones) are done, so that it need not wait out a lost node."""

    def stop_leftovers(self, grace: float) -> None:
        """Stop what stopped or dead node steps left behind, where this launcher can (after every stop)."""

    def pass_signal(self, launch: Launch, signum: int) -> None:
        """Deliver ``signum`` to every node ``launch`` serves (each node's step passes it to its command)."""


def node_command(plan: JobPlan, component: int, job_dir: str) -> list[str]:
    """Each node's step: ``job/main.py node`` on the bare interpreter."""
    return main_command(plan.python, "node", JobPaths(job_dir).plan, str(component), job_dir)


class SlurmLauncher:
    """Inside the batch script: one ``srun`` per component."""

    record_before_stop_on_cancel = True
    resolves_names = True

    def __init__(self, job_dir: str, environ: dict[str, str] | None = None) -> None:
        self.job_dir = job_dir
        self.environ = dict(os.environ if environ is None else environ)
        self.times_signal = self.environ.pop(SUPERVISOR_TIMES_SIGNAL, "") == "1"  # the steps need not see it
        count = self.environ.get("SLURM_RESTART_COUNT", "0")
        self.restart_count = int(count) if count.isdigit() else 0
        self.attempt = self.restart_count
        self.control: SlurmControl | None = SlurmControl(self.environ)
        self.step_nodes: list[list[str]] = []  # the supervisor's choice (assign); []: Slurm's lists

    def node_names(self, component: int) -> list[str]:
        text = self.environ.get(f"SLURM_JOB_NODELIST_HET_GROUP_{component}") or self.environ.get(
            "SLURM_JOB_NODELIST", ""
        )
        return expand(text) if text else []

    def assign(self, nodes: list[list[str]]) -> None:
        self.step_nodes = [list(names) for names in nodes]

    def step_env(self) -> dict[str, str]:
        """The environment of the attempt's steps: the attempt, and each component's nodes in rank order."""
        env = {**self.environ, "TI_SLURM_ATTEMPT": str(self.attempt)}
        for c, names in enumerate(self.step_nodes):
            env[f"TI_SLURM_STEP_NODES_{c}"] = hostlist_text(names)
        return env

    def srun_args(self, plan: JobPlan, component: int, nodes: list[int]) -> list[str]:
        comp = plan.components[component]
        log = JobPaths(self.job_dir).node_log(comp.name, "%n")  # srun fills in each node's place in the step
        args = ["srun"]
        if plan.heterogeneous:
            args.append(f"--het-group={component}")
        args += [
            f"--nodes={len(nodes)}",
            f"--ntasks={len(nodes)}",
            "--ntasks-per-node=1",
            f"--cpus-per-task={comp.cpus_per_node}",
            "--kill-on-bad-exit=1",
            "--wait=0",
            "--export=ALL",
            f"--job-name={comp.name}",
            f"--output={log}",
        ]
        if self.attempt > self.restart_count:
            # a restart in place: the earlier attempt's step may live on in Slurm's books (its lost node's part
            # ends when Slurm gives the node up), and would hold these nodes' CPUs until then
            args.append("--overlap")
        names = self.step_nodes[component] if self.step_nodes else self.node_names(component)
        if len(nodes) < comp.allocated or names != self.node_names(component)[: len(names)]:
            args.append(f"--nodelist={hostlist_text([names[i] for i in nodes])}")
        return args + node_command(plan, component, self.job_dir)

    def start(self, plan: JobPlan, component: int, nodes: list[int]) -> list[Launch]:
        make_inside(self.job_dir, JobPaths(self.job_dir).logs_dir)  # srun cannot start a step without it
        proc = subprocess.Popen(self.srun_args(plan, component, nodes), env=self.step_env(), stderr=subprocess.PIPE)
        launch = Launch(component, plan.components[component].name, nodes, proc)
        launch.relay = threading.Thread(target=relay_srun_stderr, args=(launch,), name="srun-stderr", daemon=True)
        launch.relay.start()
        return [launch]

    def stop(self, launch: Launch, grace: float, ended: Callable[[], bool] | None = None) -> None:
        # Each node's step watches for this file and stops its command (SIGTERM, SIGKILL after the grace);
        # srun then ends by itself. Not a signal to srun: on SIGTERM it kills the tasks at once, and on
        # Slurm 25.11 one srun of a heterogeneous job getting SIGTERM cancels the whole job, this one too.
        write_atomic(JobPaths(self.job_dir).stop_request(launch.component), f"{self.attempt}\n")
        deadline = time.monotonic() + grace + STOP_MARGIN
        while launch.proc.poll() is None and time.monotonic() < deadline and not (ended and ended()):
            time.sleep(POLL_SECONDS)
        if launch.proc.poll() is None:  # a step that does not answer (a lost node srun still waits for)
            kill_srun(launch.proc)
        launch.proc.wait()

    def stop_leftovers(self, grace: float) -> None:
        pass  # what a step leaves, Slurm ends with the step (and the Epilog with the job)

    def pass_signal(self, launch: Launch, signum: int) -> None:
        # Not through srun: Slurm would deliver it to every process of the step, a container runtime's own
        # too (enroot's squashfuse dies of SIGUSR2, and the image's files with it). Each node's step looks
        # for this file while its command runs and passes the signal to the command's processes only.
        write_atomic(JobPaths(self.job_dir).signal, f"{self.attempt} {signal.Signals(signum).name}\n")


def kill_srun(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL an ``srun`` that does not end, its shepherd first. srun forks a shepherd that, once srun dies
    unannounced, asks slurmctld to SIGKILL the step; on Slurm 25.11 that request, for a step of a
    heterogeneous job's first component, kills the whole job (the controller turns it into a kill of each
    component), the attempt about to start in place included. What is left of the step (its lost node's
    part) Slurm ends with the job, and the next attempt's steps ``--overlap`` it."""
    for pid in descendants(proc.pid):
        if pid != proc.pid:
            signal_pid(pid, signal.SIGKILL)
    proc.kill()


def relay_srun_stderr(launch: Launch) -> None:
    """Copy srun's stderr to the supervisor's own (the batch output) as it comes, noting each node Slurm says it
    could not start the step on: those nodes failed, not the training."""
    assert launch.proc.stderr is not None
    for line in iter(launch.proc.stderr.readline, b""):
        text = line.decode(errors="replace")
        failed = launch_failure(text)
        if failed is not None:
            launch.unlaunched.setdefault(*failed)
        launch.said[:] = [*launch.said[-(SAID_LINES - 1) :], text.rstrip("\n")]
        with contextlib.suppress(OSError):
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()


class LocalLauncher:
    """On this machine: one process per simulated node, all at 127.0.0.1."""

    record_before_stop_on_cancel = False
    resolves_names = False
    times_signal = False  # a local run has no time limit
    restart_count = 0
    control: SlurmControl | None = None  # a local run is not requeued
    attempt = 0

    def __init__(self, plan: JobPlan, job_dir: str, job_id: int) -> None:
        self.job_dir, self.job_id = job_dir, job_id
        self.names = [["localhost"] * c.nodes for c in plan.components]
        self.procs: list[subprocess.Popen[bytes]] = []  # every node's step

    def node_names(self, component: int) -> list[str]:
        return self.names[component]

    def assign(self, nodes: list[list[str]]) -> None:
        pass  # every node is this machine: the same names, each step its SLURM_NODEID

    def env_for(self, plan: JobPlan, index: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(
            SLURM_JOB_ID=str(self.job_id),
            SLURM_NODEID=str(index),
            SLURM_PROCID=str(index),
            SLURM_JOB_NAME=plan.name,
            TI_SLURM_NODE_ADDR="127.0.0.1",
            TI_SLURM_PORT_PER_NODE="1",
            TI_SLURM_LOCAL="1",
            TI_SLURM_ATTEMPT=str(self.attempt),
        )
        if plan.heterogeneous:
            env["SLURM_HET_SIZE"] = str(len(plan.components))
            env["SLURM_HET_JOB_ID"] = str(self.job_id)
            for c, comp in enumerate(plan.components):
                env[f"SLURM_JOB_NODELIST_HET_GROUP_{c}"] = ",".join(["localhost"] * comp.nodes)
        else:
            env["SLURM_JOB_NODELIST"] = ",".join(["localhost"] * plan.components[0].nodes)
        return env

    def start(self, plan: JobPlan, component: int, nodes: list[int]) -> list[Launch]:
        comp, paths = plan.components[component], JobPaths(self.job_dir)
        make_inside(paths.root, paths.logs_dir)
        launches = []
        for index in nodes:
            with open(paths.node_log(comp.name, index), "wb") as log:
                argv = node_command(plan, component, self.job_dir)
                proc = start_group(argv, self.env_for(plan, index), output=log, die_with_parent=True)
            self.procs.append(proc)
            launches.append(Launch(component, comp.name, [index], proc))
        return launches

    def stop(self, launch: Launch, grace: float, ended: Callable[[], bool] | None = None) -> None:
        terminate(launch.proc, grace + 5, group=True)

    def stop_leftovers(self, grace: float) -> None:
        """Stop what a stopped node step left behind (it was killed or frozen: it could not stop its command),
        handed to this process as subreaper: any child that is not a running node's step."""
        steps = {proc.pid for proc in self.procs if proc.poll() is None}
        me = os.getpid()
        orphans = [pid for pid in descendants(me) if pid not in steps and pid != me and parent_of(pid) == me]
        if orphans:
            stop_trees(orphans, grace)
            for pid in orphans:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)  # reap them: this process is their parent now

    def pass_signal(self, launch: Launch, signum: int) -> None:
        if launch.proc.poll() is None:
            os.kill(launch.proc.pid, signum)  # the node's step, which passes it to its command


def hostlist_text(names: list[str]) -> str:
    """Names as one hostlist, in their order (``node[01-03,07]``), short even for thousands of nodes."""
    try:
        return compress(names)
    except ValueError:  # a name that is no plain host name: as it is
        return ",".join(names)
