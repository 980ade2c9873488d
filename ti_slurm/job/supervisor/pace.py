"""Stragglers: a node whose training steps come 30% or more slower than the median node's, for a while.

Each node's command writes its step to ``TI_SLURM_PROGRESS_FILE`` (the watchdog's progress). The supervisor looks
at those files every few seconds (:meth:`StepPace.look`: one ``stat`` a node, a read when it changed) and keeps
each node's (time, step) samples over the window (the spec's ``watchdog: {straggler: SECONDS}``, 300 by default).
Once a node has been seen for the whole window, its pace is its seconds a step over the window; a node whose steps
take :data:`SLOWER` times the median of the other nodes' or longer is a straggler, said once an attempt as a
``straggler`` warning event with its node (it is not stopped: a node that stopped stepping is the hang watchdog's).
Standard library only.
"""

from __future__ import annotations

import os

from ti_slurm.core.causes import step_number

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping

SLOWER = 1.3  # a node whose steps take this many times the median node's (or longer) is a straggler
LOOK_EVERY = 5.0  # seconds between looks at the nodes' progress files


class StepPace:
    """The nodes' training steps over the last ``window`` seconds (``files``: node label -> its progress file)."""

    def __init__(self, files: Mapping[str, str], window: float, since: float) -> None:
        self.files, self.window, self.since = dict(files), window, since
        self.samples: dict[str, list[tuple[float, float]]] = {node: [] for node in files}
        self.changed: dict[str, float] = {}
        self.said: set[str] = set()
        self.next_look = 0.0

    def look(self, now: float) -> list[dict[str, object]]:
        """Note each node's step; the stragglers found now (each once): node, its seconds a step, the median's."""
        if now < self.next_look:
            return []
        self.next_look = now + LOOK_EVERY
        for node, path in self.files.items():
            self.note(node, path, now)
        return self.stragglers(now)

    def note(self, node: str, path: str, now: float) -> None:
        try:
            changed = os.stat(path).st_mtime
        except OSError:
            return
        if changed < self.since or changed == self.changed.get(node):
            return
        self.changed[node] = changed
        try:
            with open(path) as fh:
                step = step_number(fh.read(64))
        except OSError:
            return
        samples = self.samples[node]
        if step is not None and (not samples or step != samples[-1][1]):
            samples.append((changed, step))  # when the command wrote it: exact whatever the looks' period
            while len(samples) > 2 and samples[1][0] <= now - self.window:  # keep one at or before the window
                samples.pop(0)

    def seconds_a_step(self, node: str, now: float) -> float | None:
        """A node's seconds per step over the window (None before it has been seen that long, or when it did not
        step: a stop is the hang watchdog's)."""
        samples = self.samples[node]
        if len(samples) < 2 or samples[0][0] > now - self.window:
            return None
        (t0, s0), (t1, s1) = samples[0], samples[-1]
        return (t1 - t0) / (s1 - s0) if s1 > s0 else None

    def stragglers(self, now: float) -> list[dict[str, object]]:
        """Each node against the median of the others (two nodes: each against the other)."""
        paces = {node: pace for node in self.files if (pace := self.seconds_a_step(node, now)) is not None}
        found = []
        for node, pace in sorted(paces.items()):
            others = sorted(p for other, p in paces.items() if other != node)
            if not others or node in self.said:
                continue
            half = len(others) // 2
            median = others[half] if len(others) % 2 else (others[half - 1] + others[half]) / 2
            if pace >= SLOWER * median:
                self.said.add(node)
                found.append({"node": node, "seconds_a_step": round(pace, 3), "others": round(median, 3),
                              "window": self.window})  # fmt: skip
        return found
