"""Staging progress: the nodes' notes gathered into the job's record, and the line ``--wait`` prints."""

from __future__ import annotations

from pathlib import Path

from ti_slurm.backends.base import JobInfo
from ti_slurm.core.states import JobState
from ti_slurm.follow.status import job_status, progress_line
from ti_slurm.job.staging import Progress
from ti_slurm.job.supervisor.records import StagingNotes


def test_the_nodes_notes_are_recorded_when_they_change_and_once_more_when_all_are_done(tmp_path: Path) -> None:
    events: list[dict[str, object]] = []
    notes = StagingNotes(str(tmp_path / "staging"), lambda kind, **data: events.append({"event": kind, **data}))
    notes.note()  # no node copies yet (no folder): nothing to say
    (tmp_path / "staging").mkdir()
    first, second = (
        Progress(str(tmp_path / "staging" / "ddp-0"), 300),
        Progress(str(tmp_path / "staging" / "ddp-1"), 100),
    )
    first.add(120)
    second.note()
    notes.note()
    notes.note()  # unchanged: not recorded again
    (tmp_path / "staging" / "ddp-1.tmp.7.node02").write_text("garbage")  # a note being replaced is skipped
    first.close()
    second.close()
    notes.note()
    assert events == [
        {"event": "staging", "nodes": {"ddp-0": [120, 300], "ddp-1": [0, 100]}},
        {"event": "staging", "nodes": {}},
    ]


def test_wait_shows_the_staging_while_it_lasts() -> None:
    job, running = JobInfo("7", "train", job_dir="/jobs/7"), JobInfo("7", state=JobState.RUNNING)
    start = {"event": "start", "components": [{"name": "ddp", "nodes": ["node01", "node02"]}]}
    staging = {"event": "staging", "nodes": {"ddp-0": [100 << 20, 400 << 20], "ddp-1": [300 << 20, 400 << 20]}}
    line = progress_line(job_status(job, [start, staging], running))
    assert line == "RUNNING on ddp: running; staging inputs on 2 node(s): 400 of 800 MiB"
    done = {"event": "staging", "nodes": {}}
    assert progress_line(job_status(job, [start, staging, done], running)) == "RUNNING on ddp: running"
    end = {"event": "end", "state": "COMPLETED", "reason": "every step exited 0"}
    assert job_status(job, [start, staging, end], None).staging == {}  # the last note before the end is moot


def test_a_copy_that_fails_on_some_files_is_one_reason_not_a_python_list(tmp_path) -> None:
    import shutil

    from ti_slurm.job.staging import _why

    failed = [("/data/a", "/stage/a", "[Errno 13] Permission denied: '/data/a'"), ("/data/b", "/stage/b", "x")]
    assert _why(shutil.Error(failed)) == "/data/a: [Errno 13] Permission denied: '/data/a' (and 1 more file(s))"
    assert _why(OSError(28, "No space left on device")) == "No space left on device"
