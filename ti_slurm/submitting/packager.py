"""What code travels: a snapshot of the job's code directory, taken when ``submit`` runs.

Every node of every attempt (requeues included) runs the snapshot, whatever happens to the directory
afterwards. Snapshots live in ``<output_dir>/.ti-slurm-code-<uid>/``, shared by all the jobs of that user in
that output directory, private to the user (0700; a folder there that is not theirs alone is refused, never
trusted: on a shared output directory another user could otherwise plant a tree the job would run):

    objects/<sha256>[.x]        each file's content once (``.x``: executable), read-only, the user's alone
    trees/<tree hash>/<name>/   one snapshot: hard links to the objects, ``<name>`` the code folder's name
    index.json                  path -> (size, mtime, inode, sha256, when hashed): files unchanged since the last
                                snapshot are not read again

so the tenth submit of an unchanged tree only lists and stats its files. The files are those git would
take in a checkout (tracked, and untracked but not ignored: ``.gitignore`` applies), else every file;
``.git``, caches and the job output directory are always out, and so is what ``code_ignore`` matches
(``fnmatch`` patterns on the path relative to the code directory, or on any of its names).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import stat
import subprocess
import time
import uuid
from dataclasses import dataclass

from ti_slurm.core.errors import SpecError
from ti_slurm.core.files import private_dir, write_atomic
from ti_slurm.core.plan import JobPlan

STORE = ".ti-slurm-code"  # <output_dir>/.ti-slurm-code-<uid>: see store_of
ALWAYS_OUT = (".git", "__pycache__", "*.pyc", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints")
MAX_BYTES = 1 << 30  # a code directory above 1 GiB is data: give it as an input, or leave it out


@dataclass(frozen=True)
class Snapshot:
    """One captured code directory."""

    path: str  # the captured tree (``trees/<tree>/<name>``): where the command runs
    tree: str  # sha256 over every file's path, mode and content
    files: int
    size: int  # bytes
    commit: str = ""  # git's HEAD, when the code directory is in a checkout
    dirty: bool = False  # the checkout had changes not committed


def snapshot_plan(plan: JobPlan, code: str, ignore: tuple[str, ...] = ()) -> JobPlan:
    """``plan`` running from a snapshot of ``code`` taken now: its workdir the same folder in the snapshot."""
    code_dir = os.path.abspath(os.path.expanduser(code))
    shot = take(code_dir, plan.output_dir, ignore)
    workdir = os.path.normpath(os.path.join(shot.path, os.path.relpath(plan.workdir or code_dir, code_dir)))
    return plan.replace(
        workdir=workdir, code_dir=shot.path, code_tree=shot.tree, code_commit=shot.commit, code_dirty=shot.dirty
    )


def take(code_dir: str, output_dir: str, ignore: tuple[str, ...] = (), limit: int = MAX_BYTES) -> Snapshot:
    """Capture ``code_dir`` (see the module's text); a :class:`SpecError` names a tree that is too big."""
    store = store_of(output_dir)
    skip = (*ALWAYS_OUT, *ignore)
    out = os.path.relpath(output_dir, code_dir)
    files = [rel for rel in listed(code_dir) if not excluded(rel, skip) and not inside(rel, out)]
    # git lists a tracked file deleted from the work tree: it is not in the snapshot
    entries = [
        (rel, os.lstat(os.path.join(code_dir, rel))) for rel in files if os.path.lexists(os.path.join(code_dir, rel))
    ]
    entries = [(rel, st) for rel, st in entries if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)]
    size = sum(st.st_size for _, st in entries)
    if not entries:
        import warnings

        why = "git ignores every file there (.gitignore), or code_ignore" if listed_all(code_dir) else "it is empty"
        empty = f"code: {code_dir}: the snapshot has no file: {why}; the job runs in an empty folder"
        warnings.warn(empty, stacklevel=2)
    if size > limit:
        raise SpecError("code", code_dir, too_big(entries, size, limit))
    os.makedirs(output_dir, mode=0o700, exist_ok=True)
    for folder in (store, os.path.join(store, "objects"), os.path.join(store, "trees")):
        refused = private_dir(folder)
        if refused:
            raise SpecError("code", code_dir, f"cannot keep its snapshot: {refused}")
    index = Index(os.path.join(store, "index.json"))
    objects = os.path.join(store, "objects")
    keyed = [(rel, st, stored_key(code_dir, rel, st, index, objects)) for rel, st in entries]
    index.save()
    tree = hashlib.sha256("".join(f"{rel}\0{key}\n" for rel, _, key in sorted(keyed)).encode()).hexdigest()
    name = os.path.basename(os.path.abspath(code_dir)) or "code"
    path = os.path.join(store, "trees", tree, name)
    if not os.path.isdir(path):  # a new tree: its objects are in the store; the tree is linked
        build_tree(store, tree, name, code_dir, keyed)
    commit, dirty = git_state(code_dir)
    return Snapshot(path, tree, len(keyed), size, commit, dirty)


