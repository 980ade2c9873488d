"""The supervisor: launch every component's nodes, apply the mode's rule, record status.

One supervisor serves both launchers:

- :class:`SlurmLauncher` (inside the batch script) starts one background
  ``srun [--het-group=<n>]`` per component (a Slurm job step), which runs
  each node's step (:mod:`ti_slurm.job.main`) on every node of that component;
- :class:`LocalLauncher` (``submit --local``) starts one process per simulated
  node on this machine, with the same Slurm variables a step would see.

Each :class:`Launch` is one process the supervisor started and watches: an
``srun`` serving all of a component's nodes, or one local node.

The rule (see :class:`ti_slurm.modes.Rule`): a required component's non-zero
exit fails the job at once and stops everything; when every required
component has exited 0, background components (parameter servers, Ray
workers) are stopped and the job succeeds; a background component that exits
before then fails the job.

``<job dir>/status.jsonl`` gets one JSON line per event as it happens:
``start``, ``step-exit``, ``signal`` (the checkpoint signal came), ``alive``
and ``end``; every event names its ``attempt`` (Slurm's restart count), and a
requeued job's next attempt appends to the same file. The per-node records
that the step wrapper writes in ``<job dir>/nodes/`` name the failing node.

Surviving interruptions (the spec's ``restart``, ``signal`` and ``watchdog``;
see :mod:`ti_slurm.job.restart`): on the checkpoint signal the supervisor
passes it to every node's command, lets the commands save and exit (until just
before the time limit or the preemption's end), then ends the attempt as
TIMEOUT or PREEMPTED. An attempt that failed, hung or lost a node ends the
same way. Each such end is recorded with its cause and, when ``restart.on``
lists the cause and requeues are left, the job is requeued from here, under
the same id, away from the lost nodes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Protocol

from ti_slurm.core.hostlist import expand
from ti_slurm.core.paths import JobPaths, parse_events
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.job import main_command
from ti_slurm.job.beat import ALIVE_EVERY, LOST_AFTER, BeatListener
from ti_slurm.job.modes import get_mode
from ti_slurm.job.process import (
    become_subreaper,
    descendants,
    exit_code,
    parent_of,
    start_group,
    stop_trees,
    terminate,
)
from ti_slurm.job.restart import CAUSE_STATES, SlurmControl, preempted, should_requeue
from ti_slurm.job.watch import last_output, mtime, step_alive_file

POLL_SECONDS = 0.1
FULL_DISK_BYTES = 1 << 20  # less free space than this where the job's files go: they could not be written
HEARTBEAT_SECONDS = 60.0  # an "alive" event this often: followers need not ask the controller while it comes
ADDRESSES_UP_TO = 1024  # larger jobs resolve names on each node (one lookup per name per node)
STOP_MARGIN = 5.0  # seconds beyond the spec's stop grace a stopped step has to end before srun is killed
CANCEL_SETTLE = 2.0  # seconds a step killed by a signal waits for the supervisor's own cancel signal
REQUEUE_MARGIN = 10.0  # seconds before the time limit (after stopping the steps) the requeue is asked for


@dataclass
class Launch:
    """One process the supervisor started: it serves some nodes of one component."""

    component_index: int
    component: str
    nodes: list[int]
    proc: subprocess.Popen[bytes]
    exit_code: int | None = None
    stopping: bool = False


class Launcher(Protocol):
    """Starts the processes that serve a component's nodes (and names the nodes)."""

    # On cancel, write the job's final record before stopping its steps? Slurm
    # kills the batch script KillWait seconds after scancel, so there the record
    # goes first; locally nothing kills the supervisor, so CANCELLED means gone.
    record_before_stop_on_cancel: bool
    # Are node names resolved to addresses (Slurm), or is every node this machine (the local runner)?
    resolves_names: bool
    # Which attempt this is (Slurm's restart count), and Slurm's commands to requeue it (None: cannot).
    restart_count: int
    control: SlurmControl | None

    def node_names(self, component: int) -> list[str]: ...

    def start(self, plan: JobPlan, component: int, nodes: list[int]) -> list[Launch]: ...

    def stop(self, launch: Launch, grace: float) -> None: ...

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
        count = self.environ.get("SLURM_RESTART_COUNT", "0")
        self.restart_count = int(count) if count.isdigit() else 0
        self.control: SlurmControl | None = SlurmControl(self.environ)

    def node_names(self, component: int) -> list[str]:
        text = self.environ.get(f"SLURM_JOB_NODELIST_HET_GROUP_{component}") or self.environ.get(
            "SLURM_JOB_NODELIST", ""
        )
        return expand(text) if text else []

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
        if len(nodes) < comp.nodes:
            args.append(f"--nodelist={','.join(self.node_names(component)[i] for i in nodes)}")
        return args + node_command(plan, component, self.job_dir)

    def start(self, plan: JobPlan, component: int, nodes: list[int]) -> list[Launch]:
        os.makedirs(JobPaths(self.job_dir).logs_dir, exist_ok=True)  # srun cannot start a step without it
        proc = subprocess.Popen(self.srun_args(plan, component, nodes), env=self.environ)
        return [Launch(component, plan.components[component].name, nodes, proc)]

    def stop(self, launch: Launch, grace: float) -> None:
        # Each node's step watches for this file and stops its command (SIGTERM, SIGKILL after the grace);
        # srun then ends by itself. Not a signal to srun: on SIGTERM it kills the tasks at once, and on
        # Slurm 25.11 one srun of a heterogeneous job getting SIGTERM cancels the whole job, this one too.
        from ti_slurm.core.files import write_atomic

        write_atomic(JobPaths(self.job_dir).stop_request(launch.component), f"{self.restart_count}\n")
        deadline = time.monotonic() + grace + STOP_MARGIN
        while launch.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        if launch.proc.poll() is None:  # a step that does not answer (a lost node srun still waits for)
            launch.proc.kill()  # Slurm ends what is left of the step with the job
        launch.proc.wait()

    def stop_leftovers(self, grace: float) -> None:
        pass  # what a step leaves, Slurm ends with the step (and the Epilog with the job)

    def pass_signal(self, launch: Launch, signum: int) -> None:
        # Not through srun: Slurm would deliver it to every process of the step, a container runtime's own
        # too (enroot's squashfuse dies of SIGUSR2, and the image's files with it). Each node's step looks
        # for this file while its command runs and passes the signal to the command's processes only.
        from ti_slurm.core.files import write_atomic

        write_atomic(JobPaths(self.job_dir).signal, f"{self.restart_count} {signal.Signals(signum).name}\n")


