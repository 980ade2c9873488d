"""Ports: is one free here, does one accept connections. Standard library only (the job path).

The local runner picks job numbers whose ports are free, each node's
preflight checks the ports it will listen on, and DDP's and Ray's nodes wait
for the master's (head's) port.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Callable


def port_is_free(port: int) -> bool:
    """Whether a server could listen on ``port`` on every address right now (IPv4 and, where there is one, IPv6).

    Servers such as torch's TCPStore bind the wildcard address, which fails when
    anything holds the port on any address. Uses the C module ``_socket``:
    ``socket`` would import ``enum``, 9 ms more on every node.
    """
    import _socket

    try:
        sock = _socket.socket(_socket.AF_INET6, _socket.SOCK_STREAM)
        sock.setsockopt(_socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY, 0)  # one bind covers IPv4 too
        address: tuple[str, int] = ("::", port)
    except OSError:  # no IPv6 on this machine
        sock, address = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM), ("0.0.0.0", port)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        return False
    finally:
        sock.close()
    return True


def port_accepts(addr: str, port: int, timeout: float) -> bool:
    """Whether ``addr:port`` accepts a TCP connection now (within ``timeout`` seconds)."""
    import socket

    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(addr: str, port: int, timeout: float, give_up: Callable[[], bool] | None = None) -> bool:
    """Poll until ``addr:port`` accepts a TCP connection, or the timeout passes (or ``give_up()`` says so)."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        if port_accepts(addr, port, min(2.0, timeout)):
            return True
        if time.monotonic() + delay > deadline or (give_up is not None and give_up()):
            return False
        time.sleep(delay)
        delay = min(delay * 2, 1.0)
