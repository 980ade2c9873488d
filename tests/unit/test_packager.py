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