class LocalLauncher:
    """On this machine: one process per simulated node, all at 127.0.0.1."""

    record_before_stop_on_cancel = False
    resolves_names = False
    restart_count = 0
    control: SlurmControl | None = None  # a local run is not requeued

    def __init__(self, plan: JobPlan, job_dir: str, job_id: int) -> None:
        self.job_dir, self.job_id = job_dir, job_id
        self.names = [["localhost"] * c.nodes for c in plan.components]
        self.procs: list[subprocess.Popen[bytes]] = []  # every node's step

    def node_names(self, component: int) -> list[str]:
        return self.names[component]

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
        os.makedirs(paths.logs_dir, exist_ok=True)
        launches = []
        for index in nodes:
            with open(paths.node_log(comp.name, index), "wb") as log:
                argv = node_command(plan, component, self.job_dir)
                proc = start_group(argv, self.env_for(plan, index), output=log, die_with_parent=True)
            self.procs.append(proc)
            launches.append(Launch(component, comp.name, [index], proc))
        return launches

    def stop(self, launch: Launch, grace: float) -> None:
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


@dataclass
class Outcome:
    """How a job ended."""

    state: JobState  # COMPLETED | FAILED | CANCELLED | TIMEOUT | PREEMPTED | NODE_FAIL
    reason: str = ""
    failed: dict[str, object] = field(default_factory=dict)
    cause: str = ""  # why an interrupted attempt ended: preempt | timeout | node_fail | failure | hang
    lost_nodes: list[str] = field(default_factory=list)
    requeue: bool = False  # the job goes on in a next attempt
    requeued_by_slurm: bool = False  # ... which Slurm has already queued (preemption, node failure)

    @property
    def exit_code(self) -> int:
        if self.state is JobState.COMPLETED:
            return 0
        code = self.failed.get("exit_code")
        return code if isinstance(code, int) and 0 < code < 256 else 1


