"""The registry's index of submissions: the newest jobs read from its end, whatever the registry's size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ti_slurm.backends.base import JobInfo
from ti_slurm.follow import registry


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    return tmp_path / "ti-slurm" / "jobs"


def write_record(folder: Path, job_id: str, submitted: float) -> None:
    """A record as an older ti-slurm wrote it (no index)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{job_id}.json").write_text(json.dumps({"job_id": job_id, "backend": "slurm", "submitted": submitted}))


def test_the_newest_come_from_the_index_an_older_registry_gets_one_and_new_jobs_are_appended(home: Path) -> None:
    for k in range(5):
        write_record(home, str(100 + k), 1000.0 + k)
    assert [j.job_id for j in registry.recall_newest(2)] == ["103", "104"]  # the index made from the records
    assert (home / "index").read_text().splitlines()[0] == "1000.000000\t100"
    registry.remember(JobInfo("200", backend="slurm", submitted=2000.0))
    registry.remember(JobInfo("200", backend="slurm", submitted=2000.0, reason="updated"))  # no second line
    assert [j.job_id for j in registry.recall_newest(3)] == ["103", "104", "200"]
    assert (home / "index").read_text().count("\t200\n") == 1


def test_a_removed_record_a_bad_line_and_a_filter_are_passed_over(home: Path) -> None:
    for k in range(4):
        registry.remember(JobInfo(str(k), backend="slurm", host="a" if k % 2 else "b", submitted=10.0 + k))
    (home / "3.json").unlink()
    with (home / "index").open("a") as fh:
        fh.write("garbage without a tab\n\n")
    assert [j.job_id for j in registry.recall_newest(5)] == ["0", "1", "2"]
    assert [j.job_id for j in registry.recall_newest(5, lambda j: j.host == "a")] == ["1"]


def test_an_index_of_many_blocks_is_read_from_its_end_whole(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "INDEX_READ", 100)  # lines cut at every block's edge
    for k in range(60):
        registry.remember(JobInfo(f"{k:05d}", backend="slurm", submitted=float(k)))
    assert [j.job_id for j in registry.recall_newest(60)] == [f"{k:05d}" for k in range(60)]
