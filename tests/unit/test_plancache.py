"""The plan cache: every input of a plan is in its key, and an entry that is not this user's alone, or does not
read as written, is never used."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.factories import job_plan
from ti_slurm.submitting import plancache

S1, S2 = "0123456789abcdef", "fedcba9876543210"  # submissions: 16 random hex digits
SCRIPT = (
    f'#!/bin/bash\n#SBATCH --comment="ti-slurm:{S1}"\ngrep -qsF -- \'"submission":"{S1}"\' plan.json\n'
    f'cat <<EOF\n{{"submission":"{S1}"}}\nEOF\n'
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private runtime folder, a spec, a site and a user config of this test's own."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("TI_SLURM_CONFIG", str(tmp_path / "site.toml"))
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "config" / "ti-slurm").mkdir(parents=True)
    (tmp_path / "site.toml").write_text("")
    (tmp_path / "job.yaml").write_text("mode: ddp\nnodes: 2\ncommand: hostname\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_each_input_of_a_plan_is_in_its_key(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [plancache.key_of("job.yaml", {"backend": None})]
    changes = [
        lambda: (home / "job.yaml").write_text("mode: ddp\nnodes: 3\ncommand: hostname\n"),
        lambda: (home / "site.toml").write_text('partition = "gpu"\n'),
        lambda: (home / "config" / "ti-slurm" / "config.toml").write_text('backend = "pyslurm"\n'),
        lambda: monkeypatch.setenv("TI_SLURM_ANYTHING", "1"),
        lambda: monkeypatch.setenv("SLURM_CONF", "/etc/other/slurm.conf"),
        lambda: monkeypatch.setenv("PATH", "/opt/other/bin:" + os.environ["PATH"]),
        lambda: monkeypatch.setattr(sys, "executable", "/opt/other/bin/python3"),
        lambda: monkeypatch.chdir(home / "config"),
    ]
    for change in changes:
        change()
        keys.append(plancache.key_of(str(home / "job.yaml"), {"backend": None}))
    keys.append(plancache.key_of(str(home / "job.yaml"), {"backend": "rest"}))
    assert None not in keys and len(set(keys)) == len(keys)
    assert plancache.key_of(str(home / "gone.yaml"), {}) is None  # the full path says what is wrong
    os.mkfifo(home / "fifo.yaml")
    assert plancache.key_of(str(home / "fifo.yaml"), {}) is None  # read as no regular file, never waited on


def test_a_change_to_any_file_that_plans_or_renders_is_a_new_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A working tree's version does not move with each edit: the files' sizes and times do."""
    (tmp_path / "submitting" / "templates").mkdir(parents=True)
    (tmp_path / "submitting" / "__pycache__").mkdir()
    template = tmp_path / "submitting" / "templates" / "job.sh.j2"
    template.write_text("#!/bin/bash\n")
    monkeypatch.setattr(plancache, "PACKAGE", str(tmp_path))
    before = plancache.code_stamp()
    (tmp_path / "submitting" / "__pycache__" / "plancache.cpython-311.pyc").write_text("compiled")
    assert plancache.code_stamp() == before  # (Python's own caches are no source)
    template.write_text("#!/bin/bash\n# one more line\n")
    assert plancache.code_stamp() != before


def test_a_kept_plan_is_recalled_for_a_new_submission(home: Path) -> None:
    plan = job_plan(submission=S1, workdir=str(home), python=sys.executable)
    plancache.keep("k", plan, SCRIPT, "slurm")
    kept = plancache.recall("k")
    assert kept is not None and kept.backend == "slurm" and kept.still_holds()
    again, script = kept.for_submission(S2)
    assert again == plan.replace(submission=S2) and script == SCRIPT.replace(S1, S2) and S1 not in script
    with pytest.raises(ValueError):  # a render's plan: no id to replace (an empty one is found everywhere)
        plancache.KeptPlan(plan.replace(submission=""), SCRIPT, "").for_submission(S2)
    (home / "gone").mkdir()
    moved = plancache.KeptPlan(plan.replace(workdir=str(home / "gone")), SCRIPT, "slurm")
    os.rmdir(home / "gone")
    assert not moved.still_holds()  # the working directory went: planned again (and refused, in one line)


def test_an_entry_that_is_not_this_users_alone_or_does_not_read_is_ignored(home: Path) -> None:
    plan = job_plan(submission=S1, workdir=str(home), python=sys.executable)
    plancache.keep("k", plan, SCRIPT, "slurm")
    folder = plancache.plans_dir()
    assert folder is not None and oct(os.stat(folder).st_mode & 0o777) == "0o700"
    entry = Path(folder) / "k.json"
    good = entry.read_text()
    data = json.loads(good)
    for bad in (
        "{not json",
        json.dumps({**data, "key": "other"}),  # another key's entry under this name
        json.dumps({**data, "format": 0}),
        json.dumps({**data, "script": data["script"].replace(f'"{S1}"', '"x"', 1)}),  # its id not where the plan says
        json.dumps({**data, "plan": "{}"}),
    ):
        entry.write_text(bad)
        assert plancache.recall("k") is None, bad
    entry.write_text(good)
    entry.chmod(0o666)  # another user could have written it
    assert plancache.recall("k") is None
    entry.chmod(0o600)
    assert plancache.recall("k") is not None
    entry.rename(Path(folder) / "elsewhere.json")
    entry.symlink_to(Path(folder) / "elsewhere.json")  # a link is never followed
    assert plancache.recall("k") is None


def test_no_more_than_the_kept_most_entries_stay(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plancache, "KEPT_MOST", 3)
    plan = job_plan(submission=S1, workdir=str(home), python=sys.executable)
    for k in range(5):
        plancache.keep(f"k{k}", plan, SCRIPT, "slurm")
        os.utime(Path(str(plancache.plans_dir())) / f"k{k}.json", (k, k))
    assert sorted(os.listdir(str(plancache.plans_dir()))) == ["k2.json", "k3.json", "k4.json"]