class Supervisor:
    """Runs a plan's nodes through a launcher and decides the job's outcome."""

    def __init__(
        self, plan: JobPlan, job_dir: str, launcher: Launcher, say: Callable[[str], None] | None = None
    ) -> None:
        self.plan, self.paths, self.launcher = plan, JobPaths(job_dir), launcher
        self.rule = get_mode(plan.mode).rule
        self.say = say or (lambda text: print(f"ti-slurm: {text}", flush=True))
        self.launches: list[Launch] = []
        self._cancel_signal: int | None = None
        self._checkpoint_signal: int | None = None
        self.attempt = launcher.restart_count
        self.interrupt: Outcome | None = None  # set when the checkpoint signal came: how the attempt will end
        self.deadline = float("inf")  # ... and when its steps are stopped at the latest (time.time())
        self.earlier_lost: list[str] = []  # the nodes earlier attempts lost (kept out of the next one)
        self.beats: BeatListener | None = None  # the nodes' liveness datagrams, besides their files

    # -- status file ---------------------------------------------------
    def event(self, kind: str, **data: object) -> None:
        record = {"event": kind, "time": round(time.time(), 3), "submission": self.plan.submission}
        record |= {"attempt": self.attempt, **data}
        with open(self.paths.status, "a", encoding="utf-8") as fh:  # a requeued attempt adds to the record
            fh.write(json.dumps(record) + "\n")

    def earlier_events(self) -> list[dict[str, object]]:
        """This submission's events so far (earlier attempts of a requeued job)."""
        try:
            with open(self.paths.status, encoding="utf-8") as fh:
                events = parse_events(fh.read())
        except OSError:
            return []
        return [e for e in events if e.get("submission") == self.plan.submission]

    def node_records(self) -> list[dict[str, object]]:
        folder = self.paths.nodes_dir
        records = []
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as fh:
                    records.append(json.loads(fh.read()))
            except (OSError, ValueError):
                continue
        return records

    # -- the rule --------------------------------------------------------
    def launch_plan(self) -> list[tuple[int, list[int]]]:
        """(component index, node indexes) of each launch: every node, or node 0 where only the launcher runs."""
        return [
            (c, [0] if self.rule.launcher_only else list(range(comp.nodes)))
            for c, comp in enumerate(self.plan.components)
        ]

    def required_commands_done(self) -> bool:
        """Every node of every required component has recorded exit 0."""
        done = {(r["component"], r["index"]) for r in self.node_records() if r.get("exit_code") == 0}
        return all(
            (launch.component, i) in done
            for launch in self.launches
            if self.rule.is_required(launch.component)
            for i in launch.nodes
        )

    def launch_records(self, launch: Launch) -> list[dict[str, object]]:
        """The node records of the nodes ``launch`` served."""
        return [
            r for r in self.node_records() if r.get("component") == launch.component and r.get("index") in launch.nodes
        ]

    def node_labels(self, launch: Launch, indexes: list[int]) -> str:
        names = self.launcher.node_names(launch.component_index)
        return ",".join(names[i] if i < len(names) else str(i) for i in indexes)

    def failure(self, launch: Launch, any_exit: bool = False) -> Outcome:
        """The outcome naming the first node of ``launch`` that failed (or, with ``any_exit``, that exited)."""
        bad = [r for r in self.launch_records(launch) if any_exit or r.get("exit_code")]
        bad.sort(key=lambda r: float(r.get("ended", 0)))  # type: ignore[arg-type]
        if bad:
            first = bad[0]
            failed = {
                "component": launch.component,
                "node": first.get("node"),
                "index": first.get("index"),
                "exit_code": first.get("exit_code"),
            }
            reason = f"{launch.component} node {failed['node']} (index {failed['index']}) exited {failed['exit_code']}"
            if first.get("error"):
                reason = f"{launch.component} node {failed['node']} (index {failed['index']}) failed {first['error']}"
        else:
            nodes = self.node_labels(launch, launch.nodes)
            failed = {"component": launch.component, "node": nodes, "index": None, "exit_code": launch.exit_code}
            reason = f"{launch.component} step on {nodes} exited {launch.exit_code}"
            full = self.full_disk()  # no node could record its exit: say why, when it is the disk
            reason += f" ({full})" if full else ""
        return Outcome(JobState.FAILED, reason, failed)

    def full_disk(self) -> str:
        """Why job files could not be written, when it is that the job directory's filesystem is full."""
        try:
            fs = os.statvfs(self.paths.root)
        except OSError:
            return ""
        if fs.f_bavail * fs.f_frsize >= FULL_DISK_BYTES and (fs.f_files == 0 or fs.f_favail > 0):
            return ""
        return f"the filesystem of {self.paths.root} is full (ENOSPC: no space left on device)"

    def judge(self, launch: Launch) -> Outcome | None:
        """Apply the mode's rule after ``launch`` exited; ``None`` means keep going."""
        required = self.rule.is_required(launch.component)
        if required and launch.exit_code != 0:
            return self.failure(launch)
        seen = {r.get("index") for r in self.launch_records(launch)}
        missing_indexes = [i for i in launch.nodes if i not in seen]
        if required and missing_indexes:
            # srun can exit 0 when a task failed to launch: only node records count as success
            missing = self.node_labels(launch, missing_indexes)
            shared = f"the command never ran, or {self.paths.root} is not on a filesystem every node shares"
            why = self.full_disk() or shared
            reason = f"{launch.component} step exited {launch.exit_code} but node(s) {missing} left no exit record"
            reason += f" ({why})"
            return Outcome(JobState.FAILED, reason, {"component": launch.component, "node": missing, "exit_code": None})
        if not required and not launch.stopping:
            if self.required_commands_done():
                return None  # shutting down after the command (Ray workers leave when the head stops)
            outcome = self.failure(launch, any_exit=True)
            outcome.reason = f"{outcome.reason} while the job was still running"
            return outcome
        if all(x.exit_code == 0 for x in self.launches if self.rule.is_required(x.component)):
            return Outcome(JobState.COMPLETED, "every required step exited 0")
        return None

    # -- running ---------------------------------------------------------
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._cancel_signal = signum

    def share_addresses(self) -> None:
        """Resolve every node's name once, here, for every node's contract (and the preflight's check)."""
        names = [name for c in range(len(self.plan.components)) for name in self.launcher.node_names(c)]
        if len(names) <= ADDRESSES_UP_TO and self.launcher.resolves_names:
            from ti_slurm.core.files import write_atomic
            from ti_slurm.job.contract import resolve_all

            write_atomic(self.paths.addresses, resolve_all(names))

    def listen_for_beats(self) -> None:
        """Take the nodes' liveness datagrams (no listener, e.g. no socket to be had: their files alone)."""
        from ti_slurm.core.files import write_atomic

        try:
            self.beats = BeatListener()
        except OSError as exc:
            self.say(f"node liveness by their files only (no UDP listener: {exc})")
            return
        write_atomic(self.paths.beat, self.beats.beat_file_text, 0o600)

    def launch_exit_event(self, launch: Launch) -> None:
        records = [{k: r.get(k) for k in ("index", "node", "exit_code")} for r in self.launch_records(launch)]
        self.event(
            "step-exit",
            component=launch.component,
            nodes=launch.nodes,
            exit_code=launch.exit_code,
            stopped=launch.stopping,
            records=records,
        )

    def stop_running(self) -> None:
        running = [launch for launch in self.launches if launch.exit_code is None]
        for launch in running:
            launch.stopping = True
        for launch in running:
            self.launcher.stop(launch, self.plan.stop_grace)
            launch.exit_code = exit_code(launch.proc.returncode)
            with contextlib.suppress(OSError):  # stopping matters more than its record
                self.launch_exit_event(launch)
        self.launcher.stop_leftovers(self.plan.stop_grace)

    def run(self) -> Outcome:
        os.makedirs(self.paths.root, exist_ok=True)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        if self.plan.checkpoint_signal:
            signal.signal(getattr(signal, f"SIG{self.plan.checkpoint_signal}"), self._on_checkpoint_signal)
        try:  # never leave steps running behind a broken supervisor (a full disk, a bug)
            refused = self.restart_refused(self.close_earlier_attempt())
            if refused is not None:
                outcome = refused
            else:
                if self.plan.restart_max and self.attempt >= self.plan.restart_max and self.launcher.control:
                    self.launcher.control.disable_requeue()  # the last attempt: preemption ends the job now
                self.share_addresses()
                self.listen_for_beats()
                for c, nodes in self.launch_plan():
                    self.launches.extend(self.launcher.start(self.plan, c, nodes))
                components = [
                    {"name": comp.name, "nodes": self.launcher.node_names(c)}
                    for c, comp in enumerate(self.plan.components)
                ]
                self.event("start", mode=self.plan.mode, components=components)
                self.say(f"started {len(self.launches)} step(s) for {self.plan.mode} job {self.plan.name}")
                outcome = self._loop()
                if outcome.state is JobState.FAILED and not outcome.cause:
                    outcome = self.failure_cause(outcome)
        except Exception as exc:
            outcome = Outcome(JobState.FAILED, f"ti-slurm supervisor error: {type(exc).__name__}: {exc}")
        self.decide_requeue(outcome)
        record_first = self.launcher.record_before_stop_on_cancel and (
            outcome.state is JobState.CANCELLED or outcome.requeued_by_slurm
        )
        if not record_first:
            self.stop_running()
        self.record_end(outcome)
        if outcome.requeue:
            self.requeue(outcome)
        if record_first:
            self.stop_running()
        if self.beats is not None:
            self.beats.close()
        self.say(f"{outcome.state}: {outcome.reason}" + (" (requeued)" if outcome.requeue else ""))
        return outcome

    def record_end(self, outcome: Outcome) -> None:
        extra: dict[str, object] = {}
        if outcome.cause or outcome.requeue:  # a requeued attempt is not the job's end, whatever its cause
            extra = {"cause": outcome.cause, "requeue": outcome.requeue}
        if outcome.lost_nodes:
            extra["lost_nodes"] = outcome.lost_nodes
        try:
            self.event("end", state=outcome.state.value, reason=outcome.reason, failed=outcome.failed, **extra)
        except OSError as exc:  # the outcome still reaches the job's output (and the exit code)
            self.say(f"cannot record the job's end in {self.paths.status}: {exc.strerror}")

    # -- attempts --------------------------------------------------------
    def close_earlier_attempt(self) -> dict[str, object] | None:
        """On a requeued job: keep the earlier attempt's logs and records aside, and its end recorded.

        Returns the earlier attempt's end event (written here when it could not write its own: its
        batch node was lost, or Slurm killed it), or None on a first attempt.
        """
        events = self.earlier_events()
        for e in events:
            lost_earlier = e.get("lost_nodes") if e.get("event") == "end" else None
            self.earlier_lost += [str(n) for n in lost_earlier] if isinstance(lost_earlier, list) else []
        starts = [e for e in events if e.get("event") == "start"]
        if not starts:
            shutil.rmtree(self.paths.nodes_dir, ignore_errors=True)  # a first attempt starts clean
            return None
        last = starts[-1]
        k = last.get("attempt", 0)
        k = k if isinstance(k, int) else 0
        aside = self.paths.attempt(k)
        os.makedirs(aside.root, exist_ok=True)
        for name in ("logs", "nodes"):
            with contextlib.suppress(OSError):
                os.replace(os.path.join(self.paths.root, name), os.path.join(aside.root, name))
        ends = [e for e in events[events.index(last) :] if e.get("event") == "end"]
        if ends:
            return ends[-1]
        components = last.get("components")
        nodes = [
            str(n)
            for c in (components if isinstance(components, list) else [])
            if isinstance(c, dict)
            for n in c.get("nodes") or []
        ]
        lost = self.launcher.control.unreachable_nodes(nodes) if self.launcher.control else []
        if lost:
            state, cause = JobState.NODE_FAIL, "node_fail"
            reason = f"node(s) {','.join(lost)} lost; Slurm requeued the job"
        else:
            state, cause, reason = JobState.FAILED, "", "ended without a final record; Slurm requeued the job"
        end: dict[str, object] = {
            "state": state.value,
            "reason": reason,
            "cause": cause,
            "requeue": True,
            "lost_nodes": lost,
        }
        saved, self.attempt = self.attempt, k
        try:
            self.event("end", failed={}, **end)
        finally:
            self.attempt = saved
        self.earlier_lost += lost
        return end

    def restart_refused(self, earlier: dict[str, object] | None) -> Outcome | None:
        """Slurm requeued the job for a cause ``restart.on`` does not list: end it here, saying so."""
        if earlier is None:
            return None
        cause = str(earlier.get("cause") or "")
        if not cause or earlier.get("requeue") is False or cause in self.plan.restart_on:
            return None
        return Outcome(
            CAUSE_STATES.get(cause, JobState.FAILED),
            f"not restarted: the earlier attempt ended by {cause}, which restart.on does not list "
            f"({', '.join(self.plan.restart_on) or 'nothing'})",
        )

    def failure_cause(self, outcome: Outcome) -> Outcome:
        """Name why a failed attempt failed: a lost node, a hung command, or a command's failure."""
        records = self.node_records()
        hung = self.silent_nodes(records)
        lost = self.lost_nodes(records)
        if lost:
            outcome.cause, outcome.lost_nodes = "node_fail", lost
            outcome.state = JobState.NODE_FAIL
            outcome.reason = f"node(s) {','.join(lost)} lost (its step stopped answering); {outcome.reason}"
        elif hung:
            outcome.cause = "hang"
            outcome.reason = f"HUNG: node(s) {','.join(hung)} printed nothing for {self.plan.watchdog_silence} s"
        else:
            outcome.cause = "failure" if outcome.failed else ""
        return outcome

    def silent_nodes(self, records: list[dict[str, object]]) -> list[str]:
        """The nodes the watchdog found hung, and those as silent by then (a rank blocked in a collective
        behind a hung one is silent too: their stacks, in their logs, tell them apart)."""
        hung = [r for r in records if str(r.get("error", "")).startswith("hung")]
        if not hung:
            return []
        found = min(float(r.get("ended", 0)) for r in hung)  # type: ignore[arg-type]
        names = {str(r.get("node")) for r in hung}
        for launch in self.launches:
            node_names = self.launcher.node_names(launch.component_index)
            for i in launch.nodes:
                last = last_output(step_alive_file(self.paths, launch.component, i))
                # the liveness note is up to ALIVE_EVERY s old
                if last and found - last >= self.plan.watchdog_silence - ALIVE_EVERY - 1 and i < len(node_names):
                    names.add(node_names[i])
        return sorted(names)

    def lost_nodes(self, records: list[dict[str, object]]) -> list[str]:
        """Nodes whose step left no exit record and fell silent, on its liveness file and its datagrams alike
        (or Slurm says: down)."""
        recorded = {(r.get("component"), r.get("index")) for r in records}
        silent, missing = set(), []
        now = time.time()
        for launch in self.launches:
            names = self.launcher.node_names(launch.component_index)
            for i in launch.nodes:
                if (launch.component, i) in recorded or i >= len(names):
                    continue
                missing.append(names[i])
                alive = self.last_heard(launch.component, i)
                if alive and now - alive > LOST_AFTER:
                    silent.add(names[i])
        down = self.launcher.control.unreachable_nodes(missing) if missing and self.launcher.control else []
        return sorted(silent | set(down))

    def last_heard(self, component: str, index: int) -> float:
        """When a node's step last said it was alive, on either channel (0.0: never): its liveness file (late
        when the shared filesystem stalls) or its UDP beat."""
        heard = mtime(step_alive_file(self.paths, component, index))
        return max(heard, self.beats.last(component, index)) if self.beats is not None else heard

    def silent_running_nodes(self) -> list[str]:
        """Nodes of steps still running that beat over UDP before and have been silent on every channel for
        LOST_AFTER seconds, without an exit record: their step is frozen (SIGSTOP, a process stuck in the
        kernel) or their node is gone. A node never heard over UDP is not judged here: its file alone cannot
        tell a lost node from a stalled filesystem."""
        if self.beats is None or self.launcher.control is not None:
            # under Slurm, srun and Slurm's node state (SlurmdTimeout) find a lost node, and Slurm requeues the
            # job itself: acting at the same moment races its requeue. A frozen step there: not yet.
            return []
        now, candidates = time.time(), []
        for launch in self.launches:
            if launch.exit_code is not None or launch.stopping:
                continue
            names = self.launcher.node_names(launch.component_index)
            for i in launch.nodes:
                beat = self.beats.last(launch.component, i)
                if beat and now - self.last_heard(launch.component, i) > LOST_AFTER and i < len(names):
                    candidates.append((launch.component, i, names[i]))
        if not candidates:
            return []
        recorded = {(r.get("component"), r.get("index")) for r in self.node_records()}  # those ended on their own
        return sorted({name for component, i, name in candidates if (component, i) not in recorded})

    def decide_requeue(self, outcome: Outcome) -> None:
        """Whether the attempt goes on in a next one (then its end is recorded as requeued)."""
        if outcome.requeued_by_slurm:
            outcome.requeue = True
            return
        allowed = should_requeue(self.plan, outcome.cause, self.attempt)
        if allowed and self.launcher.control is None:
            outcome.reason += "; a local run is not restarted"
        outcome.requeue = allowed and self.launcher.control is not None

    def requeue(self, outcome: Outcome) -> None:
        """Requeue this job (Slurm may have already); a refusal ends the job, with Slurm's reason."""
        assert self.launcher.control is not None
        exclude = sorted(set(self.lost_across_attempts()) | set(outcome.lost_nodes))
        refusal = self.launcher.control.requeue(exclude, already=outcome.requeued_by_slurm)
        if refusal:
            outcome.requeue, outcome.state = False, JobState.FAILED
            outcome.reason = f"{outcome.reason}; Slurm refused to requeue the job: {refusal}"
            self.record_end(outcome)

    def lost_across_attempts(self) -> list[str]:
        """Every node an earlier attempt lost, and the user's own ``sbatch: {exclude: ...}`` (kept excluded)."""
        nodes = list(self.earlier_lost)
        own = self.plan.sbatch.get("exclude")
        if isinstance(own, str) and own:
            from ti_slurm.core.hostlist import expand

            nodes += expand(own)
        return nodes

    # -- the checkpoint signal -------------------------------------------
    @property
    def may_restart(self) -> bool:
        """Could a SIGTERM be Slurm requeueing the job (rather than a cancel)? Then Slurm is asked."""
        return (self.plan.restart_max > 0 or bool(self.plan.checkpoint_signal)) and self.launcher.control is not None

    def _on_checkpoint_signal(self, signum: int, frame: FrameType | None) -> None:
        self._checkpoint_signal = signum

    def begin_interrupt(self, signum: int, job: dict[str, str] | None = None) -> None:
        """The checkpoint signal came: why (time limit or preemption), until when, and pass it to every node.

        ``job`` (Slurm's view, when already asked) with SIGTERM: a preemption on a site that sends SIGTERM
        to every process instead of the job's signal; the nodes have it already, from Slurm.
        """
        if job is None:
            job = self.launcher.control.show_job() if self.launcher.control else {}
        cause = "preempt" if preempted(job) else "timeout"
        end_time = slurm_time(job.get("EndTime", ""))
        if end_time is not None:
            self.deadline = end_time - self.plan.stop_grace - REQUEUE_MARGIN
        else:  # the limit is at least signal.before away (Slurm may signal up to a minute early)
            self.deadline = time.time() + max(self.plan.signal_before - self.plan.stop_grace - REQUEUE_MARGIN, 0)
        name = signal.Signals(signum).name
        what = "the job was preempted" if cause == "preempt" else "the time limit is near"
        self.interrupt = Outcome(CAUSE_STATES[cause], f"{what}: every node got {name}")
        self.interrupt.cause = cause
        self.event("signal", signal=name.removeprefix("SIG"), cause=cause, deadline=round(self.deadline, 3))
        for launch in self.launches:
            if launch.exit_code is None:
                launch.stopping = True  # its exit is the checkpoint's end, not a failure
                if signum != signal.SIGTERM:
                    self.launcher.pass_signal(launch, signum)
        self.say(f"{what}: every node's command got {name}")

    def interrupted_by_slurm(self) -> Outcome | None:
        """SIGTERM on a job that may restart: Slurm requeued it (preemption, node failure), or it is being
        preempted where the site sends SIGTERM instead of the job's signal (then None: its commands save
        in the grace time, as with the signal), or it was cancelled."""
        job = self.launcher.control.show_job() if self.launcher.control else {}
        restarts = job.get("Restarts", "")
        if not (restarts.isdigit() and int(restarts) > self.attempt):
            if self.interrupt is not None:
                return self.interrupt  # the time limit or the preemption's grace time came first
            if preempted(job):
                self.begin_interrupt(signal.SIGTERM, job)
                return None
            name = signal.Signals(self._cancel_signal or signal.SIGTERM).name
            return Outcome(JobState.CANCELLED, f"received signal {name}")
        if self.interrupt is not None:  # the preemption (or time limit) whose grace time Slurm ended
            self.interrupt.requeued_by_slurm = True
            return self.interrupt
        lost = [] if preempted(job) else self.lost_nodes(self.node_records())
        if preempted(job):
            outcome = Outcome(JobState.PREEMPTED, "the job was preempted; Slurm requeued it", cause="preempt")
        elif lost:
            outcome = Outcome(JobState.NODE_FAIL, f"node(s) {','.join(lost)} lost; Slurm requeued the job")
            outcome.cause, outcome.lost_nodes = "node_fail", lost
        else:
            outcome = Outcome(JobState.FAILED, "requeued by Slurm or an administrator")
        outcome.requeued_by_slurm = True
        return outcome

    def _loop(self) -> Outcome:
        alive_at = next_lost_check = time.monotonic()
        may_restart = self.may_restart
        while True:
            if time.monotonic() - alive_at >= HEARTBEAT_SECONDS:
                alive_at = time.monotonic()
                self.event("alive")
            if self._checkpoint_signal is not None and self.interrupt is None:
                self.begin_interrupt(self._checkpoint_signal)
            if self._cancel_signal is not None:
                if not may_restart:
                    return Outcome(JobState.CANCELLED, f"received signal {signal.Signals(self._cancel_signal).name}")
                outcome = self.interrupted_by_slurm()
                if outcome is not None:
                    return outcome
                self._cancel_signal = None  # preempted: the grace time to save; a second SIGTERM ends it
            if self.interrupt is not None:  # saving: exits are expected; the attempt ends when all are done
                for launch in self.launches:
                    self.reaped(launch)
                # done once every node whose success the job needs has saved (parameter servers and Ray's
                # worker daemons are then stopped, as at a normal end)
                required = [x for x in self.launches if self.rule.is_required(x.component)]
                if all(x.exit_code is not None for x in required) or time.time() >= self.deadline:
                    return self.interrupt
                time.sleep(POLL_SECONDS)
                continue
            for launch in self.launches:
                if not self.reaped(launch):
                    continue
                if not self.rule.is_required(launch.component) and not launch.stopping:
                    self._settle_background_exit()
                outcome = self.judge(launch)
                if outcome is not None:
                    if outcome.state is JobState.COMPLETED:
                        self.stop_running()
                    return self._cancelled_meanwhile(outcome)
            if time.monotonic() >= next_lost_check:
                next_lost_check = time.monotonic() + ALIVE_EVERY
                lost = self.silent_running_nodes()
                if lost:  # a frozen step, or a node gone before anything noticed: the job cannot go on
                    outcome = Outcome(JobState.NODE_FAIL, f"node(s) {','.join(lost)} lost (its step stopped answering)")
                    outcome.cause, outcome.lost_nodes = "node_fail", lost
                    return outcome
            time.sleep(POLL_SECONDS)

    def reaped(self, launch: Launch) -> bool:
        """Whether ``launch`` has just exited (then its exit is recorded)."""
        if launch.exit_code is not None or launch.proc.poll() is None:
            return False
        launch.exit_code = exit_code(launch.proc.returncode)
        self.launch_exit_event(launch)
        return True

    def _cancelled_meanwhile(self, outcome: Outcome) -> Outcome:
        """A node killed by a signal may be the first sign of a cancel: ``scancel`` signals every step
        and the batch script at once, in no set order. Give the supervisor's own signal a moment."""
        code = outcome.failed.get("exit_code")
        if outcome.state is not JobState.FAILED or (isinstance(code, int) and code <= 128):
            return outcome
        deadline = time.monotonic() + CANCEL_SETTLE
        while self._cancel_signal is None and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS / 2)
        if self._cancel_signal is None:
            return outcome
        if self.may_restart:
            return self.interrupted_by_slurm() or self.interrupt or outcome
        return Outcome(JobState.CANCELLED, f"received signal {signal.Signals(self._cancel_signal).name}")

    def _settle_background_exit(self) -> None:
        # A Ray worker may notice the head stopping before the head's own step
        # exits; give the head's record a moment to land before judging.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not self.required_commands_done():
            if any(
                x.exit_code is None and x.proc.poll() is not None
                for x in self.launches
                if self.rule.is_required(x.component)
            ):
                break
            time.sleep(POLL_SECONDS)


def slurm_time(text: str) -> float | None:
    """A time as ``scontrol`` prints it (``2026-11-30T07:56:27``, local time) as seconds since the epoch."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def supervise(job_dir: str) -> int:
    """Entry point inside the batch script: supervise the job whose plan is in ``job_dir``."""
    with open(JobPaths(job_dir).plan, encoding="utf-8") as fh:
        plan = JobPlan.from_json(fh.read())
    return Supervisor(plan, job_dir, SlurmLauncher(job_dir)).run().exit_code


def run_local(job_dir: str, job_id: int) -> int:
    """The detached supervisor process of a local job (the local backend starts it)."""
    with open(JobPaths(job_dir).plan, encoding="utf-8") as fh:
        plan = JobPlan.from_json(fh.read())
    become_subreaper()  # a node step killed or frozen leaves its command to this process: stopped with the node
    return Supervisor(plan, job_dir, LocalLauncher(plan, job_dir, job_id)).run().exit_code
