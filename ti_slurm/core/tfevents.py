"""The training's own scalars (loss, accuracy, learning rate), read from the TensorBoard event files a job
writes, for the console's charts and a sweep's last-value columns.

A job writes them where ``TI_SLURM_TENSORBOARD_DIR`` says (``<results>/output/tensorboard``), with PyTorch's
``SummaryWriter``, ``tf.summary`` or any writer of the format. Neither TensorFlow nor TensorBoard is needed to
read them: an event file is a sequence of TFRecords (:func:`records`), each an ``Event`` protobuf, of which a
scalar needs four fields (:func:`event_scalars`: the wall time, the step, each summary value's tag and its
number: ``simple_value``, or a one-element tensor as ``tf.summary.scalar`` writes it). The CRCs are not
checked: a record is taken whole or not yet (one still being written is read next time).

:class:`ScalarReader` follows one job's files as they grow, reading only what each gained (through the job's
backend: :func:`ti_slurm.follow.scalars.job_scalars`; in the job: :mod:`ti_slurm.job.tensorboard`). Standard
library only: the supervisor reads the job's steps with it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

EVENT_FILE_MARK = "tfevents"  # every writer's event files have it in their names (events.out.tfevents.<time>...)
MAX_RECORD = 1 << 20  # a record longer than this is no scalar event (an image, a graph): skipped unread
POINTS_AT_MOST = 2000  # per tag: older points are thinned (every other one) when a series grows past it
TAGS_AT_MOST = 256  # tags kept per job (a job writing thousands: the first ones; memory stays bounded)
READ_AT_MOST = 4 << 20  # bytes read of one file per look (~50k events, 0.1 s: a long history over a few looks)

_FLOAT, _DOUBLE, _INT32, _INT64 = 1, 2, 3, 9  # TensorProto dtypes a scalar may have
_PLUGIN_SCALARS = b"scalars"

Series = dict[str, list[tuple[int, float]]]  # tag -> [(step, value)], in the order written


def records(data: bytes) -> tuple[list[bytes], int]:
    """The whole TFRecords at the start of ``data`` (length, its CRC, the record, its CRC), and how many bytes
    they took; a record cut short (still being written) is left for the next read. A record longer than
    MAX_RECORD is skipped, read or not: the bytes taken may then reach past ``data``."""
    found, pos = [], 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        end = pos + 12 + length + 4
        if length > MAX_RECORD:
            pos = end
            continue
        if end > len(data):
            break
        found.append(data[pos + 12 : pos + 12 + length])
        pos = end
    return found, pos


def fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """A protobuf message's fields: (number, value: an int for a varint, else the raw bytes)."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"protobuf wire type {wire}")
        if pos > len(buf):
            raise ValueError("protobuf field cut short")
        yield number, value


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    if pos < len(buf) and buf[pos] < 0x80:  # one byte: most lengths, tags and small steps
        return buf[pos], pos + 1
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("protobuf varint cut short")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def event_scalars(record: bytes) -> list[tuple[str, int, float]]:
    """The scalars of one ``Event``: (tag, step, value) for each summary value that is a number."""
    simple = _one_simple_value(record)
    return [simple] if simple is not None else scalars_by_field(record)


def scalars_by_field(record: bytes) -> list[tuple[str, int, float]]:
    """:func:`event_scalars`, reading the event field by field (any order, any number of values)."""
    step, summary = 0, b""
    for number, value in fields(record):
        if number == 2 and isinstance(value, int):
            step = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 5 and isinstance(value, bytes):
            summary = value
    found = []
    for number, value in fields(summary):
        if number == 1 and isinstance(value, bytes):
            tag_value = _summary_value(value)
            if tag_value is not None:
                found.append((tag_value[0], step, tag_value[1]))
    return found


