"""Reading the nodes' exit records: each record file is opened once, when it first appears.

A node's step writes its record once (atomically) when its command ends; a snapshot lists
``nodes/`` and opens only the names it has not read yet, so judging an exit costs one listing
of the folder however often it is asked (a 4096-node job: every exit, and every poll while a
background exit settles).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ti_slurm.core.events import NodeExit
from ti_slurm.core.paths import JobPaths, node_label
from ti_slurm.job.supervisor.judge import NodeKey, Snapshot
from ti_slurm.job.supervisor.launchers import Launch

FULL_DISK_BYTES = 1 << 20  # less free space than this where the job's files go: they could not be written


class NodeRecords:
    """The exit records of one attempt's nodes (``<job dir>/nodes/``)."""

    def __init__(self, paths: JobPaths) -> None:
        self.paths = paths
        self.records: dict[NodeKey, NodeExit] = {}
        self.read: set[str] = set()  # file names read (a damaged one too: it is not read again)

    def snapshot(self, launch: Launch | None = None) -> Snapshot:
        """The records as they are now: every node's, or only those of ``launch``'s nodes read anew (their
        files by name: no listing of the folder). The mapping is this reader's own, valid until the next
        snapshot."""
        if launch is not None:
            names = [f"{launch.component}.{i}.json" for i in launch.nodes]
        else:
            try:
                names = os.listdir(self.paths.nodes_dir)
            except OSError:
                names = []
        for name in names:
            if name in self.read or not name.endswith(".json"):  # not a record being written ("<name>.tmp.<pid>...")
                continue
            try:
                with open(os.path.join(self.paths.nodes_dir, name), encoding="utf-8") as fh:
                    record = NodeExit.from_json(fh.read())
            except OSError:
                continue  # gone meanwhile, or unreadable for now: tried again next time
            except ValueError:
                self.read.add(name)  # not a record
                continue
            self.read.add(name)
            self.records[(record.component, record.index)] = record
        return Snapshot(self.records, self.paths.root, full_disk(self.paths.root))


def full_disk(root: str) -> str:
    """Why job files could not be written, when it is that the job directory's filesystem is full."""
    try:
        fs = os.statvfs(root)
    except OSError:
        return ""
    if fs.f_bavail * fs.f_frsize >= FULL_DISK_BYTES and (fs.f_files == 0 or fs.f_favail > 0):
        return ""
    return f"the filesystem of {root} is full (ENOSPC: no space left on device)"


class StagingNotes:
    """The nodes' staging progress (:class:`ti_slurm.job.staging.Progress`' files), as one report that
    the supervisor records (a ``staging`` event) when it changed: node label -> [bytes done, bytes in all]."""

    def __init__(self, folder: str, event: Callable[..., None]) -> None:
        self.folder, self.event = folder, event
        self.last: dict[str, list[int]] = {}

    def note(self) -> None:
        """Record the report if it changed since the last one (``{}``: no node is copying any more)."""
        report = self.changed()
        if report is not None:
            self.event("staging", nodes=report)

    def changed(self) -> dict[str, list[int]] | None:
        """The report, when it differs from the last one."""
        try:
            names = os.listdir(self.folder)
        except OSError:
            names = []
        now: dict[str, list[int]] = {}
        for name in names:
            if ".tmp." in name:
                continue
            try:
                with open(os.path.join(self.folder, name)) as fh:
                    done, total = (int(x) for x in fh.read().split())
            except (OSError, ValueError):
                continue  # gone meanwhile, or being replaced
            now[name] = [done, total]
        if now == self.last:
            return None
        self.last = now
        return now


START_LOOK_EVERY = 0.5  # seconds between looks at the nodes' start notes while some are missing


class StartNotes:
    """When each node's step began and handed over its command (``nodes/<c>.<n>.started``, written by
    :meth:`ti_slurm.job.node.NodeRun.note_start`), recorded once as the attempt's ``running`` event:
    ``steps`` and ``commands`` [first, last] (seconds since the epoch), ``last`` the node whose command
    started last, ``all`` whether every node's did (false when the attempt ended first)."""

    def __init__(self, folder: str, expected: list[str], event: Callable[..., None]) -> None:
        self.folder, self.expected, self.event = folder, set(expected), event
        self.found: dict[str, tuple[float, float]] = {}
        self.recorded = not expected
        self.looked = 0.0

    def note(self, now: bool = False) -> None:
        """Look (at most every START_LOOK_EVERY s, unless ``now``: the attempt ends) and record the event once
        every expected node has started, or, at the end (``now``), what started so far."""
        import time

        if self.recorded or (not now and time.monotonic() - self.looked < START_LOOK_EVERY):
            return
        self.looked = time.monotonic()
        self.read()
        if self.found and (now or self.expected <= self.found.keys()):
            self.recorded = True
            last = max(self.found, key=lambda label: self.found[label][1])
            steps, commands = [t[0] for t in self.found.values()], [t[1] for t in self.found.values()]
            self.event(
                "running",
                steps=[min(steps), max(steps)],
                commands=[min(commands), max(commands)],
                last=last,
                all=self.expected <= self.found.keys(),
            )

    def read(self) -> None:
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        for name in names:
            component, _, n = name.removesuffix(".started").rpartition(".")
            label = node_label(component, n)
            if not name.endswith(".started") or label in self.found or label not in self.expected:
                continue
            try:
                with open(os.path.join(self.folder, name), encoding="utf-8") as fh:
                    step, handed = (float(x) for x in fh.read().split())
            except (OSError, ValueError):
                continue  # being written: looked at again next time
            self.found[label] = (step, handed)
