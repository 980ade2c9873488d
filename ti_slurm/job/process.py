"""Process helpers: start a process group, forward signals to it, stop it with grace.

Used by each node's step (the user's command), the supervisor and the local
backend (their steps), and Ray's node runtime (its daemons). Every process
that ti-slurm starts on behalf of a job runs in a process group of its own, so
stopping it stops everything it started, and nothing else.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Mapping, Sequence
    from types import FrameType
    from typing import IO


def exit_code(returncode: int) -> int:
    """A ``Popen`` return code as a shell reports it: killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def start_group(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    output: IO[bytes] | None = None,
    die_with_parent: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new process group (and session).

    With ``output``, stdout and stderr go there and stdin is closed; without
    it the process shares ours. With ``die_with_parent``, the process gets
    SIGTERM when this one dies, however it dies (Linux's parent-death signal).
    """
    import subprocess

    quiet = output is not None  # output to a file, no input
    return subprocess.Popen(
        list(argv),
        env=None if env is None else dict(env),
        cwd=cwd,
        stdout=output,
        stderr=subprocess.STDOUT if quiet else None,
        stdin=subprocess.DEVNULL if quiet else None,
        start_new_session=True,
        preexec_fn=_parent_death_signal() if die_with_parent else None,
    )


def _parent_death_signal() -> Callable[[], None]:
    """A ``preexec_fn`` that asks Linux to send SIGTERM to the child when its parent dies."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def arm() -> None:
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def signal_group(pid: int, signum: int) -> None:
    """Send ``signum`` to process group ``pid``; a group already gone is fine."""
    try:  # noqa: SIM105 (contextlib is not imported on the job path)
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


# a container runtime's own processes, by their argv[0] (they hold the image's filesystem: enroot's fuse-shim kills
# its squashfuse when it dies): the checkpoint signal is not for them
NOT_SIGNALLED = frozenset(("fuse-shim", "squashfuse", "squashfuse_ll", "fuse-overlayfs", "crun", "runc", "crun-slurm"))
TREE_EVERY = 2.0  # seconds between looks at a command's process tree


def run_command(
    argv: Sequence[str],
    env: Mapping[str, str],
    workdir: str | None,
    grace: float,
    guard: Callable[[int], int | None] | None = None,
    forward: Sequence[int] = (),
    started: Callable[[], None] | None = None,
) -> int:
    """Run ``argv`` (``bash -c command``, maybe through a container runtime) in its own process group
    and return its exit code.

    SIGTERM/SIGINT/SIGHUP are forwarded to the whole group and to every process
    the command started (looked at every :data:`TREE_EVERY` seconds, and kept
    once seen: in sessions of their own, as an OCI runtime starts the image's
    first process, and after their parent died); whatever is left ``grace``
    seconds later, or once the command has exited, is killed.

    The signals in ``forward`` (the checkpoint signal) go to the group and to
    every process the command started, even in sessions of their own (torch's
    launcher starts its workers so, and dies of SIGUSR2 itself): those
    processes may then outlive the command while they save, until a stop signal
    comes (and its grace passes). One that arrived before the command started
    (see :func:`remember_signals`) is passed on as it starts.

    ``guard``, called about twice a second with the command's pid (its process
    group) while it runs, may end it: when it returns an exit code, the group
    is stopped the same way and that code is returned. ``started`` is called
    once the command's process exists (the job's start timeline).
    """
    import signal

    tree = CommandTree(start_group(argv, env, workdir or None), grace)
    if started is not None:
        started()
    for signum in forward:
        signal.signal(signum, tree.pass_on)
        if signum in _early_signals:
            tree.pass_on(signum, None)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, tree.stop_on)
    try:
        code, forced = tree.wait(guard)
        tree.wait_for_savers()
    finally:
        tree.kill_all()  # nothing of the command outlives it
    return exit_code(code) if forced is None else forced


class CommandTree:
    """A running command's processes: its group, and every process it started once seen, while they run
    (pid -> start time, so a reused pid is never signalled). torch's launcher dies of the checkpoint signal,
    and an OCI runtime may die first; their children, in sessions of their own, are then no longer in the
    tree, but they are in this record of it."""

    def __init__(self, proc: subprocess.Popen[bytes], grace: float) -> None:
        self.proc, self.grace = proc, grace
        self.kill_at: float | None = None  # when what is left of a stopped command is killed
        self.saving: set[int] = set()  # the processes that got the checkpoint signal
        self.seen: dict[int, str] = {}

    def look(self, whole_group: bool = False) -> list[int]:
        """Note the command's processes now; return every one seen that still runs, oldest first (a process
        before those it started: a shell whose child saves and exits at once still gets its own signal before
        it can end). ``whole_group`` also finds members of the command's group whose parent is gone (a scan of
        all of /proc: for signals no killpg carries)."""
        for pid, started in list(self.seen.items()):
            if start_time(pid) != started:
                del self.seen[pid]  # gone: its pid may be reused
        for pid in (process_tree if whole_group else descendants)(self.proc.pid):
            if pid not in self.seen and command_name(pid) not in NOT_SIGNALLED:
                now = start_time(pid)
                if now is not None:
                    self.seen[pid] = now
        return sorted(self.seen, key=lambda pid: (int(self.seen[pid]), pid))

    def pass_on(self, signum: int, frame: FrameType | None) -> None:
        """The checkpoint signal: to the group too, but not to a container runtime's own processes."""
        pids = self.look(whole_group=True)
        self.saving.update(pids)
        for pid in pids:
            signal_pid(pid, signum)

    def stop(self, signum: int) -> None:
        signal_group(self.proc.pid, signum)
        for pid in self.look():
            signal_pid(pid, signum)
        if self.kill_at is None:
            self.kill_at = time.monotonic() + self.grace

    def stop_on(self, signum: int, frame: FrameType | None) -> None:
        _stop_signals.add(signum)
        self.stop(signum)

    def overdue(self) -> bool:
        return self.kill_at is not None and time.monotonic() > self.kill_at

    def kill_all(self) -> None:
        import signal

        signal_group(self.proc.pid, signal.SIGKILL)
        for pid in self.look():
            signal_pid(pid, signal.SIGKILL)

    def wait(self, guard: Callable[[int], int | None] | None) -> tuple[int, int | None]:
        """The command's exit status, and the code ``guard`` ended it with (None: it ended by itself)."""
        import signal
        import subprocess

        forced: int | None = None
        next_look = 0.0
        while True:
            try:
                return self.proc.wait(timeout=0.5), forced
            except subprocess.TimeoutExpired:
                if time.monotonic() >= next_look:
                    self.look()
                    next_look = time.monotonic() + TREE_EVERY
                if self.overdue():
                    self.kill_all()
                if guard is not None and forced is None:
                    forced = guard(self.proc.pid)
                    if forced is not None:
                        self.stop(signal.SIGTERM)

    def wait_for_savers(self) -> None:
        """Processes that got the checkpoint signal may outlive the command while they save (until stopped)."""
        while self.saving and any(alive(pid) for pid in self.saving - {self.proc.pid}):
            if self.overdue():
                break
            time.sleep(0.2)


def signal_pid(pid: int, signum: int) -> None:
    """Send ``signum`` to process ``pid``; a process already gone is fine."""
    try:  # noqa: SIM105 (contextlib is not imported on the job path)
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, ...); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None


