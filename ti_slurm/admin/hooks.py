"""Slurm Prolog/Epilog hooks for cluster admins (``ti-slurm-prolog``, ``ti-slurm-epilog``).

They run as root on every node of a job, so they trust nothing a user controls
(job name, comment, work dir), validate ``SLURM_JOB_ID``/``SLURM_JOB_USER``,
use absolute paths, never follow symlinks, finish within the site's time
bound, log to syslog (or the site's log file), and exit 0 on any trouble that
should not drain a node. The one deliberate non-zero exit: the Prolog finds an
RDMA port down on an RDMA partition and the site asked to drain such nodes.

- Prolog: creates ``<job_dir_base>/<job id>`` (owned by the job's user, mode
  0700), where the job's hostfile and agent go; checks RDMA ports.
- Epilog: stops what the job left behind (processes whose environment names
  this job: escaped Ray daemons, parameter servers, MPI daemons; never another
  job's) and removes the job directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import syslog
import time
from collections.abc import Mapping

from ti_slurm.core.site import SiteConfig, load_site_config

_JOB_ID = re.compile(r"[1-9][0-9]{0,9}")
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}\$?", re.I)
SCONTROL = "/usr/bin/scontrol"  # when no Slurm daemon runs the hook (a hand-run test)


def scontrol_path(pid: int | None = None, proc: str = "/proc") -> str:
    """The ``scontrol`` of the Slurm running this hook: ``bin/scontrol`` beside the ``slurmd`` or
    ``slurmstepd`` above this process (``/usr/sbin/slurmd`` -> ``/usr/bin/scontrol``, a Slurm in
    ``/opt/slurm`` -> ``/opt/slurm/bin/scontrol``), never one from ``PATH``; else :data:`SCONTROL`.
    A client of another Slurm version cannot talk to the controller (another authentication)."""
    pid = os.getppid() if pid is None else pid
    for _ in range(8):  # the hook may run under a shell or a wrapper
        try:
            exe = os.readlink(f"{proc}/{pid}/exe")
            with open(f"{proc}/{pid}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if os.path.basename(exe) in ("slurmd", "slurmstepd"):
            candidate = os.path.join(os.path.dirname(os.path.dirname(exe)), "bin", "scontrol")
            return candidate if os.access(candidate, os.X_OK) else SCONTROL
        if parent <= 1:
            break
        pid = parent
    return SCONTROL


class HookError(Exception):
    """A problem the hook logs and survives (exit 0)."""


class DrainNode(Exception):
    """The node must not run jobs: exit non-zero so Slurm drains it."""


def log(site: SiteConfig, message: str) -> None:
    """Append a line to ``log_file`` (a regular file only, opened without blocking), else to syslog."""
    line = f"ti-slurm {message}"
    if site.log_file:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK  # a FIFO must not block us
        try:
            fd = os.open(site.log_file, flags, 0o600)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.write(fd, f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n".encode())
                    return
            except OSError:
                pass  # a full /var/log: to syslog, and the hook goes on (a failing hook drains the node)
            finally:
                os.close(fd)
    syslog.syslog(syslog.LOG_NOTICE, line)


def job_identity(env: Mapping[str, str]) -> tuple[str, pwd.struct_passwd]:
    """The validated job id and the job's user; anything odd is a HookError."""
    job_id = env.get("SLURM_JOB_ID", "")
    if not _JOB_ID.fullmatch(job_id):
        raise HookError(f"refusing SLURM_JOB_ID={job_id[:40]!r}: not a job id")
    user = env.get("SLURM_JOB_USER", "")
    if not _USER.fullmatch(user):
        raise HookError(f"refusing SLURM_JOB_USER={user[:40]!r}: not a user name")
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise HookError(f"refusing SLURM_JOB_USER={user!r}: no such user") from None
    uid = env.get("SLURM_JOB_UID")
    if uid is not None and uid != str(entry.pw_uid):
        raise HookError(f"SLURM_JOB_UID={uid[:12]!r} does not match user {user}")
    return job_id, entry


def safe_base(site: SiteConfig) -> str:
    """The root-owned base of job directories; created 0755 when missing, refused when unsafe."""
    base = site.job_dir_base
    if not os.path.isabs(base):
        raise HookError(f"job_dir_base {base!r} is not an absolute path")
    os.makedirs(base, mode=0o755, exist_ok=True)
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
        raise HookError(f"{base} must be a directory owned by root and writable by root only")
    return base


