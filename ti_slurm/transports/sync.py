"""Uploading a directory's changed files over an SSH session (``submit --sync``)."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import Any

from ti_slurm.core.errors import BackendError
from ti_slurm.transports.ssh import SSHSession


def sync_tree(session: SSHSession, local: str, remote: str, excludes: Sequence[str] = ()) -> int:
    """Upload files of ``local`` that differ (size or mtime) from ``remote``; return how many went.

    Only regular files travel (a link to one, as its content): a FIFO, a socket or a link that points
    nowhere (an editor's ``.#file`` lock) is skipped, and so is a file this user cannot read, with one
    warning naming them. A remote directory or file that cannot be written is one line."""
    import fnmatch

    if session._client is None:
        session.connect()
    skip = [".git", "__pycache__", "*.pyc", ".venv", "ti-slurm-jobs", *excludes]
    sftp = session._client.open_sftp()
    sent, skipped = 0, []
    dst = remote
    try:
        for root, dirs, files in os.walk(local):
            dirs[:] = [d for d in dirs if not any(fnmatch.fnmatch(d, pat) for pat in skip)]
            rel = os.path.relpath(root, local)
            target_dir = dst = remote if rel == "." else f"{remote}/{rel}"
            try:
                sftp.stat(target_dir)
            except OSError:
                _sftp_makedirs(sftp, target_dir)
            for name in files:
                if any(fnmatch.fnmatch(name, pat) for pat in skip):
                    continue
                src, dst = os.path.join(root, name), f"{target_dir}/{name}"
                try:
                    st = os.stat(src)
                except OSError:
                    st = None
                if st is None or not stat.S_ISREG(st.st_mode) or not os.access(src, os.R_OK):
                    skipped.append(os.path.relpath(src, local))
                    continue
                try:
                    rst = sftp.stat(dst)
                    if rst.st_size == st.st_size and int(rst.st_mtime or 0) == int(st.st_mtime):
                        continue
                except OSError:
                    pass
                sftp.put(src, dst)
                sftp.utime(dst, (st.st_atime, st.st_mtime))
                sftp.chmod(dst, stat.S_IMODE(st.st_mode))
                sent += 1
    except OSError as exc:  # the remote side refused (paramiko raises these as IOError/OSError)
        why = exc.strerror or str(exc) or type(exc).__name__
        where = f"{dst} on {session.target.alias}"
        raise BackendError(f"--sync: cannot write {where}: {why} ({sent} file(s) sent before)") from None
    finally:
        sftp.close()
    if skipped:
        import warnings

        shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
        warnings.warn(f"--sync skipped what is not a readable regular file: {shown}", RuntimeWarning, stacklevel=2)
    return sent


def _sftp_makedirs(sftp: Any, path: str) -> None:
    parts = path.split("/")
    for i in range(1, len(parts) + 1):
        sub = "/".join(parts[:i])
        if not sub:
            continue
        try:
            sftp.stat(sub)
        except OSError:
            sftp.mkdir(sub)
