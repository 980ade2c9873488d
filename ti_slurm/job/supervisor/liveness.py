"""Which nodes are lost, frozen or hung: from their exit records, their liveness files and their UDP beats.

A lost node has no exit record and has been silent for ``LOST_AFTER`` seconds on both channels, its
liveness file and its datagrams (or Slurm says it is down): a stalled shared filesystem, which makes
every file late at once, names no healthy node. A hung node is one the watchdog stopped, with those
as silent by then (a rank blocked in a collective behind a hung one is silent too).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ti_slurm.core.files import write_atomic
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.states import JobState
from ti_slurm.job.beat import ALIVE_EVERY, LOST_AFTER, BeatListener
from ti_slurm.job.supervisor.attempts import Control
from ti_slurm.job.supervisor.judge import NodeNames, Outcome, Snapshot
from ti_slurm.job.supervisor.launchers import Launch
from ti_slurm.job.supervisor.records import NodeRecords
from ti_slurm.job.watch import last_output, mtime, step_alive_file


class Liveness:
    """What the nodes' steps say of being alive; ``beats`` None: their files alone (no UDP listener)."""

    def __init__(self, paths: JobPaths, names: NodeNames, beats: BeatListener | None) -> None:
        self.paths, self.names, self.beats = paths, names, beats

    def listen(self, say: Callable[[str], None]) -> None:
        """Take the nodes' liveness datagrams (no listener, e.g. no socket to be had: their files alone)."""
        try:
            self.beats = BeatListener()
        except OSError as exc:
            say(f"node liveness by their files only (no UDP listener: {exc})")
            return
        write_atomic(self.paths.beat, self.beats.beat_file_text, 0o600)

    def last_heard(self, component: str, index: int) -> float:
        """When a node's step last said it was alive, on either channel (0.0: never)."""
        heard = mtime(step_alive_file(self.paths, component, index))
        return max(heard, self.beats.last(component, index)) if self.beats is not None else heard

    def lost(self, launches: Sequence[Launch], snap: Snapshot, control: Control | None) -> list[str]:
        """Nodes whose step left no exit record and fell silent on both channels (or Slurm says: down)."""
        silent, missing = set(), []
        now = time.time()
        for launch in launches:
            for i in launch.nodes:
                name = self.names.of(launch, i)
                if (launch.component, i) in snap.records or name is None:
                    continue
                missing.append(name)
                alive = self.last_heard(launch.component, i)
                if alive and now - alive > LOST_AFTER:
                    silent.add(name)
        down = control.unreachable_nodes(missing) if missing and control else []
        return sorted(silent | set(down))

    def frozen(self, launches: Sequence[Launch], udp_after: float = 0.0) -> list[tuple[str, int, str]]:
        """(component, index, name) of nodes of running steps that beat over UDP before and have been silent
        on every channel for LOST_AFTER seconds: their step is frozen (SIGSTOP, stuck in the kernel) or their
        node is gone. A node never heard over UDP is not judged: its file alone cannot tell a lost node from
        a stalled filesystem. The caller leaves out those that recorded their exit meanwhile. ``udp_after``:
        judge by the datagrams alone, silent that long (where a spare can take the node's place)."""
        if self.beats is None:
            return []
        now, found = time.time(), []
        for launch in launches:
            if launch.exit_code is not None or launch.stopping:
                continue
            for i in launch.nodes:
                name = self.names.of(launch, i)
                beat = self.beats.last_received(launch.component, i)
                if udp_after:
                    silent = now - beat > udp_after
                else:
                    silent = now - self.last_heard(launch.component, i) > LOST_AFTER
                if beat and name is not None and silent:
                    found.append((launch.component, i, name))
        return found

    def frozen_outcome(
        self, launches: Sequence[Launch], records: NodeRecords, udp_after: float = 0.0
    ) -> Outcome | None:
        """A frozen step, or a node gone before anything noticed (the local runner's): the job cannot go on."""
        found = self.frozen(launches, udp_after)
        if not found:
            return None
        ended = records.snapshot().records  # those ended on their own meanwhile are not frozen
        lost = sorted({name for component, i, name in found if (component, i) not in ended})
        if not lost:
            return None
        outcome = Outcome(JobState.NODE_FAIL, f"node(s) {','.join(lost)} lost (its step stopped answering)")
        outcome.cause, outcome.lost_nodes = "node_fail", lost
        return outcome

    def hung(self, launches: Sequence[Launch], snap: Snapshot, silence: int) -> list[str]:
        """The nodes the watchdog found hung, and those as silent by then."""
        hung = [r for r in snap.records.values() if r.error.startswith("hung")]
        if not hung:
            return []
        found = min(r.ended for r in hung)
        names = {r.node for r in hung}
        for launch in launches:
            for i in launch.nodes:
                last = last_output(step_alive_file(self.paths, launch.component, i))
                name = self.names.of(launch, i)
                # the liveness note is up to ALIVE_EVERY s old
                if last and found - last >= silence - ALIVE_EVERY - 1 and name is not None:
                    names.add(name)
        return sorted(names)

    def close(self) -> None:
        if self.beats is not None:
            self.beats.close()
