"""``python -m ti_slurm`` is the ``ti-slurm`` command."""

from ti_slurm.cli import entry

entry()
