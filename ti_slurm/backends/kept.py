"""Backends kept for a long-lived caller: within :func:`keep_backends` (the console, for its life), every way of
reaching a cluster (a backend and login node, a ``[[cluster]]`` table) is opened once and shared by every thread,
so a hundred requests over ``--host`` are one SSH session, and slurmrestd one kept-alive connection. Outside it
(every CLI command), each call opens its own, as before: a command lives for one answer."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import TypeVar

B = TypeVar("B")

_lock = threading.Lock()
_kept: dict[Hashable, object] | None = None


@contextlib.contextmanager
def keep_backends() -> Iterator[None]:
    """Within: :func:`kept_backend` opens each backend once; on leaving, their connections are closed."""
    global _kept
    _kept = {}
    try:
        yield
    finally:
        with _lock:
            held, _kept = _kept, None
        for backend in held.values():
            close = getattr(backend, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()


def kept_backend(key: Hashable, make: Callable[[], B]) -> B:
    """The backend ``key`` names: made by ``make``, once while :func:`keep_backends` holds (then shared)."""
    if _kept is None:
        return make()
    with _lock:
        if _kept is None:
            return make()
        if key not in _kept:
            _kept[key] = make()  # no connection yet: each backend connects on its first use
        return _kept[key]  # type: ignore[return-value]  # made by the caller's make for this key