def store_of(output_dir: str) -> str:
    """The user's snapshot store in ``output_dir``."""
    return os.path.join(output_dir, f"{STORE}-{os.getuid()}")


def listed_all(code_dir: str) -> bool:
    """Whether the folder holds any file at all (git's view aside)."""
    return any(names for _, _, names in os.walk(code_dir))


def listed(code_dir: str) -> list[str]:
    """The directory's files, relative: git's view in a checkout (``.gitignore`` applied), else all."""
    try:
        res = subprocess.run(
            ["git", "-C", code_dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        res = None
    if res is not None and res.returncode == 0:
        return sorted({rel for rel in res.stdout.decode(errors="surrogateescape").split("\0") if rel})
    found = []
    for root, dirs, names in os.walk(code_dir):
        dirs[:] = [d for d in dirs if d not in (".git",)]
        found += [os.path.relpath(os.path.join(root, name), code_dir) for name in names]
    return sorted(found)


def excluded(rel: str, patterns: tuple[str, ...]) -> bool:
    parts = rel.split(os.sep)
    return any(fnmatch.fnmatch(rel, p) or any(fnmatch.fnmatch(part, p) for part in parts) for p in patterns)


def inside(rel: str, folder: str) -> bool:
    return not folder.startswith("..") and (folder == "." or rel == folder or rel.startswith(folder + os.sep))


def too_big(entries: list[tuple[str, os.stat_result]], size: int, limit: int) -> str:
    """The message for a code directory over ``limit``: its biggest top-level entries named."""
    tops: dict[str, int] = {}
    for rel, st in entries:
        top = rel.split(os.sep)[0] + ("/" if os.sep in rel else "")
        tops[top] = tops.get(top, 0) + st.st_size
    biggest = sorted(tops.items(), key=lambda item: -item[1])[:3]
    named = ", ".join(f"{top} ({mib(n)})" for top, n in biggest)
    return f"{mib(size)} of files, over the {mib(limit)} limit; biggest: {named} (leave them out with code_ignore)"


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


RACY_NS = 2_000_000_000  # a file modified this close to when it was hashed may change again unseen (mtime)


class Index:
    """What the last snapshots learnt of each file: a file unchanged since (size, mtime, inode) keeps its hash,
    unless it was modified within RACY_NS of being hashed (a rewrite in the same clock tick looks unchanged:
    git's "racy" files), which is hashed again."""

    def __init__(self, path: str) -> None:
        self.path, self.changed = path, False
        try:
            with open(path) as fh:
                self.known: dict[str, list[object]] = json.load(fh)
        except (OSError, ValueError):
            self.known = {}

    def known_key(self, path: str, st: os.stat_result) -> str | None:
        seen = self.known.get(path)
        if seen is None or len(seen) != 5 or seen[:3] != [st.st_size, st.st_mtime_ns, st.st_ino]:
            return None
        hashed_at = seen[4]
        return str(seen[3]) if isinstance(hashed_at, int) and st.st_mtime_ns < hashed_at - RACY_NS else None

    def learn(self, path: str, st: os.stat_result, digest: str, hashed_at: int) -> None:
        self.known[path], self.changed = [st.st_size, st.st_mtime_ns, st.st_ino, digest, hashed_at], True

    def save(self) -> None:
        if self.changed:
            write_atomic(self.path, json.dumps(self.known, separators=(",", ":")), 0o600)


def stored_key(code_dir: str, rel: str, st: os.stat_result, index: Index, objects: str) -> str:
    """The object a file is in the store as (its content's sha256, ``.x`` if executable; ``link:`` for a
    symlink): one the index knows and the store holds, else the file copied in, named by the hash of what was
    copied (never by an earlier reading of the file)."""
    path = os.path.join(code_dir, rel)
    if stat.S_ISLNK(st.st_mode):
        return "link:" + os.readlink(path)
    suffix = ".x" if st.st_mode & stat.S_IXUSR else ""
    known = index.known_key(os.path.abspath(path), st)
    if known is not None and os.path.exists(os.path.join(objects, known + suffix)):
        return known + suffix
    for _ in range(3):  # a file being written: copied again once it holds still
        hashed_at = time.time_ns()
        digest = store_object(objects, path, suffix)
        after = os.lstat(path)
        if (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino):
            index.learn(os.path.abspath(path), st, digest, hashed_at)
            return digest + suffix
        st = after
    why = f"{path} changed while its snapshot was taken (three times); submit again once it is written"
    raise SpecError("code", os.path.dirname(path), why)


def store_object(objects: str, source: str, suffix: str) -> str:
    """Copy ``source`` into the store, named by the sha256 of the bytes copied (read-only, the user's alone;
    kept as it is when the store has it already); that hash."""
    tmp = os.path.join(objects, f".tmp.{uuid.uuid4().hex}")
    sha = hashlib.sha256()
    try:
        try:
            with open(source, "rb") as src, open(tmp, "xb") as dst:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    sha.update(chunk)
                    dst.write(chunk)
        except OSError as exc:
            if exc.filename == tmp:
                raise
            why = f"cannot read {source} ({exc.strerror}); make it readable or leave it out with code_ignore"
            raise SpecError("code", os.path.dirname(source), why) from None
        target = os.path.join(objects, sha.hexdigest() + suffix)
        if not os.path.exists(target):
            os.chmod(tmp, 0o500 if suffix else 0o400)
            os.replace(tmp, target)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return sha.hexdigest()


def build_tree(store: str, tree: str, name: str, code_dir: str, keyed: list[tuple[str, os.stat_result, str]]) -> None:
    """``trees/<tree>/<name>``: hard links to the objects, made aside and renamed in (another submit may race)."""
    import shutil

    trees = os.path.join(store, "trees")
    tmp = os.path.join(trees, f".tmp-{uuid.uuid4().hex}")
    try:
        for rel, _, key in keyed:
            target = os.path.join(tmp, name, rel)
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            if key.startswith("link:"):
                os.symlink(key[len("link:") :], target)
            else:
                os.link(os.path.join(store, "objects", key), target)
        os.makedirs(os.path.join(tmp, name), mode=0o700, exist_ok=True)  # an empty code directory is a tree too
        try:
            os.rename(tmp, os.path.join(trees, tree))
        except OSError:  # another submit made the same tree meanwhile
            if not os.path.isdir(os.path.join(trees, tree, name)):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def git_state(code_dir: str) -> tuple[str, bool]:
    """git's HEAD commit and whether the checkout has uncommitted changes ("" and False outside git)."""
    try:
        head = subprocess.run(["git", "-C", code_dir, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        if head.returncode != 0:
            return "", False
        changes = subprocess.run(
            ["git", "-C", code_dir, "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "", False
    return head.stdout.strip(), bool(changes.stdout.strip())
