"""Finding a command's processes: the cheap walk every node does every 2 s, and the full scan for signals."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from ti_slurm.job.process import descendants, process_tree


def wait_for(count: int, pid: int) -> None:
    deadline = time.monotonic() + 10
    while len(process_tree(pid)) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def argv(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()


def test_the_walk_finds_children_in_sessions_of_their_own_and_the_scan_also_orphans_of_the_group() -> None:
    # bash; a child; a child in a session of its own (as torch's launcher starts workers); and a
    # double-forked orphan, reparented away but still in the command's process group
    script = "sleep 300 & setsid sleep 301 & (sleep 302 &); wait"  # setsid execs sleep in a new session
    proc = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    try:
        wait_for(4, proc.pid)
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
