"""What the console's views show, from records (pure): the list's order, sweeps and filters; a log's text
without terminal control; the bounded usage series the charts draw."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ti_slurm import JobState
from ti_slurm.follow.status import JobStatus
from ti_slurm.job import usage as sampling
from ti_slurm.ui.pages import job_rows, plain


def status(job_id: str, name: str, state: JobState, sweep: str = "", submitted: float = 0.0) -> JobStatus:
    return JobStatus(job_id, name, state, reason=f"{name} reason", sweep=sweep, submitted=submitted)


def test_the_list_is_newest_first_with_a_sweep_as_one_row_and_filters() -> None:
    statuses = [
        status("1", "train", JobState.COMPLETED, submitted=10.0),
        status("2_0", "grid", JobState.COMPLETED, sweep="2"),
        status("2_1", "grid", JobState.FAILED, sweep="2"),
        status("3", "eval", JobState.RUNNING, submitted=30.0),
    ]
    rows = job_rows(statuses)
    assert [r["id"] for r in rows] == ["3", "2", "1"]
    assert rows[1]["state"] == "SWEEP" and rows[1]["reason"] == "1 COMPLETED, 1 FAILED"
    assert [p["id"] for p in rows[1]["points"]] == ["2_0", "2_1"]
    assert [r["id"] for r in job_rows(statuses, state="failed")] == ["2"]  # a sweep with a failed point
    assert [r["id"] for r in job_rows(statuses, name="TRA")] == ["1"]


def test_a_log_is_shown_as_text_without_terminal_control() -> None:
    raw = b"\x1b[31mred\x1b[0m line\r\nbell\x07 \xff tab\there\n\x1b]0;title\x07"
    assert plain(raw) == "red line\nbell \ufffd tab\there\n"  # a window-title sequence is gone whole


def test_the_usage_series_stays_bounded_over_a_long_run(tmp_path: Path) -> None:
    sampler = sampling.UsageSampler(str(tmp_path / "ddp-0.usage.json"), "n1", 1, 0, {})
    for _ in range(sampling.SERIES_POINTS + 1):
        sampler.sample([os.getpid()])
    assert len(sampler.series) == sampling.SERIES_POINTS // 2 + 1  # every other one went, the run is all there
    assert sampler.series[0][0] <= sampler.series[-1][0] and sampler.series[-1][2] > 0


def test_nothing_but_the_ui_command_imports_the_console() -> None:
    """The console is an optional extra: the rest of ti-slurm runs without Starlette."""
    package = Path(__file__).parents[2] / "ti_slurm"
    importers = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "ti_slurm.ui" in path.read_text() and path.parent.name != "ui"
    ]
    assert importers == ["cli.py"]


class LogJob:
    """A job whose one node's log is ``data``, read as the console reads it (``LocalFiles``)."""

    def __init__(self, path: Path) -> None:
        from ti_slurm.transports import LocalFiles

        self.path, self.backend = path, LocalFiles()

    def log_files(self, label: str, node: object, attempt: object) -> list[tuple[str, str]]:
        return [(label, str(self.path))]


def test_a_multi_byte_log_followed_in_chunks_has_no_replacement_character(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Chinese text (three bytes a character) read in chunks whose edges cut characters: the view shows the
    text whole, from its end and followed on."""
    from ti_slurm.ui import pages

    monkeypatch.setattr(pages, "LOG_STEP", 1000)  # 1000 is no multiple of 3: edges fall inside characters
    monkeypatch.setattr(pages, "LOG_START", 500)
    text = "".join(f"第{k}步 损失 0.{k:03d}\n" for k in range(400))
    log = tmp_path / "ddp-0.log"
    log.write_text(text[:3000])
    job = LogJob(log)
    start = pages.log_chunk(job, None, "ddp-0", -1)
    shown = start["text"]
    with log.open("a") as fh:
        fh.write(text[3000:])
    offset = start["offset"]
    while True:
        chunk = pages.log_chunk(job, None, "ddp-0", offset)
        if chunk["offset"] == offset:
            break
        shown, offset = shown + chunk["text"], chunk["offset"]
    assert "\ufffd" not in shown and start["cut"]
    assert text.endswith(shown) and len(shown) > len(text) - 3000  # all that was appended, whole
    assert pages.log_chunk(job, None, "ddp-0", 1 << 62)["text"] == ""  # an offset past the end: nothing


def test_a_comparison_of_fewer_than_2_or_more_than_20_jobs_is_one_line() -> None:
    from ti_slurm.core.errors import ConfigError
    from ti_slurm.ui.app import compared_ids

    assert compared_ids(" 1, 2,1 ,3") == ["1", "2", "3"]  # each once, in order
    for given in ("5", "5,5", ",".join(str(k) for k in range(21))):
        with pytest.raises(ConfigError, match=r"^jobs: .*: compare 2 to 20 jobs: pick them in the list$"):
            compared_ids(given)