def _one_simple_value(record: bytes) -> tuple[str, int, float] | None:
    """The one scalar of an event as most writers write it (PyTorch's ``add_scalar``: wall_time, step, and a
    summary of one value with a tag and a ``simple_value``, in that order), read straight off its bytes; None
    for any other event (read field by field)."""
    try:
        if record[0] != 0x09:  # wall_time, a double
            return None
        pos, step = 9, 0
        if record[pos] == 0x10:  # step, a varint
            step, pos = _varint(record, pos + 1)
        if record[pos] != 0x2A:  # the summary
            return None
        size, pos = _varint(record, pos + 1)
        if pos + size != len(record) or record[pos] != 0x0A:  # its one value
            return None
        size, pos = _varint(record, pos + 1)
        if pos + size != len(record) or record[pos] != 0x0A:  # the value's tag ...
            return None
        size, pos = _varint(record, pos + 1)
        tag, pos = record[pos : pos + size], pos + size
        if pos + 5 != len(record) or record[pos] != 0x15:  # ... and its simple_value, a float, ending the event
            return None
    except (IndexError, ValueError):
        return None
    step = step - (1 << 64) if step >= 1 << 63 else step
    return tag.decode(errors="replace"), step, struct.unpack_from("<f", record, pos + 1)[0]


def _summary_value(buf: bytes) -> tuple[str, float] | None:
    """A ``Summary.Value``'s tag and number, when it holds one (``simple_value``, or a scalar tensor)."""
    tag, number, plugin = "", None, _PLUGIN_SCALARS
    for num, value in fields(buf):
        if num == 1 and isinstance(value, bytes):
            tag = value.decode(errors="replace")
        elif num == 2 and isinstance(value, bytes) and len(value) == 4:
            number = struct.unpack("<f", value)[0]
        elif num == 8 and isinstance(value, bytes):
            number = _tensor_number(value)
        elif num == 9 and isinstance(value, bytes):
            plugin = _plugin_name(value)
    if not tag or number is None or plugin != _PLUGIN_SCALARS:
        return None
    return tag, float(number)


def _plugin_name(metadata: bytes) -> bytes:
    """``SummaryMetadata.plugin_data.plugin_name`` (``b"scalars"`` when it names none)."""
    for num, value in fields(metadata):
        if num == 1 and isinstance(value, bytes):
            for inner, name in fields(value):
                if inner == 1 and isinstance(name, bytes):
                    return name
    return _PLUGIN_SCALARS