def command_name(pid: int) -> str:
    """The name process ``pid`` was started as (its argv[0], without the directory); "" if it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv0 = fh.read().split(b"\0", 1)[0]
    except OSError:
        return ""
    return os.path.basename(argv0.decode(errors="replace"))


def process_tree(pid: int) -> list[int]:
    """Process ``pid``'s group and every process it started, down the tree (also in sessions of their own)."""
    children: dict[int, list[int]] = {}
    found = set()
    for entry in os.listdir("/proc"):
        fields = _stat(entry) if entry.isdigit() else None
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
            if int(fields[2]) == pid:
                found.add(int(entry))
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.add(child)
        todo.extend(children.get(child, []))
    return sorted(found)


def descendants(pid: int) -> list[int]:
    """Process ``pid`` and every process it started that still has its parent (sessions of their own too).

    Walks the kernel's ``/proc/<pid>/task/<tid>/children`` lists, so the cost grows with the command's
    own processes, not with every process on the machine (128 test nodes on one machine have
    thousands): what the node's step does every :data:`TREE_EVERY` seconds. Unlike
    :func:`process_tree` it misses group members whose parent is gone (``killpg`` reaches those).
    Kernels without those lists get :func:`process_tree`.
    """
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        return process_tree(pid) if os.path.exists(f"/proc/{pid}") else []
    found = {pid}
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue  # gone meanwhile
        for tid in threads:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as fh:
                    kids = [int(kid) for kid in fh.read().split()]
            except OSError:
                continue
            todo.extend(kid for kid in kids if kid not in found)
            found.update(kids)
    return sorted(found)


def become_subreaper() -> bool:
    """Make this process the one its descendants' orphans are handed to (Linux's PR_SET_CHILD_SUBREAPER):
    a command whose node step was killed (the OOM killer's SIGKILL) is still this process's to stop."""
    import ctypes

    try:
        return bool(ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0)  # 36: PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def parent_of(pid: int) -> int:
    """Process ``pid``'s parent (0 when it is gone)."""
    fields = _stat(pid)
    return int(fields[1]) if fields is not None else 0


def stop_trees(pids: Sequence[int], grace: float) -> None:
    """SIGTERM each process and all it started, SIGKILL what is left after ``grace`` seconds."""
    import signal

    tree = sorted({p for pid in pids for p in descendants(pid)})
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in tree:
            signal_pid(pid, signum)
        deadline = time.monotonic() + (grace if signum == signal.SIGTERM else 0)
        while any(alive(pid) for pid in tree) and time.monotonic() < deadline:
            time.sleep(0.05)


_early_signals: set[int] = set()
_stop_signals: set[int] = set()  # the stop signals a command of this process got (a cancel, a stop)


def stop_heard() -> bool:
    """Whether a stop signal (SIGTERM, SIGINT, SIGHUP) came while a command of this process ran."""
    return bool(_stop_signals)


def remember_signals(signals: Sequence[int]) -> None:
    """Until a command starts, note these signals instead of dying of them (their default action)."""
    import signal

    def note(signum: int, frame: FrameType | None) -> None:
        _early_signals.add(signum)

    for signum in signals:
        signal.signal(signum, note)


def terminate(proc: subprocess.Popen[bytes], grace: float, *, group: bool) -> None:
    """SIGTERM a process (or its process group), SIGKILL after ``grace`` seconds, reap it."""
    import signal

    def send(signum: int) -> None:
        if group:
            signal_group(proc.pid, signum)
        elif proc.poll() is None:
            proc.send_signal(signum)

    send(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if group or proc.poll() is None:
        send(signal.SIGKILL)
    proc.wait()


def start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``); ``None`` if it is gone.

    A pid together with its start time names one process: a pid alone may be reused.
    """
    fields = _stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _stat(pid)
    return fields is None or fields[0] != "Z"  # a stat we cannot read: it exists (kill said so)
