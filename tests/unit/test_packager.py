"""The code snapshot (``code:``): what is captured, what is left out, and what a second submit reuses."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ti_slurm.core.errors import SpecError
from ti_slurm.submitting.packager import store_of, take


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def captured(path: str) -> dict[str, str]:
    return {
        str(p.relative_to(path)): (p.read_text() if not p.is_symlink() else f"-> {os.readlink(p)}")
        for p in sorted(Path(path).rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def test_the_snapshot_keeps_the_code_as_it_was(tmp_path: Path) -> None:
    code = tree(tmp_path / "proj", {"train.py": "v1", "lib/util.py": "u", "run.sh": "#!/bin/sh\n"})
    (code / "run.sh").chmod(0o755)
    (code / "data").symlink_to("/datasets/x")
    out = tmp_path / "jobs"
    shot = take(str(code), str(out))
    (code / "train.py").write_text("v2: edited after submit")
    assert Path(shot.path).name == "proj" and Path(shot.path).parent.name == shot.tree
    assert captured(shot.path) == {
        "data": "-> /datasets/x",
        "lib/util.py": "u",
        "run.sh": "#!/bin/sh\n",
        "train.py": "v1",
    }
    assert os.access(Path(shot.path) / "run.sh", os.X_OK) and not os.access(Path(shot.path) / "train.py", os.X_OK)
    assert (shot.files, shot.size) == (4, len("v1u#!/bin/sh\n") + len("/datasets/x"))


def test_an_unchanged_tree_is_the_same_snapshot_and_a_changed_one_shares_its_files(tmp_path: Path) -> None:
    code = tree(tmp_path / "proj", {"a.py": "a", "b.py": "b"})
    first, again = take(str(code), str(tmp_path / "jobs")), take(str(code), str(tmp_path / "jobs"))
    assert first == again
    (code / "b.py").write_text("b2")
    changed = take(str(code), str(tmp_path / "jobs"))
    assert changed.tree != first.tree and captured(first.path)["b.py"] == "b"
    assert os.stat(Path(first.path) / "a.py").st_ino == os.stat(Path(changed.path) / "a.py").st_ino  # one copy


def test_caches_the_job_output_and_code_ignore_are_left_out(tmp_path: Path) -> None:
    code = tree(
        tmp_path / "proj",
        {"t.py": "t", "__pycache__/t.cpython-311.pyc": "x", "ckpt/model.pt": "big", "runs/1/log": "l", "n.ipynb": "n"},
    )
    shot = take(str(code), str(code / "runs"), ignore=("ckpt", "*.ipynb"))
    assert sorted(captured(shot.path)) == ["t.py"]


def test_in_a_git_checkout_gitignore_applies_and_the_commit_is_recorded(tmp_path: Path) -> None:
    code = tree(
        tmp_path / "repo", {"train.py": "v1", ".gitignore": "*.log\nscratch/\n", "x.log": "l", "scratch/a": "a"}
    )
    git = ["git", "-C", str(code), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (code / "new.py").write_text("untracked, not ignored: taken")
    shot = take(str(code), str(tmp_path / "jobs"))
    assert sorted(captured(shot.path)) == [".gitignore", "new.py", "train.py"]
    assert (shot.commit, shot.dirty) == (head, True)


def test_a_tree_over_the_limit_is_one_line_naming_its_biggest_entries(tmp_path: Path) -> None:
    code = tree(tmp_path / "proj", {"t.py": "t" * 10, "data/a.bin": "x" * 600_000, "weights.pt": "w" * 300_000})
    with pytest.raises(SpecError) as err:
        take(str(code), str(tmp_path / "jobs"), limit=500_000)
    text = str(err.value)
    assert text.startswith("code: '") and "\n" not in text  # the value itself is shortened if long
    assert ": 0.9 MiB of files, over the 0.5 MiB limit; biggest: data/ (0.6 MiB), weights.pt (0.3 MiB)," in text
    assert not Path(store_of(str(tmp_path / "jobs"))).exists()  # nothing half made


def test_a_gitignore_that_takes_every_file_warns_of_an_empty_snapshot(tmp_path: Path) -> None:
    code = tree(tmp_path / "repo", {"train.py": "v1", ".gitignore": "*\n"})
    subprocess.run(["git", "-C", str(code), "init", "-q"], check=True)
    with pytest.warns(UserWarning, match=r"the snapshot has no file: git ignores every file there \(.gitignore\)"):
        shot = take(str(code), str(tmp_path / "jobs"))
    assert shot.files == 0


def every_object_is_named_by_its_content(store: str) -> bool:
    import hashlib

    objects = Path(store) / "objects"
    return all(
        hashlib.sha256(p.read_bytes()).hexdigest() == p.name.removesuffix(".x") for p in objects.iterdir()
    )


def test_a_file_rewritten_within_the_same_clock_tick_is_taken_anew(tmp_path: Path) -> None:
    """A rewrite that leaves size, mtime and inode as they were (two writes in one tick of a coarse clock) is
    not taken for the old content: a file modified close to when it was hashed is hashed again."""
    code = tree(tmp_path / "proj", {"train.py": "lr = 0.1\n"})
    out = tmp_path / "out"
    first = take(str(code), str(out))
    before = os.stat(code / "train.py")
    with open(code / "train.py", "r+") as fh:  # in place: the same inode, the same size
        fh.write("lr = 0.9\n")
    os.utime(code / "train.py", ns=(before.st_atime_ns, before.st_mtime_ns))
    second = take(str(code), str(out))
    assert captured(second.path) == {"train.py": "lr = 0.9\n"} and second.tree != first.tree
    assert every_object_is_named_by_its_content(store_of(str(out)))


def test_a_file_written_while_it_is_copied_is_copied_again_or_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file still being written while its snapshot is taken: copied again once it holds still, each object
    named by the hash of the bytes stored; one that never holds still is one line, nothing kept under a wrong
    name."""
    from ti_slurm.submitting import packager

    code = tree(tmp_path / "proj", {"train.py": "v1\n"})
    out = tmp_path / "out"
    real, writes = packager.store_object, iter(["v2, longer\n"])

    def written_meanwhile(objects: str, source: str, suffix: str) -> str:
        digest = real(objects, source, suffix)
        text = next(writes, None)
        if text is not None:  # the editor saves while the copy is made
            Path(source).write_text(text)
        return digest

    monkeypatch.setattr(packager, "store_object", written_meanwhile)
    snap = take(str(code), str(out))
    assert captured(snap.path) == {"train.py": "v2, longer\n"}
    assert every_object_is_named_by_its_content(store_of(str(out)))
    writes = iter([f"v{k}\n" * k for k in range(3, 10)])  # never holds still
    (code / "train.py").write_text("v3 start\n")
    with pytest.raises(SpecError, match=r"train.py changed while its snapshot was taken \(three times\); submit"):
        take(str(code), str(out))
    assert every_object_is_named_by_its_content(store_of(str(out)))
