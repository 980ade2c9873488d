"""Every node's Python stacks at a hang, grouped by identical stack so the odd node stands out.

When the watchdog finds a node hung, that node's step asks every node for its stacks (a file each node's step looks
at, as it does for stop requests), prints its command's stacks to its log (``py-spy dump`` where installed, else
faulthandler: :func:`ti_slurm.job.watch.dump_stacks`) and waits for the others' before it ends (srun ends the
other tasks once one exits). The supervisor (or, for a hang it found itself, it alone) asks too
(:func:`gather_stacks`), reads each node's last dump from its log (:func:`stack_of`: both tools' formats, file
paths cut to their last part, thread ids dropped) and prints one short block (:func:`grouped_stacks`): the groups
of nodes with the same stack, the smallest first, the node that stopped stepping first named. Standard library
only: this runs in the job.
"""

from __future__ import annotations

import os
import re

from ti_slurm.job.watch import STACKS_MARK, log_end, wait_for_stacks, write_request

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

FRAMES_SHOWN = 8  # innermost frames shown per thread

# faulthandler: '  File "/x/train.py", line 30 in step'; py-spy: '    step (train.py:30)'
_FAULTHANDLER_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_PY_SPY_FRAME = re.compile(r"^\s+(?P<func>\S+) \((?P<file>[^()]+):(?P<line>\d+)\)\s*$")
# a thread's header: faulthandler's 'Thread 0x00007f... (most recent call first):', 'Current thread 0x...';
# py-spy's 'Thread 4242 (idle): "MainThread"'; a process's: py-spy's 'Process 4242: python train.py'
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+|\d+)")
_PROCESS = re.compile(r"^(Process \d+:|Fatal Python error)")

Stack = tuple[tuple[str, ...], ...]  # a node's threads (each its frames, innermost first), in a stable order


def stack_of(text: str) -> Stack | None:
    """The threads of the last dump in a node's log (None when it holds none): each thread's frames as
    ``file:line in func`` (the file's last part), innermost first; the threads sorted, so two nodes in the same
    place have equal stacks whatever their thread ids and the order the tool printed them in."""
    at = text.rfind(STACKS_MARK)
    if at < 0:
        return None
    threads: list[tuple[str, ...]] = []
    frames: list[str] = []
    for line in text[at:].splitlines()[1:]:
        if _THREAD.match(line) or _PROCESS.match(line):
            if frames:
                threads.append(tuple(frames))
            frames = []
            continue
        found = _FAULTHANDLER_FRAME.match(line) or _PY_SPY_FRAME.match(line)
        if found:
            frames.append(f"{os.path.basename(found['file'])}:{found['line']} in {found['func']}")
    if frames:
        threads.append(tuple(frames))
    return tuple(sorted(threads))


def grouped_stacks(stacks: Mapping[str, Stack | None], first: str = "") -> list[str]:
    """The lines of one block: the nodes grouped by identical stack, the smallest group (the odd one) first;
    ``first``: the node that stopped stepping first, named. Nodes that printed no stack are said apart."""
    groups: dict[Stack, list[str]] = {}
    for node, stack in stacks.items():
        if stack is not None:
            groups.setdefault(stack, []).append(node)
    silent = sorted(node for node, stack in stacks.items() if stack is None)
    lines = [f"the Python stacks of {len(stacks)} node(s) at the hang, grouped ({len(groups)} different):"]
    for stack, nodes in sorted(groups.items(), key=lambda group: (len(group[1]), group[1] != [first], group[1])):
        marks = " (stopped stepping first)" if first in nodes else ""
        lines.append(f"  {len(nodes)} node(s): {', '.join(sorted(nodes))}{marks}")
        if not stack:
            lines.append("    (no Python process)")
        for k, thread in enumerate(stack):
            lines.append(f"    thread {k + 1}:")
            lines.extend(f"      {frame}" for frame in thread[:FRAMES_SHOWN])
            if len(thread) > FRAMES_SHOWN:
                lines.append(f"      ... {len(thread) - FRAMES_SHOWN} more")
    if silent:
        lines.append(f"  no stack printed: {', '.join(silent)}")
    return lines


def gather_stacks(
    path: str, attempt: int, logs: Mapping[str, str], running: Sequence[str], first: str = ""
) -> list[str]:
    """Ask every node for its stacks, wait for those still ``running`` (the node that hung asked the others before
    it ended: srun may have ended them since), and return the grouped block (``logs``: node -> its log)."""
    write_request(path, attempt)
    wait_for_stacks([logs[node] for node in running])
    return grouped_stacks({node: stack_of(log_end(log)) for node, log in logs.items()}, first)
