"""A job's files read back through its backend: which log is whose, what a log gained, a failure's last lines,
the batch script's own output, what each node used. Only ever the end or the new part of a log is read (a log
may be gigabytes), a chunk at a time."""

from __future__ import annotations

from collections.abc import Iterator

from ti_slurm.backends.base import Backend, JobInfo
from ti_slurm.core.errors import ConfigError
from ti_slurm.core.paths import JobPaths, node_label
from ti_slurm.follow.status import JobStatus
from ti_slurm.follow.usage import NodeUsage

TAIL_BYTES = 64 * 1024  # what a failure's last lines are read from
LOG_CHUNK = 1 << 20  # logs are read (and sent over SSH) this much at a time


class JobFiles:
    """The files of job ``info``, reached through ``backend``."""

    def __init__(self, info: JobInfo, backend: Backend) -> None:
        self.info, self.backend = info, backend

    def log_files(
        self, status: JobStatus, node: str | None = None, attempt: int | None = None
    ) -> list[tuple[str, str]]:
        """(label, path) of each node's log; ``node`` picks one by its INDEX, its name or ``<component>-<n>``;
        ``attempt`` picks an earlier attempt of a requeued job (default: the latest)."""
        paths = JobPaths(status.job_dir)
        names = [name for comp in status.components for name in comp.nodes]
        if attempt is not None and (not status.attempts or attempt != status.attempts[-1].attempt):
            earlier = [a for a in status.attempts if a.attempt == attempt]
            if not earlier:
                numbers = ", ".join(str(a.attempt) for a in status.attempts) or "0"
                raise ConfigError("attempt", attempt, f"job {self.info.ref} has no such attempt (attempts: {numbers})")
            paths, names = paths.attempt(attempt), earlier[0].nodes
        files: list[tuple[str, str]] = []
        index = 0
        for comp in status.components:
            for n in range(len(comp.nodes)):
                name = names[index] if index < len(names) else "?"
                label = node_label(comp.name, n)
                if node is None or node in (label, name, str(index)):
                    files.append((f"{label} ({name})", paths.node_log(comp.name, n)))
                index += 1
        if node is not None and not files:
            why = f"no such node in job {self.info.ref} (use an INDEX, a node name or <component>-<n>)"
            raise ConfigError("node", node, why)
        return files

    def new_lines(self, path: str, offsets: dict[str, int], to_the_end: bool) -> Iterator[list[str]]:
        """What a log gained since ``offsets[path]``, a chunk at a time, in whole lines; a line still being
        written waits, unless ``to_the_end`` or it is longer than a chunk (then it comes in pieces, never read
        again)."""
        while True:
            start = offsets.get(path, 0)
            chunk = self.backend.read_bytes(path, start, LOG_CHUNK) or b""
            full = len(chunk) == LOG_CHUNK
            end = chunk.rfind(b"\n") + 1
            if (to_the_end and not full) or (full and end == 0):
                end = len(chunk)
            if end == 0:
                return
            offsets[path] = start + end
            yield chunk[:end].decode(errors="replace").splitlines()
            if not full:
                return

    def directory_gone(self) -> bool:
        """Whether the job's directory is gone (its plan, written at submit, is no longer there)."""
        return bool(self.info.job_dir) and self.backend.read_text(JobPaths(self.info.job_dir).plan) is None

    def add_batch_output(self, status: JobStatus, lines: int = 20) -> None:
        """Where the batch script's own output is, and its last lines (the job ended without a final record:
        the cause, say a Python without ti-slurm or a full disk, is there)."""
        path = self.backend.batch_log(JobPaths(self.info.job_dir))
        tail = self.last_lines(path, lines)
        if tail:
            status.batch_output, status.batch_tail = path, tail
            status.reason += f"; its batch output: {path}"

    def last_lines(self, path: str, lines: int) -> list[str]:
        """The last ``lines`` lines of a job file, from its last bytes only."""
        end = self.backend.read_end(path, TAIL_BYTES)
        return end[1].decode(errors="replace").splitlines()[-lines:] if end else []

    def failure_tail(self, status: JobStatus, lines: int = 20) -> str:
        """The last lines of the failed node's log (or, when no node failed, of the batch script's output),
        with the command that shows all of it ("" if none)."""
        if status.batch_tail and not status.failed:
            head = f"ti-slurm: last {len(status.batch_tail)} lines of {status.batch_output}:\n"
            return head + "".join(f"  | {line}\n" for line in status.batch_tail)
        comp, index = status.failed.get("component"), status.failed.get("index")
        if comp is None or index is None or not status.job_dir:
            return ""
        label = node_label(comp, index)
        tail = self.last_lines(JobPaths(status.job_dir).node_log(comp, index), lines)
        if not tail:
            return ""
        everything = f"ti-slurm logs {status.job_id} --node {label}"
        head = f"ti-slurm: last {len(tail)} lines of {label}.log (all of it: {everything}):\n"
        return head + "".join(f"  | {line}\n" for line in tail)

    def usage(self, status: JobStatus) -> list[NodeUsage]:
        """What each node of the latest attempt used, as sampled while it ran; nodes with no sample yet are left
        out."""
        paths = JobPaths(status.job_dir)
        found = []
        for comp in status.components:
            for n in range(len(comp.nodes)):
                usage = NodeUsage.parse(
                    node_label(comp.name, n), self.backend.read_text(paths.node_usage(comp.name, n))
                )
                if usage is not None:
                    found.append(usage)
        return found
