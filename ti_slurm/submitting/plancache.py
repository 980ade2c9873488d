"""Plans kept for specs seen before: a ``submit`` or ``render`` of a spec file whose every input is as it was
last time takes the plan and script made then, and neither validates the spec again nor renders the template
(pydantic, yaml and jinja2 stay unimported: most of a submit's time).

The key is a digest of every input a plan is made from: the spec file's path and bytes, the current
directory, the site config's and the user config's paths and bytes, the environment ti-slurm and Slurm read
(``TI_SLURM_*``, ``SLURM_*``, ``PATH``, ``HOME``, ``XDG_*``), the Python running ti-slurm, the options
given, and ti-slurm itself (its version and the size and time of each of its source files). Any change
is a new key: the plan is made again, whole. Slurm's own answers are no input (the plan asks Slurm nothing;
the submit still checks the job fits its partition, each time). What planning checks on this machine (the
working directory, the job's Python, the input channels) is checked again on every use; when it no longer
holds, the plan is made again, and says why in its one line.

Only the plain case is kept: a spec file submitted through this machine's Slurm, no ``code:`` snapshot, no
pipeline, no cluster, host or sync, no node left out. Entries live in the user's private cache folder
(:func:`~ti_slurm.core.paths.runtime_dir`, ``plans/``, 0700), are read through no link, only when they
are this user's and no one else may write them, and one that does not parse as written is ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys

from ti_slurm.core.plan import JobPlan

FORMAT = 1
KEPT_MOST = 64  # entries kept; the oldest go first
MOST_BYTES = 4 << 20  # a larger input is no spec or config: planned (and refused) the whole way
ENV_PREFIXES = ("TI_SLURM_", "SLURM_", "XDG_")
ENV_NAMES = ("PATH", "HOME")
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class KeptPlan:
    """A plan and its script as made for an earlier submission, and the backend it went through."""

    __slots__ = ("backend", "plan", "script")

    def __init__(self, plan: JobPlan, script: str, backend: str) -> None:
        self.plan, self.script, self.backend = plan, script, backend

    def for_submission(self, submission: str) -> tuple[JobPlan, str]:
        """The plan and script of a new submission: the same but for its id (in the plan, and wherever the
        script says it: the plan's copy, the job's comment; a random id found nowhere else). A render's plan
        (no submission) is never submitted: a ``ValueError``."""
        if not self.plan.submission:
            raise ValueError("a plan kept by render has no submission to replace")
        return self.plan.replace(submission=submission), self.script.replace(self.plan.submission, submission)

    def still_holds(self) -> bool:
        """What planning checked on this machine still holds: the working directory, the job's Python, the
        input channels and the outputs folder."""
        plan = self.plan
        if not plan.workdir or not os.path.isdir(plan.workdir):
            return False
        if not os.path.isabs(plan.python) or not os.access(plan.python, os.X_OK):
            return False
        if not all(os.path.exists(path) for path in plan.inputs.values()):
            return False
        return not plan.outputs or not os.path.exists(plan.outputs) or os.path.isdir(plan.outputs)


def render_key(spec_path: str, python: str | None) -> str | None:
    """The key of ``render``'s plan of the spec file at ``spec_path`` (``--python``: ``python``)."""
    return key_of(spec_path, {"render": True, "python": python})


def kept_script(spec_path: str, python: str | None) -> tuple[str | None, str | None]:
    """``render``'s key for this spec file, and the script kept under it when every input is as it was then (None
    when there is none: the caller plans, and keeps what it renders under that key)."""
    key = render_key(spec_path, python)
    kept = recall(key) if key else None
    return key, kept.script if kept is not None and kept.still_holds() else None


def _fits(plan: JobPlan, script: str) -> bool:
    """Whether ``script`` is ``plan``'s as far as its submission goes: the plan's copy and the check of it (the
    plan's JSON spells it so twice), and its id random (16 hex digits: found nowhere else) or none (render)."""
    submission = plan.submission
    tagged = f'"submission":"{submission}"'
    random = len(submission) == 16 and all(c in "0123456789abcdef" for c in submission)
    return script.count(tagged) == 2 and (random or not submission)


