"""Finding a command's processes: the cheap walk every node does every 2 s, and the full scan for signals."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ti_slurm.job.process import descendants, process_tree


def wait_for(count: int, pid: int, *commands: bytes) -> None:
    """Until ``pid``'s tree has ``count`` processes and each of ``commands`` runs in it (a child between
    fork and exec still shows its parent's command line)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        tree = process_tree(pid)
        running = set()
        for p in tree:
            try:
                running.add(argv(p))
            except OSError:
                continue
        if len(tree) >= count and running.issuperset(commands):
            return
        time.sleep(0.05)


def argv(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()


def test_the_walk_finds_children_in_sessions_of_their_own_and_the_scan_also_orphans_of_the_group() -> None:
    # bash; a child; a child in a session of its own (as torch's launcher starts workers); and a
    # double-forked orphan, reparented away but still in the command's process group
    script = "sleep 300 & setsid sleep 301 & (sleep 302 &); wait"  # setsid execs sleep in a new session
    proc = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    try:
        wait_for(4, proc.pid, b"sleep 300", b"sleep 301", b"sleep 302")
        names = {pid: argv(pid) for pid in process_tree(proc.pid)}
        orphan = next(pid for pid, argv in names.items() if argv == b"sleep 302")
        assert sorted(names) == sorted([*descendants(proc.pid), orphan])
        assert {names[pid] for pid in descendants(proc.pid)} == {
            f"bash -c {script}".encode(),
            b"sleep 300",
            b"sleep 301",
        }
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_process_that_is_gone_has_no_tree() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert descendants(proc.pid) == [] and process_tree(proc.pid) == []


def test_the_checkpoint_signal_reaches_a_process_before_those_it_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shell whose child saves and exits at once must get its own signal while it still runs. The pids
    are chosen so that a set's order (12352 & 7 == 0 < 12347 & 7 == 3) would put the child first."""
    from ti_slurm.job import process

    parent, child = 12347, 12352
    started = {parent: "100", child: "101"}
    monkeypatch.setattr(process, "process_tree", lambda pid: [parent, child])
    monkeypatch.setattr(process, "start_time", started.get)
    monkeypatch.setattr(process, "command_name", lambda pid: "bash")
    sent: list[int] = []
    monkeypatch.setattr(process, "signal_pid", lambda pid, signum: sent.append(pid))
    tree = process.CommandTree(subprocess.Popen(["true"]), grace=1.0)
    tree.proc.wait()
    tree.proc.pid = parent  # the fake tree's root
    tree.pass_on(signal.SIGUSR2, None)
    assert sent == [parent, child]