def _tensor_number(buf: bytes) -> float | None:
    """The one number of a ``TensorProto`` of one element (None: not a number, or more than one)."""
    dtype, numbers = 0, []
    for num, value in fields(buf):
        if num == 1 and isinstance(value, int):
            dtype = value
        elif num == 4 and isinstance(value, bytes):  # tensor_content: the raw little-endian values
            numbers += _unpacked(value, dtype)
        elif num == 5 and isinstance(value, bytes):  # float_val (packed, or one per field)
            numbers += [x for (x,) in struct.iter_unpack("<f", value[: len(value) // 4 * 4])]
        elif num == 6 and isinstance(value, bytes):  # double_val
            numbers += [x for (x,) in struct.iter_unpack("<d", value[: len(value) // 8 * 8])]
        elif num in (7, 10):  # int_val, int64_val: packed varints, or one varint per field
            numbers += _varints(value) if isinstance(value, bytes) else [value]
    if dtype not in (_FLOAT, _DOUBLE, _INT32, _INT64) or len(numbers) != 1:
        return None
    return float(numbers[0])


def _unpacked(content: bytes, dtype: int) -> list[float]:
    formats = {_FLOAT: "<f", _DOUBLE: "<d", _INT32: "<i", _INT64: "<q"}
    fmt = formats.get(dtype)
    if fmt is None:
        return []
    size = struct.calcsize(fmt)
    return [x for (x,) in struct.iter_unpack(fmt, content[: len(content) // size * size])]


def _varints(buf: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(buf):
        value, pos = _varint(buf, pos)
        out.append(value)
    return out


def read_into(series: Series, data: bytes) -> int:
    """Add the scalars of the whole records in ``data`` to ``series``; how many bytes were taken."""
    found, taken = records(data)
    for record in found:
        try:
            scalars = event_scalars(record)
        except ValueError:
            continue  # not an Event (a damaged record): skipped
        for tag, step, value in scalars:
            add_points(series, tag, [(step, value)])
    return taken


def add_points(series: Series, tag: str, points: list[tuple[int, float]]) -> None:
    """Add a tag's points to ``series``, within TAGS_AT_MOST tags and POINTS_AT_MOST points a tag."""
    if tag not in series and len(series) >= TAGS_AT_MOST:
        return
    kept = series.setdefault(tag, [])
    kept.extend(points)
    while len(kept) > POINTS_AT_MOST:
        del kept[: POINTS_AT_MOST // 2 : 2]  # thin the older half: the chart keeps its whole span


def read_scalars(data: bytes) -> Series:
    """Every scalar of one event file's bytes (a whole file)."""
    series: Series = {}
    read_into(series, data)
    return series


def last_values(series: Series) -> dict[str, float]:
    """Each tag's latest value (the sweep page's columns)."""
    return {tag: points[-1][1] for tag, points in series.items() if points}


LOWER_IS_BETTER = ("loss", "error", "perplexity", "wer", "cer")  # a tag naming one: its best value is its least


def best_values(series: Series) -> dict[str, float]:
    """Each tag's best value so far: the least of a loss or error (:data:`LOWER_IS_BETTER`), else the greatest
    (an accuracy); a NaN is never best."""
    out = {}
    for tag, points in series.items():
        values = [v for _, v in points if v == v]
        if values:
            out[tag] = min(values) if any(word in tag.lower() for word in LOWER_IS_BETTER) else max(values)
    return out


@dataclass
class ScalarReader:
    """One job's scalars, followed as its event files grow: each look lists the files (``find``: a folder's
    files whose names hold a mark, at most a few dozen) and reads from each only the bytes it gained
    (``read``: a path, an offset, a size)."""

    folder: str
    find: Callable[[str, str], list[str]]
    read: Callable[[str, int, int], bytes | None]
    offsets: dict[str, int] = field(default_factory=dict)
    series: Series = field(default_factory=dict)

    def look(self) -> Series:
        """The scalars so far, every tag's points in order (several files: in the order of their names, as
        each writer's files are named by their start time)."""
        self.gained()
        return self.series

    def gained(self) -> Series:
        """The scalars written since the last look (kept in :attr:`series` too)."""
        files = sorted(self.find(self.folder, EVENT_FILE_MARK))
        if any(path not in files for path in self.offsets):  # files gone (deleted, rotated): what they held too
            self.offsets.clear()
            self.series.clear()
        fresh: Series = {}
        for path in files:
            offset = self.offsets.get(path, 0)
            data = self.read(path, offset, READ_AT_MOST)
            if data:
                self.offsets[path] = offset + read_into(fresh, data)
        for tag, points in fresh.items():
            add_points(self.series, tag, points)
        return fresh


# -- writing (the fault injector's scalars, and tests: what TensorBoard itself reads) ---------------------------
def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def masked_crc(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C, rotated and offset (TensorBoard checks it)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(data: bytes) -> bytes:
    """One TFRecord: its length, that length's CRC, the data, its CRC."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


def _field_bytes(number: int, data: bytes) -> bytes:
    return bytes([number << 3 | 2]) + _varint_bytes(len(data)) + data


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def scalar_event(tag: str, step: int, value: float, wall_time: float) -> bytes:
    """An ``Event`` holding one scalar (as PyTorch's ``add_scalar`` writes it), its TFRecord framing included."""
    summary_value = _field_bytes(1, tag.encode()) + b"\x15" + struct.pack("<f", value)
    head = b"\x09" + struct.pack("<d", wall_time) + b"\x10" + _varint_bytes(step)
    return tfrecord(head + _field_bytes(5, _field_bytes(1, summary_value)))


def file_version_event(wall_time: float) -> bytes:
    """An event file's first record: its format's version (``brain.Event:2``)."""
    return tfrecord(b"\x09" + struct.pack("<d", wall_time) + _field_bytes(3, b"brain.Event:2"))
