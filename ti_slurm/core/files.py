"""Writing and reading job files safely: atomic replacement, and no FIFO or device read by mistake."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from typing import BinaryIO


def write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename (safe when nodes race)."""
    tmp = f"{path}.tmp.{os.getpid()}.{os.uname().nodename}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:  # a full disk: no half-written file is left behind
        try:  # noqa: SIM105 (contextlib is not imported on the job path)
            os.unlink(tmp)
        except OSError:
            pass
        raise


def open_regular(path: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (a FIFO put in its place must not hang a reader)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path}: not a regular file")
    return os.fdopen(fd, "rb")
