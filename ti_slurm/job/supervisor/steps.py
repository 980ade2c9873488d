"""One attempt's launches: starting them, noticing each exit (recorded as a ``step-exit`` event with the
nodes' own exit records), judging it, and stopping what still runs."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Sequence

from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.job.modes.base import Rule
from ti_slurm.job.process import exit_code
from ti_slurm.job.supervisor.judge import NodeNames, Outcome, Snapshot, judge, required_commands_done
from ti_slurm.job.supervisor.launchers import POLL_SECONDS, Launch, Launcher
from ti_slurm.job.supervisor.records import NodeRecords

BACKGROUND_SETTLE = 2.0  # seconds a background exit waits for the required nodes' records (Ray's workers)


class Steps:
    """The launches of one attempt, through ``launcher``; ``event`` records what happens to them."""

    def __init__(
        self,
        plan: JobPlan,
        rule: Rule,
        launcher: Launcher,
        records: NodeRecords,
        names: NodeNames,
        event: Callable[..., None],
    ) -> None:
        self.plan, self.rule, self.launcher, self.records, self.names = plan, rule, launcher, records, names
        self.event = event
        self.launches: list[Launch] = []

    def start(self) -> None:
        """Every component's launches (Horovod: its launcher node only)."""
        for c, comp in enumerate(self.plan.components):
            nodes = [0] if self.rule.launcher_only else list(range(comp.nodes))
            self.launches.extend(self.launcher.start(self.plan, c, nodes))

    @property
    def required(self) -> list[Launch]:
        return [x for x in self.launches if self.rule.is_required(x.component)]

    def judged_exit(self) -> Outcome | None:
        """The job's outcome once a launch that just exited decides it."""
        for launch in self.launches:
            snap = self.reaped(launch)
            if snap is None:
                continue
            if not self.rule.is_required(launch.component) and not launch.stopping:
                snap = self.settled_snapshot()
            outcome = judge(self.rule, self.launches, launch, snap, self.names)
            if outcome is not None:
                if outcome.state is JobState.COMPLETED:
                    self.stop_running()
                return outcome
        return None

    def reaped(self, launch: Launch) -> Snapshot | None:
        """When ``launch`` has just exited: the records then, its own nodes' read anew (its exit is recorded)."""
        if launch.exit_code is not None or launch.proc.poll() is None:
            return None
        launch.exit_code = exit_code(launch.proc.returncode)
        snap = self.records.snapshot(launch)
        self.launch_exit_event(launch, snap)
        return snap

    def launch_exit_event(self, launch: Launch, snap: Snapshot) -> None:
        own = [snap.records[(launch.component, i)] for i in launch.nodes if (launch.component, i) in snap.records]
        self.event(
            "step-exit",
            component=launch.component,
            nodes=launch.nodes,
            exit_code=launch.exit_code,
            stopped=launch.stopping,
            records=[{"index": r.index, "node": r.node, "exit_code": r.exit_code} for r in own],
        )

    def settled_snapshot(self) -> Snapshot:
        """Every node's records, once the required ones are all in (or BACKGROUND_SETTLE seconds): a Ray worker
        may notice the head stopping before the head's own step exits, so its record gets a moment to land."""
        deadline = time.monotonic() + BACKGROUND_SETTLE
        while not required_commands_done(self.rule, self.launches, snap := self.records.snapshot()):
            exited = any(x.exit_code is None and x.proc.poll() is not None for x in self.required)
            if exited or time.monotonic() >= deadline:
                break
            time.sleep(POLL_SECONDS)
        return snap

    def saved(self, lost: Sequence[str] = ()) -> bool:
        """After the checkpoint signal: whether every node whose success the job needs has saved and exited
        (parameter servers and Ray's worker daemons are then stopped, as at a normal end); a launch that
        still waits for ``lost`` nodes counts once its other nodes are done."""
        for launch in self.launches:
            self.reaped(launch)
        return all(x.exit_code is not None or (lost and self.done_but(x, lost)) for x in self.required)

    def done_but(self, launch: Launch, lost: Sequence[str]) -> bool:
        """Whether every node of ``launch`` but the lost ones recorded its exit."""
        ended = self.records.snapshot().records
        return all((launch.component, i) in ended or self.names.of(launch, i) in lost for i in launch.nodes)

    def stop_for_restart(self, lost: Sequence[str] = ()) -> None:
        """Stop what still runs before the commands start again: those whose success the job needs get the
        checkpoint signal first and the stop grace to save and exit (parameter servers and Ray's worker
        daemons save nothing: they are stopped at once), then everything is stopped as at an end. Nothing
        waits for ``lost`` nodes."""
        saving = [x for x in self.required if x.exit_code is None]
        if self.plan.checkpoint_signal and saving:
            signum = getattr(signal, f"SIG{self.plan.checkpoint_signal}")
            for launch in saving:
                launch.stopping = True
                self.launcher.pass_signal(launch, signum)
            deadline = time.monotonic() + self.plan.stop_grace
            while not self.saved(lost) and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)
        self.stop_running(lost)

    def stop_running(self, lost: Sequence[str] = ()) -> None:
        running = [launch for launch in self.launches if launch.exit_code is None]
        for launch in running:
            launch.stopping = True
        for launch in running:
            waits_for_lost = any(self.names.of(launch, i) in lost for i in launch.nodes)
            ended = (lambda x=launch: self.done_but(x, lost)) if waits_for_lost else None
            self.launcher.stop(launch, self.plan.stop_grace, ended)
            launch.exit_code = exit_code(launch.proc.returncode)
            with contextlib.suppress(OSError):  # stopping matters more than its record
                self.launch_exit_event(launch, self.records.snapshot(launch))
        self.launcher.stop_leftovers(self.plan.stop_grace)