def key_of(spec_path: str, options: dict[str, object]) -> str | None:
    """The digest of every input of a plan of the spec file at ``spec_path`` with ``options``; None when a file
    cannot be read (the full path then says why)."""
    from ti_slurm.core.paths import user_config_path
    from ti_slurm.core.site import DEFAULT_PATH

    digest = hashlib.sha256(f"ti-slurm plan {FORMAT}\0".encode())

    def add(*parts: object) -> None:
        for part in parts:
            digest.update(part if isinstance(part, bytes) else str(part).encode(errors="surrogateescape"))
            digest.update(b"\0")

    try:
        spec = os.path.abspath(spec_path)
        add("spec", spec, _read(spec), "cwd", os.getcwd(), "python", sys.executable)
        site = os.environ.get("TI_SLURM_CONFIG") or DEFAULT_PATH
        add("site", site, _read(site, missing_ok=True))
        user = user_config_path()
        add("user", user, _read(user, missing_ok=True))
    except OSError:
        return None
    for name in sorted(os.environ):
        if name.startswith(ENV_PREFIXES) or name in ENV_NAMES:
            add("env", name, os.environ[name])
    add("options", json.dumps(options, sort_keys=True, default=str), "code", code_stamp())
    return digest.hexdigest()


def code_stamp() -> str:
    """ti-slurm's version and the size and time of each of its source files: a change to any is another plan,
    even in a working tree whose version has not moved (132 files: under a millisecond)."""
    from ti_slurm.version import __version__

    parts = [__version__]
    for root, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".j2")):
                info = os.stat(os.path.join(root, name), follow_symlinks=False)
                parts.append(f"{os.path.relpath(root, PACKAGE)}/{name}:{info.st_size}:{info.st_mtime_ns}")
    return "\n".join(parts)


def _read(path: str, missing_ok: bool = False) -> bytes:
    """A regular file's bytes (a FIFO or a device in its place is an ``OSError``, never a hang)."""
    from ti_slurm.core.files import open_regular

    try:
        with open_regular(path) as fh:
            data = fh.read(MOST_BYTES + 1)
    except FileNotFoundError:
        if missing_ok:
            return b"(none)"
        raise
    if len(data) > MOST_BYTES:
        raise OSError(f"{path}: larger than any input kept plans are made of")
    return data


def plans_dir(make: bool = False) -> str | None:
    """The private folder of kept plans (None when there is none to be had)."""
    from ti_slurm.core.files import private_dir
    from ti_slurm.core.paths import runtime_dir

    base, refused = runtime_dir()
    if refused:
        return None
    folder = os.path.join(base, "plans")
    if not make and not os.path.isdir(folder):
        return None
    return None if private_dir(folder) else folder


def recall(key: str) -> KeptPlan | None:
    """The plan kept under ``key``; None when there is none, or one that is not this user's alone or does not
    read as written."""
    import stat

    folder = plans_dir()
    if folder is None:
        return None
    try:
        fd = os.open(os.path.join(folder, f"{key}.json"), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
                return None
            data = json.loads(fh.read())
        if data.get("format") != FORMAT or data.get("key") != key:
            return None
        plan = JobPlan.from_json(data["plan"])
        script, backend = data["script"], data["backend"]
        if not isinstance(script, str) or not isinstance(backend, str) or not _fits(plan, script):
            return None
        return KeptPlan(plan, script, backend)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def keep(key: str, plan: JobPlan, script: str, backend: str) -> None:
    """Keep ``plan`` and its ``script`` under ``key`` (at most :data:`KEPT_MOST` kept); a cache that cannot be
    written is no reason to fail a submit."""
    from ti_slurm.core.files import write_atomic

    if not _fits(plan, script):
        return
    folder = plans_dir(make=True)
    if folder is None:
        return
    data = {"format": FORMAT, "key": key, "backend": backend, "plan": plan.to_json(), "script": script}
    try:
        write_atomic(os.path.join(folder, f"{key}.json"), json.dumps(data), 0o600)
        _prune(folder)
    except OSError:
        pass


def _prune(folder: str) -> None:
    entries = [e for e in os.scandir(folder) if e.name.endswith(".json")]
    if len(entries) <= KEPT_MOST:
        return
    entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns)
    for entry in entries[: len(entries) - KEPT_MOST]:
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
