"""Answers from the controller kept a while, shared by this user's processes on this machine.

Each backend that asks a controller (the Slurm commands, slurmrestd) keeps its answers here: the queue
(``follow/queue.py`` reads it), the partitions (``sinfo``), the server's API versions. One private folder
per user (:func:`cache_dir`), one file per answer, written whole and never through a link.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable

_cache_warned: list[str] = []  # the cache directory already warned about (once per process)


def cache_dir() -> str | None:
    """A private per-user directory for the shared answers (``$XDG_RUNTIME_DIR`` or the temp dir), or ``None``
    when there is none to be had: the cache is only an optimisation, and one another user could write (a
    ``/tmp/ti-slurm-<uid>`` made first by someone else) would let them say what state a job is in."""
    from ti_slurm.core.paths import runtime_dir

    folder, refused = runtime_dir()
    if refused:
        _no_cache(refused)
        return None
    return folder


def _no_cache(why: str) -> None:
    """Say once per process that the shared cache is not used, and why."""
    if why not in _cache_warned:
        _cache_warned.append(why)
        print(f"ti-slurm: warning: {why}: asking the controller without the shared cache", file=sys.stderr)


def cache_key(backend: str, host: str, server: str = "") -> str:
    """The name of one controller's shared answers: by backend and host, and here by the Slurm config the
    commands read or the ``server`` the backend names (slurmrestd's URL, a cluster's slurm.conf): two clusters
    reached from one machine never share an answer."""
    key = f"{backend}-{host or 'here'}"
    conf = server or ("" if host else os.environ.get("SLURM_CONF", ""))
    if conf:
        import zlib

        key += f"-{zlib.crc32(conf.encode()):08x}"
    return key.replace("/", "_")


PARTITIONS_MAX_AGE = 300.0  # partitions change rarely: one sinfo answer serves every submit for this long


def shared_text(key: str, max_age: float, ask: Callable[[], str] | None) -> str | None:
    """An answer shared by this user's processes here: the cached one if at most ``max_age`` old,
    else ``ask()``'s, cached (``None`` when stale and ``ask`` is ``None``)."""
    folder = cache_dir()
    try:
        if folder is None:
            raise FileNotFoundError
        with open(os.path.join(folder, f"{key}.json"), encoding="utf-8") as fh:
            data = json.load(fh)
        if time.time() - float(data["time"]) <= max_age:
            return str(data["text"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if ask is None:
        return None
    text = ask()
    store_text(key, text)
    return text


def store_text(key: str, text: str) -> None:
    """Cache ``text`` as the current answer for ``key`` (see :func:`shared_text`)."""
    folder = cache_dir()
    if folder is not None:
        write_answer(os.path.join(folder, f"{key}.json"), {"time": time.time(), "text": text})


def write_answer(path: str, answer: dict[str, object]) -> None:
    """Write a shared answer whole (readers never see half of one), never through a link."""
    tmp = f"{path}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a leftover of a killed process with this pid
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "w") as fh:
        fh.write(json.dumps(answer))  # in one go: json.dump encodes chunk by chunk in Python
    os.replace(tmp, path)
