"""Each node's step says it is alive over the network too, not only through a file on shared storage.

A node is lost when its step left no exit record and stopped answering. Its liveness file
(``heartbeat/<component>-<n>.step``, rewritten every :data:`ALIVE_EVERY` seconds) is one channel; but
shared filesystems stall for tens of seconds under checkpoint load, and then every node's file is
late at once, though every node is healthy. So each node's step also sends a small UDP datagram
(:func:`start_beating`, a thread that touches no file) every :data:`BEAT_EVERY` second to the
supervisor's :class:`BeatListener`, on the node that ran ``srun`` (``SLURM_LAUNCH_NODE_IPADDR``;
127.0.0.1 for the local runner). A node is alive while either channel is fresh.

The listener's port and a per-attempt secret are in ``<job dir>/beat`` (``PORT TOKEN``; the job
directory is private): a datagram without the token, from an earlier attempt or anyone else, is
ignored. A node that cannot reach the listener (a firewall, IPv6 only) is judged by its file, as
before.

Standard library only: the node side runs in every job step.
"""

from __future__ import annotations

import contextlib
import os
import time

ALIVE_EVERY = 5.0  # seconds between a step's liveness notes in its file
BEAT_EVERY = 1.0  # seconds between its datagrams (some bytes a second: cheap even for thousands of nodes)
LOST_AFTER = 20.0  # a step silent this long on every channel, without an exit record, was lost
# ... or this long without a datagram, having sent them before, where a spare can take its place (a mistaken
# verdict then costs a restart on the spare; a stalled filesystem silences no datagram)
SWAP_AFTER = 3.0
_beating: set[tuple[str, str, int]] = set()  # (beat file, component, node) this process beats for: once each


class BeatListener:
    """The supervisor's end: the latest beat of each node (component name, node index)."""

    def __init__(self) -> None:
        import socket
        import threading

        self.token = os.urandom(12).hex()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("", 0))
        self.sock.settimeout(1.0)  # so that the receiving thread sees close() within a second
        self.closed = False
        self.latest: dict[tuple[str, int], float] = {}  # when each node's latest datagram was sent (its clock)
        self.received: dict[tuple[str, int], float] = {}  # ... and when it came (this clock: no skew)
        threading.Thread(target=self._receive, name="beats", daemon=True).start()

    def _receive(self) -> None:
        while not self.closed:
            try:
                self.note(self.sock.recv(512))
            except TimeoutError:
                continue
            except OSError:
                return

    @property
    def beat_file_text(self) -> str:
        """What ``<job dir>/beat`` holds for the nodes: ``PORT TOKEN``."""
        return f"{self.sock.getsockname()[1]} {self.token}\n"

    def note(self, data: bytes) -> None:
        """Take one datagram ``TOKEN COMPONENT INDEX TIME``; anything else is ignored."""
        parts = data.decode("ascii", errors="replace").split()
        if len(parts) != 4 or parts[0] != self.token or not parts[2].isdigit():
            return
        try:
            sent = min(float(parts[3]), time.time())  # queued while this process was busy: when it was sent
        except ValueError:
            return
        key = (parts[1], int(parts[2]))
        self.received[key] = time.time()
        if sent > self.latest.get(key, 0.0):
            self.latest[key] = sent

    def last(self, component: str, index: int) -> float:
        """When the node last said it was alive (0.0: never)."""
        return self.latest.get((component, index), 0.0)

    def last_received(self, component: str, index: int) -> float:
        """When the node's latest datagram came, by this machine's clock (0.0: never)."""
        return self.received.get((component, index), 0.0)

    def close(self) -> None:
        self.closed = True
        self.sock.close()


def start_beating(beat_file: str, host: str, component: str, index: int) -> None:
    """From now on, tell the supervisor every :data:`BEAT_EVERY` s that this step is alive (a daemon thread,
    which touches no file: a stalled filesystem does not silence it). Nothing when there is no listener."""
    if (beat_file, component, index) in _beating:  # a step that runs several commands (Ray's) beats once
        return
    try:
        with open(beat_file) as fh:
            port, token = fh.read().split()
        address = (host, int(port))
    except (OSError, ValueError):
        return
    _beating.add((beat_file, component, index))
    import threading

    def beat() -> None:
        import socket

        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        while True:
            with contextlib.suppress(OSError):  # the file still speaks for this step
                sock.sendto(f"{token} {component} {index} {time.time():.3f}".encode(), address)
            time.sleep(BEAT_EVERY)

    threading.Thread(target=beat, name="beat", daemon=True).start()
