"""Staging, as ModelArts copies data before training: each input channel with ``stage: local`` is copied to
this node's local disk (the site's ``stage_dir``) before the command starts, so no rank meets the others in
``init_process_group`` while another is still copying; ``TI_SLURM_INPUT_<CHANNEL>`` names the copy. Every
node copies its own at once. A copy that fails ends the node before its command, naming the node and the
path; the node's copies are removed when its step ends, a cancel during the copy included. Standard library
only: this runs in job steps.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from ti_slurm.core.plan import JobPlan


CHUNK = 4 << 20  # bytes copied between two looks at the clock
REPORT_EVERY = 1.0  # seconds between two notes of how far the copy is


class Progress:
    """How far this node's copies are, noted in its progress file (``DONE TOTAL``, bytes) at most once a
    second; the supervisor gathers the nodes' notes into the job's record (``--wait`` shows them)."""

    def __init__(self, path: str, total: int) -> None:
        self.path, self.total, self.done, self.noted = path, total, 0, 0.0

    def add(self, n: int) -> None:
        self.done += n
        if time.monotonic() - self.noted >= REPORT_EVERY:
            self.note()

    def note(self) -> None:
        from ti_slurm.core.files import write_atomic

        self.noted = time.monotonic()
        try:  # noqa: SIM105 (contextlib is not imported on the job path)
            write_atomic(self.path, f"{self.done} {self.total}\n", 0o600)
        except OSError:
            pass  # progress is for people: never a reason to fail the copy

    def close(self) -> None:
        try:  # noqa: SIM105 (contextlib is not imported on the job path)
            os.unlink(self.path)
        except OSError:
            pass


def stage(plan: JobPlan, node: str, env: Mapping[str, str], progress_file: str) -> str | None:
    """Copy every staged channel to where this node's contract says it is; a problem as one line.

    The copies go below the user's own folder of the node's ``stage_dir``, which must be this user's alone:
    one another user made first (job ids are predictable) could swap a copy after it is made."""
    from ti_slurm.core.files import private_dir
    from ti_slurm.core.paths import stage_root

    refused = private_dir(stage_root(plan.stage_dir))
    if refused:
        return f"staging on {node}: cannot stage the inputs: {refused}"
    total = sum(size_of(plan.inputs[name]) for name in plan.staged)
    os.makedirs(os.path.dirname(progress_file), mode=0o700, exist_ok=True)
    progress = Progress(progress_file, total)
    progress.note()
    try:
        for name in plan.staged:
            source, target = plan.inputs[name], env[f"TI_SLURM_INPUT_{name.upper()}"]
            partial = f"{target}.part"
            try:
                shutil.rmtree(partial, ignore_errors=True)
                os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)

                def copy(src: str, dst: str) -> str:
                    return copy_counting(src, dst, progress)

                if os.path.isdir(source):
                    shutil.copytree(source, partial, symlinks=True, copy_function=copy)
                else:
                    copy(source, partial)
                os.replace(partial, target)
            except OSError as exc:
                shutil.rmtree(partial, ignore_errors=True)
                where = os.path.dirname(target)
                return f"staging on {node}: cannot copy input {name} ({source}) to {where}: {_why(exc)}"
    finally:
        progress.close()
    return None


@contextlib.contextmanager
def stops_unwind() -> Iterator[None]:
    """Within: a stop signal (a cancel, a requeue) raises SystemExit instead of killing the step at once, so
    the caller's ``finally`` removes the copies. It covers the whole staged run, not the copy alone: a cancel
    seen just as the copy ends, before the command's own signal forwarding is in place, would otherwise kill
    the step with its copies left on the node. The forwarding, once in place, stops the command instead."""
    import signal

    def stopped(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stopped) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _why(exc: OSError) -> str:
    """An error of a copy as one reason: copytree gathers one (source, target, why) per file that failed."""
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        failed = exc.args[0]
        first = failed[0]
        more = f" (and {len(failed) - 1} more file(s))" if len(failed) > 1 else ""
        return f"{first[0]}: {first[2]}{more}" if isinstance(first, tuple) and len(first) == 3 else str(first)
    return exc.strerror or str(exc)


def size_of(path: str) -> int:
    """The bytes a copy of ``path`` (a file, or a tree: its files, links not followed) writes."""
    if not os.path.isdir(path):
        return os.path.getsize(path) if os.path.exists(path) else 0
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += st.st_size if not os.path.islink(os.path.join(root, name)) else 0
    return total


def copy_counting(source: str, target: str, progress: Progress) -> str:
    """``shutil.copy2`` in chunks, each one counted in ``progress``."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        while chunk := src.read(CHUNK):
            dst.write(chunk)
            progress.add(len(chunk))
    shutil.copystat(source, target)
    return target


def unstage(plan: JobPlan, env: Mapping[str, str]) -> None:
    """Remove this node's staged copies (and the job's folder for them, once empty)."""
    for name in plan.staged:
        target = env[f"TI_SLURM_INPUT_{name.upper()}"]
        for path in (target, f"{target}.part"):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.unlink(path)
        for folder in (os.path.dirname(target), os.path.dirname(os.path.dirname(target))):  # node's, job's
            try:
                os.rmdir(folder)
            except OSError:
                break  # another channel's or another node step's copy is still there
