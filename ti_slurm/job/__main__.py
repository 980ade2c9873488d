"""``python -m ti_slurm.job``: the supervisor's entry points (not for people).

python -m ti_slurm.job supervise JOB_DIR         inside the batch script
python -m ti_slurm.job local-run JOB_DIR JOB_ID  the local backend's detached supervisor
"""

from __future__ import annotations

import sys
import time

STARTED = time.time()  # the job's start timeline: when the supervisor's interpreter got here


def main(argv: list[str]) -> int:
    if argv[:1] == ["supervise"] and len(argv) == 2:
        from ti_slurm.job.supervisor import supervise

        return supervise(argv[1], STARTED)
    if argv[:1] == ["local-run"] and len(argv) == 3 and argv[2].isdigit():
        from ti_slurm.job.supervisor import run_local

        return run_local(argv[1], int(argv[2]), STARTED)
    print("usage: python -m ti_slurm.job supervise JOB_DIR | local-run JOB_DIR JOB_ID", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
