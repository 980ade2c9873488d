"""``python -m ti_slurm`` is the ``ti-slurm`` command."""

import sys

from ti_slurm.cli import main

sys.exit(main())
