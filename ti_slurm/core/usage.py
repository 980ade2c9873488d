"""A node's usage file (``logs/<label>.usage.json``, :meth:`~ti_slurm.core.paths.JobPaths.node_usage`): its one
schema. Each node's sampler (:mod:`ti_slurm.job.usage`) writes it; ``ti-slurm top``, ``status``'s efficiency
summary and the console read it back (:mod:`ti_slurm.follow.usage`). Standard library only: job steps write it.
"""

from __future__ import annotations

from ti_slurm.core.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class UsageRecord(Record):
    """What one node's command used, as of its last sample."""

    node: str
    cpus: int
    cpu_percent: float  # over the last sample interval: 100 = one CPU busy
    cpu_seconds: float
    rss: int  # resident bytes now
    peak_rss: int
    mem_request: int  # bytes Slurm gave (0: not known)
    started: float  # when the command started (time.time())
    time: float  # of the last sample
    # per bound GPU: util and mem now, mem_total, peak_mem, util_sum over readings (for the mean)
    gpus: dict[str, dict[str, float]] = {}  # noqa: RUF012 (Record copies it per instance)
    samples: int = 2  # taken while it ran, and the last one at its end (files before it was counted: 2)
    series: list[list[Any]] = []  # noqa: RUF012  [seconds since start, CPU %, rss, [GPU util, ...]], bounded

    def to_json(self) -> str:
        from ti_slurm.core import lightjson

        return lightjson.dumps(self.as_dict())

    @classmethod
    def fields_of(cls, text: str | None) -> dict[str, Any] | None:
        """A usage file's fields, typed; ``None`` for a file not written yet, or half of one."""
        import json

        try:
            data: dict[str, Any] = json.loads(text or "")
            return {
                "node": str(data["node"]),
                "cpus": int(data["cpus"]) or 1,
                "cpu_percent": float(data["cpu_percent"]),
                "cpu_seconds": float(data["cpu_seconds"]),
                "rss": int(data["rss"]),
                "peak_rss": int(data["peak_rss"]),
                "mem_request": int(data["mem_request"]),
                "started": float(data["started"]),
                "time": float(data["time"]),
                "gpus": {str(k): dict(v) for k, v in dict(data.get("gpus") or {}).items()},
                "samples": int(data.get("samples", 2)),
                "series": [list(point) for point in data.get("series") or []],
            }
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