def remove_path(path: str) -> None:
    """Remove a file, symlink (not its target) or directory tree, never following symlinks."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)  # fd-based on Linux: does not follow symlinks inside
    else:
        os.unlink(path)


def remove_staged(stage_dir: str, user: pwd.struct_passwd, job_id: str) -> None:
    """Remove the job's staged copies in the user's folder of ``stage_dir``, reached without following a
    symlink: another user may have put one where that folder goes (``/tmp/ti-slurm-<uid>`` -> the user's
    output folder), and root must not delete through it. A folder that is not the user's is left alone."""
    from ti_slurm.core.paths import stage_root

    try:
        top = os.open(stage_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        name = os.path.basename(stage_root(stage_dir, user.pw_uid))
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
        except OSError:  # missing, or not a real directory (a planted symlink)
            return
        try:
            if os.fstat(fd).st_uid != user.pw_uid:
                return
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(job_id, dir_fd=fd)  # fd-based: no symlink inside is followed either
        finally:
            os.close(fd)
    finally:
        os.close(top)


def made_by_a_prolog(path: str, user: pwd.struct_passwd) -> bool:
    """Whether ``path`` is this job's directory as a Prolog makes it: a real directory, private, owned by root
    (just made) or by the job's user. On a shared ``job_dir_base`` each node's Prolog of the job meets the
    one the first made; only root can write the base, so nobody else can have put it there."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid in (0, user.pw_uid) and not info.st_mode & 0o077


def make_job_dir(site: SiteConfig, job_id: str, user: pwd.struct_passwd) -> str:
    base = safe_base(site)
    path = os.path.join(base, job_id)
    if not made_by_a_prolog(path, user):
        remove_path(path)  # whatever was planted there (a symlink, another user's dir) goes, its target untouched
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:  # another node's Prolog of this job made it meanwhile (a shared base)
            if not made_by_a_prolog(path, user):
                raise
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchown(fd, user.pw_uid, user.pw_gid)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def rdma_port_problems(site: SiteConfig, node: str) -> list[str]:
    """Ports of the site's RDMA devices that are not ACTIVE, or devices that are missing."""
    from ti_slurm.job.rdma import port_problems

    return port_problems(site.sysfs_root.replace("{node}", node), list(site.rdma_devices))


def drain(node: str, reason: str, timeout: float) -> None:
    """Drain this node with a reason that names the device (Slurm alone would say 'Prolog error')."""
    subprocess.run(
        [scontrol_path(), "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"],
        timeout=timeout,
        check=False,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin"},
    )


def prolog(env: Mapping[str, str], site: SiteConfig) -> int:
    job_id, user = job_identity(env)
    path = make_job_dir(site, job_id, user)
    log(site, f"prolog: job {job_id}: created {path} for {user.pw_name}")
    partition = env.get("SLURM_JOB_PARTITION", "")
    node = env.get("SLURMD_NODENAME", "")
    if partition in site.rdma_partitions and site.rdma_devices:
        problems = rdma_port_problems(site, node)
        if problems:
            reason = f"ti-slurm prolog: RDMA {', '.join(problems)}"
            log(site, f"prolog: job {job_id} on {node}: {reason}")
            if site.rdma_check == "drain":
                drain(node, reason[:120], min(10.0, site.hook_timeout / 2))
                raise DrainNode(reason)
    return 0


def job_processes(job_id: str, uid: int, node: str = "") -> list[int]:
    """PIDs of user ``uid`` whose environment says they belong to ``job_id`` (also as a het job component).

    Only the job's user's processes: an environment is the user's to write, so
    another user's process naming this job id is not this job's. With ``node``
    (the Epilog's ``SLURMD_NODENAME``), not those whose environment names another
    node: several slurmd may share one process table (``--enable-multiple-slurmd``,
    the test cluster), and one node's Epilog must not kill the job's steps that are
    still ending on another.
    """
    pids = []
    needles = (f"SLURM_JOB_ID={job_id}".encode(),)
    own_node = f"SLURMD_NODENAME={node}".encode()
    het = re.compile(rb"SLURM_JOB_ID_HET_GROUP_\d+=" + re.escape(job_id.encode()))
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as fh:
                names = fh.read().split(b"\0")
        except OSError:
            continue
        if any(n in (b"SLURM_SCRIPT_CONTEXT=prolog_slurmd", b"SLURM_SCRIPT_CONTEXT=epilog_slurmd") for n in names):
            continue  # a Prolog/Epilog (of this job, on another node sharing this process table): not a leftover
        # (a site's TaskProlog leaves SLURM_SCRIPT_CONTEXT=prolog_task in every task: those are the job's)
        if node and any(n.startswith(b"SLURMD_NODENAME=") and n != own_node for n in names):
            continue  # the job's, on another node that shares this process table
        if any(n in needles for n in names) or any(het.fullmatch(n) for n in names):
            pids.append(int(entry))
    return pids


def epilog(env: Mapping[str, str], site: SiteConfig) -> int:
    job_id, user = job_identity(env)
    leftovers = job_processes(job_id, user.pw_uid, env.get("SLURMD_NODENAME", ""))
    for pid in leftovers:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if leftovers:
        log(site, f"epilog: job {job_id}: killed {len(leftovers)} leftover process(es)")
    node = env.get("SLURMD_NODENAME", "")
    if site.drain_blamed_nodes and node:
        reason = blame_here(job_id, user.pw_uid, node)
        if reason:
            log(site, f"epilog: job {job_id} on {node}: draining: {reason}")
            drain(node, reason, min(10.0, site.hook_timeout / 2))
    base = safe_base(site)
    remove_path(os.path.join(base, job_id))
    remove_staged(site.stage_dir, user, job_id)  # what the job's steps staged on this node (a killed step's stays)
    log(site, f"epilog: job {job_id}: cleaned")
    return 0


RECORD_TAIL = 1 << 20  # the end of a job's record the Epilog reads (its last attempt's end is there)


def blame_here(job_id: str, uid: int, node: str) -> str:
    """Slurm's drain reason when the job's last attempt blamed ``node`` (``drain_blamed_nodes``: a GPU fault, a
    step Slurm could not start, a filesystem error, the root of an NCCL cascade), else "". The record is the
    job's own: found through Slurm's StdOut of the job, a regular file of the job's user, read without following
    a link; the reason holds only the cause's word and the job's id, never the record's text."""
    from ti_slurm.core.causes import CAUSES, blamed_node
    from ti_slurm.core.events import parse_events
    from ti_slurm.core.paths import JobPaths
    from ti_slurm.slurm.text import output_dir, show_job_records

    done = subprocess.run([scontrol_path(), "-o", "show", "job", job_id], capture_output=True, text=True,
                          timeout=10, check=False, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    records = show_job_records(done.stdout) if done.returncode == 0 else []
    folder = output_dir(records[0]) if records else None
    if not folder:
        return ""
    try:
        fd = os.open(JobPaths.of(folder, job_id).status, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != uid:
            return ""
        fh.seek(max(0, info.st_size - RECORD_TAIL))
        text = fh.read(RECORD_TAIL).decode(errors="replace")
    ends = [e for e in parse_events(text) if e.get("event") == "end"]
    if not ends:
        return ""
    cause, evidence = str(ends[-1].get("cause") or ""), ends[-1].get("evidence")
    if cause not in CAUSES or not isinstance(evidence, dict) or blamed_node(cause, evidence) != node:
        return ""
    return f"ti-slurm: {cause} in job {job_id}"


def run_hook(name: str) -> int:
    """Entry point: never a traceback, exit 0 unless the node must drain."""
    timeout = [SiteConfig().hook_timeout]  # until the site config says otherwise: reading it is bounded too

    def out_of_time(signum: int, frame: object) -> None:
        raise HookError(f"timed out after {timeout[0]}s")

    signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(timeout[0])
    try:
        site = load_site_config()
    except Exception as exc:
        syslog.syslog(syslog.LOG_ERR, f"ti-slurm {name}: site config: {exc}")
        signal.alarm(0)
        return 0
    timeout[0] = max(1, int(site.hook_timeout))
    signal.alarm(timeout[0])
    try:
        return (prolog if name == "prolog" else epilog)(os.environ, site)
    except DrainNode:
        return 1
    except Exception as exc:  # log, never drain a node by accident
        log(site, f"{name}: {exc}")
        return 0
    finally:
        signal.alarm(0)


def prolog_main() -> None:
    sys.exit(run_hook("prolog"))


def epilog_main() -> None:
    sys.exit(run_hook("epilog"))
