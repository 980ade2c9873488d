"""Tencent Cloud's TI platform: the contract every mode speaks as it is (nothing to add)."""

from __future__ import annotations

from ti_slurm.job.platforms.base import Platform


class TI(Platform):
    name = "ti"


PLATFORM = TI()
