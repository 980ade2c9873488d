"""The training's scalars read from TensorBoard event files as PyTorch's SummaryWriter and tf.summary wrote them
(recorded in tests/data/tensorboard/), without TensorFlow or TensorBoard: whole, followed as they grow, and
never tripped by what is not a scalar or not an event file."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ti_slurm.core.tfevents import (
    EVENT_FILE_MARK,
    MAX_RECORD,
    POINTS_AT_MOST,
    ScalarReader,
    _one_simple_value,
    event_scalars,
    last_values,
    read_into,
    read_scalars,
    records,
    scalars_by_field,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "tensorboard"


def test_pytorchs_summary_writer_scalars_and_not_its_text_or_histograms() -> None:
    series = read_scalars((DATA / "torch.tfevents").read_bytes())
    assert set(series) == {"train/loss", "train/accuracy"}  # add_text and add_histogram are no scalars
    assert [step for step, _ in series["train/loss"]] == [0, 1, 2, 3, 4]
    assert [round(v, 4) for _, v in series["train/loss"]] == [1.0, 0.5, 0.3333, 0.25, 0.2]
    assert last_values(series) == pytest.approx({"train/loss": 0.2, "train/accuracy": 0.9})


def test_tf_summary_scalars_are_tensors_and_read_as_numbers() -> None:
    series = read_scalars((DATA / "tf2.tfevents").read_bytes())
    assert set(series) == {"loss", "lr"}  # tf.summary.text and .histogram: tensors, but no scalars
    assert series["loss"] == [(0, 2.0), (1, 1.5), (2, 1.0)]
    assert series["lr"] == [(2, pytest.approx(0.001))]


def test_a_record_being_written_is_read_once_whole(tmp_path: Path) -> None:
    whole = (DATA / "tf2.tfevents").read_bytes()  # its last record: the "lr" scalar
    folder = tmp_path / "tb"
    folder.mkdir()
    path = folder / "events.out.tfevents.1.n1"
    reads: list[tuple[int, int]] = []

    def read(p: str, offset: int, size: int) -> bytes | None:
        reads.append((offset, size))
        with open(p, "rb") as fh:
            fh.seek(offset)
            return fh.read(size)

    def find(where: str, mark: str) -> list[str]:
        return [os.path.join(where, n) for n in os.listdir(where) if mark in n]

    reader = ScalarReader(str(folder), find, read)
    cut = len(whole) - 7  # the last record cut short
    path.write_bytes(whole[:cut])
    first = {tag: list(points) for tag, points in reader.look().items()}
    path.write_bytes(whole)
    second = reader.look()
    assert second == read_scalars(whole)
    assert "lr" not in first and first["loss"] == second["loss"]  # the cut record was not half-read, nor twice
    assert reads[1][0] > 0 and reads[1][0] < cut  # the second look read from where whole records ended


def test_the_fast_read_of_simple_values_agrees_with_the_field_by_field_one() -> None:
    found, _ = records((DATA / "torch.tfevents").read_bytes())
    simple = [r for r in found if event_scalars(r) and _one_simple_value(r) is not None]
    assert len(simple) == 10  # every add_scalar event took the fast read
    assert all(event_scalars(r) == scalars_by_field(r) for r in found)


def test_what_is_not_a_scalar_event_file_is_skipped() -> None:
    long_record = struct.pack("<Q", MAX_RECORD + 1) + b"\0" * 4  # a huge record: skipped, never read into memory
    assert records(long_record) == ([], 12 + MAX_RECORD + 1 + 4)
    assert read_scalars(b"<html>" * 1000) == {}
    assert read_scalars(b"") == {}


@given(st.binary(max_size=400))
def test_any_bytes_give_scalars_or_nothing_never_an_error(data: bytes) -> None:
    series: dict[str, list[tuple[int, float]]] = {}
    taken = read_into(series, (DATA / "tf2.tfevents").read_bytes()[:64] + data)
    assert taken >= 0 and all(isinstance(tag, str) for tag in series)


def test_a_long_series_is_thinned_and_keeps_its_whole_span() -> None:
    one = (DATA / "tf2.tfevents").read_bytes()
    series: dict[str, list[tuple[int, float]]] = {}
    for _ in range(POINTS_AT_MOST):
        read_into(series, one)
    assert len(series["loss"]) <= POINTS_AT_MOST and series["loss"][0] == (0, 2.0) and series["loss"][-1] == (2, 1.0)
    assert EVENT_FILE_MARK in "events.out.tfevents.1733.node01"


def test_a_jobs_event_files_are_found_below_the_folder_links_not_followed(tmp_path: Path) -> None:
    from ti_slurm.transports import FOUND_AT_MOST, LocalFiles

    (tmp_path / "run1").mkdir()
    (tmp_path / "run1" / "events.out.tfevents.2.n1").write_bytes(b"")
    (tmp_path / "events.out.tfevents.1.n1").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "linked.tfevents").symlink_to("/etc/passwd")  # planted: never read through
    found = LocalFiles().find_files(str(tmp_path), EVENT_FILE_MARK)
    assert found == [str(tmp_path / "events.out.tfevents.1.n1"), str(tmp_path / "run1" / "events.out.tfevents.2.n1")]
    for n in range(FOUND_AT_MOST + 5):
        (tmp_path / f"many.tfevents.{n:03d}").write_bytes(b"")
    assert len(LocalFiles().find_files(str(tmp_path), EVENT_FILE_MARK)) == FOUND_AT_MOST
    assert LocalFiles().find_files(str(tmp_path / "missing"), EVENT_FILE_MARK) == []


def scalar_record(tag: str, step: int, value: float) -> bytes:
    """One TFRecord holding an Event with one scalar (simple_value), as SummaryWriter writes it (CRCs zero:
    the reader does not check them)."""

    def field(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2, len(payload)]) + payload

    name = tag.encode()
    value_msg = field(1, name) + bytes([2 << 3 | 5]) + struct.pack("<f", value)
    event = bytes([2 << 3 | 0, step]) + field(5, field(1, value_msg))
    return struct.pack("<Q", len(event)) + b"\0" * 4 + event + b"\0" * 4


def test_a_job_with_a_thousand_tags_keeps_a_bounded_few_and_forgets_files_that_are_gone() -> None:
    from ti_slurm.core.tfevents import TAGS_AT_MOST

    files = {"events.out.tfevents.1": b"".join(scalar_record(f"layer{k:04d}/norm", 1, 0.5) for k in range(1000))}
    reader = ScalarReader("tb", lambda folder, mark: list(files), lambda path, at, size: files[path][at : at + size])
    series = reader.look()
    assert len(series) == TAGS_AT_MOST and series["layer0000/norm"] == [(1, 0.5)]
    files.clear()  # the job's results were deleted
    assert reader.look() == {}


def test_the_records_written_carry_the_checksums_tensorboard_checks() -> None:
    """The writer's framing, against the CRCs PyTorch's own writer stored in a real file."""
    import struct

    from ti_slurm.core.tfevents import masked_crc, scalar_event, tfrecord

    data = (DATA / "torch.tfevents").read_bytes()
    found, _ = records(data)
    pos = 0
    for record in found:
        length = data[pos : pos + 8]
        assert struct.unpack("<I", data[pos + 8 : pos + 12])[0] == masked_crc(length)
        assert struct.unpack("<I", data[pos + 12 + len(record) : pos + 16 + len(record)])[0] == masked_crc(record)
        assert tfrecord(record) == data[pos : pos + 16 + len(record)]
        pos += 16 + len(record)
    assert read_scalars(scalar_event("train/loss", 300, 0.5, 1.0)) == {"train/loss": [(300, 0.5)]}


def test_the_jobs_watchdog_reads_only_this_attempts_steps_and_a_nan_loss(tmp_path: Path) -> None:
    """What an earlier attempt wrote (a NaN among it) is history; this attempt's steps and its NaN are seen."""
    from ti_slurm.core.tfevents import file_version_event, scalar_event
    from ti_slurm.job.tensorboard import TensorBoardWatch

    events = tmp_path / "events.out.tfevents.1.host.1"
    with events.open("ab") as fh:
        fh.write(file_version_event(1.0) + b"".join(scalar_event("loss", s, float("nan"), 1.0) for s in range(9)))
    watch = TensorBoardWatch(str(tmp_path), started=0.0)
    assert watch.look(100.0) == "" and watch.bad_loss is None and watch.progress() == {}
    with events.open("ab") as fh:
        fh.write(scalar_event("lr", 10, 0.1, 2.0) + scalar_event("loss", 10, 0.5, 2.0))
    watch.look(101.0)
    with events.open("ab") as fh:
        fh.write(scalar_event("train/Loss", 11, float("inf"), 3.0))
    watch.look(102.0)
    assert watch.progress() == {"first": "10", "first_at": 101.0, "last": "11", "last_at": 102.0}
    assert watch.bad_loss == ("train/Loss", 11, float("inf"))
