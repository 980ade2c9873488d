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


def make_inside(job_dir: str, path: str) -> None:
    """Make folder ``path`` (and its parents) when it is inside ``job_dir``, but never ``job_dir`` itself: a job
    directory deleted while the job runs stays deleted (``FileNotFoundError``), not made again open to all.
    A path outside the job directory (a checkpoint directory of the spec's) is made as asked."""
    inside = os.path.commonpath([os.path.abspath(path), os.path.abspath(job_dir)]) == os.path.abspath(job_dir)
    if inside and not os.path.isdir(job_dir):
        raise FileNotFoundError(2, "the job directory is gone (deleted while the job ran?)", job_dir)
    os.makedirs(path, exist_ok=True)


def open_regular(path: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (a FIFO put in its place must not hang a reader)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path}: not a regular file")
    return os.fdopen(fd, "rb")


def private_dir(path: str) -> str | None:
    """Make ``path`` a directory of this user's alone (0700), or find it one; ``None`` when it is, else why not:
    a line naming what is there (a symlink, another user's folder, one others may write), so that nothing
    another user planted there is written into or trusted. The last component is never followed."""
    import stat

    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:  # a parent that does not exist, or that this user cannot write (after su)
        return f"{path} cannot be created ({exc.strerror})"
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symlink; refusing to follow it"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory"
    if info.st_uid != os.getuid():
        return f"{path} belongs to uid {info.st_uid}, not to you (uid {os.getuid()}); remove it or use another folder"
    if info.st_mode & 0o077:
        return f"{path} has mode {stat.filemode(info.st_mode)}: others may read or write it; chmod 700 it"
    return None


def find_named(folder: str, mark: str, most: int) -> list[str]:
    """The regular files below ``folder`` whose names hold ``mark`` (at most ``most``, in name order; links not
    followed); [] when there is no such folder."""
    found: list[str] = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(root, name)
            if mark in name and os.path.isfile(path) and not os.path.islink(path):
                found.append(path)
                if len(found) >= most:
                    return found
    return found


def read_local_bytes(path: str, offset: int = 0, size: int | None = None) -> bytes | None:
    """A job file here from byte ``offset`` on (at most ``size`` bytes), reading nothing before it."""
    try:
        with open_regular(path) as fh:
            fh.seek(offset)
            return fh.read(-1 if size is None else size)
    except OSError:
        return None
