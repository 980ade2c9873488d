"""Rehearse a failure: a job's command that fails one rank the way a real fault does, for the tests and for admins
who want to see what ti-slurm says and does (docs/failures.md)::

    command: python3 -m ti_slurm.admin.rehearse gpu_fault --rank 1 --after 3

Every rank prints a step a second (``step 3 loss 0.25``) and writes it to ``TI_SLURM_PROGRESS_FILE`` (for
``watchdog: {progress: true}``; ``--report tensorboard``: rank 0 writes its step and loss as TensorBoard scalars to
``TI_SLURM_TENSORBOARD_DIR`` instead, as a training does that reports nothing else; ``both``: both); the chosen rank
(``INDEX``, the node's rank) then fails as ``CAUSE`` does, the others go on until the job stops them:

- ``user_error``: imports a module that does not exist (Python's own ``ModuleNotFoundError``);
- ``filesystem``: writes to ``/dev/full`` (the kernel's own ``No space left on device``);
- ``nan``: prints a NaN loss and stops, as a training that checks its loss does (with ``--report tensorboard``: writes
  the NaN loss as its scalar and goes on stepping, as one that does not check it);
- ``hang``: stops stepping and printing while alive (for the watchdog);
- ``stall``: stops stepping but keeps printing (a collective that never returns while a thread logs: only the
  progress watchdog sees it);
- ``gpu_fault``, ``gpu_oom``, ``nccl``: print the lines a GPU fault (the driver's Xid), PyTorch's CUDA OOM and
  NCCL's watchdog print, then exit 1 (no GPU needed: the lines are what ti-slurm reads);
- ``host_oom``: prints the line slurmstepd prints when the step's cgroup killed it for memory, then is killed
  by SIGKILL as the kernel's OOM killer does (a cluster without cgroup enforcement cannot kill it for real);
- ``exit``: exits 3 saying nothing (ti-slurm calls it ``unknown``);
- ``slow``: steps ``--slower`` (0.4: 40%) slower than the others after ``--after`` seconds, and ends with them
  (a straggler: ``watchdog: {progress: true}`` says so in a warning event).

Standard library only; it touches nothing but its own process.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import BinaryIO

FAULTS = (
    *("user_error", "filesystem", "nan", "hang", "stall"),
    *("gpu_fault", "gpu_oom", "nccl", "host_oom", "exit", "slow"),
)
SAID = {
    "gpu_fault": "NVRM: Xid (PCI:0000:3b:00): 79, pid={pid}, GPU has fallen off the bus.",
    "gpu_oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity"
    " of 79.15 GiB of which 3.19 GiB is free.",
    "host_oom": "slurmstepd: error: Detected 1 oom_kill event in StepId={step}. Some of the step tasks have been"
    " OOM Killed.",
    "nccl": "[rank{rank}]:[E ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation timeout:"
    " WorkNCCL(SeqNum=42, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.",
}


def fail(fault: str, rank: int) -> int:
    """Fail as ``fault`` does; the exit code (``hang`` never returns)."""
    if fault == "user_error":
        __import__("ti_slurm_rehearsal_no_such_module")
    if fault == "filesystem":
        with open("/dev/full", "w") as fh:
            fh.write("checkpoint" * 1000)
            fh.flush()
    if fault == "nan":
        print(f"step {rank}: loss nan", flush=True)
        raise SystemExit("ValueError: Loss is nan, stopping training")
    if fault == "hang":
        while True:
            time.sleep(3600)
    if fault == "stall":
        while True:
            print("waiting for the allreduce", flush=True)
            time.sleep(1.0)
    if fault in SAID:
        step = f"{os.environ.get('SLURM_JOB_ID', '0')}.{os.environ.get('SLURM_STEP_ID', '0')}"
        if fault != "host_oom":
            print("Traceback (most recent call last):", file=sys.stderr)
        print(SAID[fault].format(pid=os.getpid(), rank=rank, step=step), file=sys.stderr, flush=True)
    if fault == "host_oom":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    return 3 if fault == "exit" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m ti_slurm.admin.rehearse", description=__doc__.split("\n\n")[0])
    parser.add_argument("fault", choices=FAULTS)
    parser.add_argument("--rank", type=int, default=0, help="the rank that fails (INDEX); the others go on")
    parser.add_argument("--after", type=float, default=2.0, help="seconds of steps before it fails")
    parser.add_argument("--steps", type=float, default=600.0, help="seconds the other ranks step at most")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between steps")
    parser.add_argument("--report", choices=("file", "tensorboard", "both"), default="file", help="where steps go")
    parser.add_argument("--slower", type=float, default=0.4, help="slow: how much longer its steps take (0.4: 40%%)")
    args = parser.parse_args(argv)
    rank = int(os.environ.get("INDEX") or os.environ.get("RANK") or 0)
    started, step = time.monotonic(), 0
    slow = args.fault == "slow" and rank == args.rank
    limit = args.after if rank == args.rank and not slow else args.steps
    progress = os.environ.get("TI_SLURM_PROGRESS_FILE", "") if args.report != "tensorboard" else ""
    scalars = tensorboard_file(rank) if args.report != "file" else None
    nan_at = args.after if args.fault == "nan" and scalars is not None and rank == args.rank else float("inf")
    if nan_at < float("inf"):
        limit = args.steps  # it goes on stepping with a NaN loss: ti-slurm stops it
    while time.monotonic() - started < limit:
        step += 1
        loss = float("nan") if time.monotonic() - started >= nan_at else 1 / step
        print(f"step {step} loss {loss:.4f}", flush=True)
        if progress:
            with open(progress, "w") as fh:
                fh.write(f"{step}\n")
        if scalars is not None:
            from ti_slurm.core.tfevents import scalar_event

            scalars.write(scalar_event("train/loss", step, loss, time.time()))
            scalars.flush()
        late = slow and time.monotonic() - started >= args.after
        time.sleep(args.every * (1 + args.slower) if late else args.every)
    return fail(args.fault, rank) if rank == args.rank and not slow and nan_at == float("inf") else 0


def tensorboard_file(rank: int) -> BinaryIO | None:
    """Rank 0's TensorBoard event file in ``TI_SLURM_TENSORBOARD_DIR`` (None for the others, or without it)."""
    folder = os.environ.get("TI_SLURM_TENSORBOARD_DIR", "")
    if rank != 0 or not folder:
        return None
    from ti_slurm.core.tfevents import file_version_event

    os.makedirs(folder, exist_ok=True)
    name = f"events.out.tfevents.{time.time():.0f}.{os.uname().nodename}.{os.getpid()}"
    fh = open(os.path.join(folder, name), "ab")  # noqa: SIM115 (written to until the process ends)
    fh.write(file_version_event(time.time()))
    return fh


if __name__ == "__main__":
    raise SystemExit(main())
