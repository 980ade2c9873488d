"""The job's training steps and loss as its TensorBoard event files say (``TI_SLURM_TENSORBOARD_DIR``), for the
supervisor's watchdog (``watchdog: {progress: true}``): code that writes TensorBoard scalars anyway needs nothing
more for its hangs to be caught in a minute, and a NaN or infinite loss ends the attempt as ``nan``.

The files are read as they grow (:class:`ti_slurm.core.tfevents.ScalarReader`: only what each gained); what they
held when the attempt started is an earlier attempt's. The step is the newest point's of any tag; the loss, any
tag whose name holds ``loss``. Standard library only: this runs in the job.
"""

from __future__ import annotations

import math

from ti_slurm.core.files import find_named, read_local_bytes
from ti_slurm.core.tfevents import ScalarReader
from ti_slurm.job.watch import ProgressWatch

FILES_AT_MOST = 64  # event files followed (a job's: a few per run)
LOSS_MARK = "loss"  # a tag whose name holds it (any case) is the training's loss


class TensorBoardWatch(ProgressWatch):
    """The job's TensorBoard steps, judged as a node's progress file is (:class:`ProgressWatch`), and its loss."""

    what = "TensorBoard step"

    def __init__(self, folder: str, started: float) -> None:
        super().__init__("", started)
        self.reader = ScalarReader(folder, lambda where, mark: find_named(where, mark, FILES_AT_MOST), read_local_bytes)
        self.primed = False  # the first look reads what earlier attempts wrote: no step of this one
        self.bad_loss: tuple[str, int, float] | None = None  # (tag, step, value): the first NaN or infinite loss
        self.first_step: tuple[str, float] | None = None  # this attempt's first step, and when

    def read_step(self) -> str | None:
        if not self.primed:  # read to the end, a few MiB a read
            self.primed = True
            while True:
                before = dict(self.reader.offsets)
                self.reader.gained()
                if self.reader.offsets == before:
                    return None
        fresh = self.reader.gained()
        newest: int | None = None
        for tag, points in fresh.items():
            newest = max(newest, points[-1][0]) if newest is not None else points[-1][0]
            if self.bad_loss is None and LOSS_MARK in tag.lower():
                self.bad_loss = next(((tag, s, v) for s, v in points if math.isnan(v) or math.isinf(v)), None)
        return None if newest is None else str(newest)

    def first(self, step: str, at: float) -> None:
        self.first_step = (step, at)

    def progress(self) -> dict[str, object]:
        """The attempt's first and last TensorBoard step and when, as a node's progress files say theirs."""
        out: dict[str, object] = {}
        if self.first_step is not None:
            out.update(first=self.first_step[0], first_at=round(self.first_step[1], 3))
        if self.step:
            out.update(last=self.step, last_at=round(self.stepped_at, 3))
        return out
