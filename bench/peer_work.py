"""The work every tool runs in bench/peers.py: the same Python, as a script (ti-slurm, TorchX, sbatch) or as
functions (submitit). Each writes what it saw into a folder shared by all nodes.

    python peer_work.py stamp DIR     # write the time this node's code started: DIR/t1-<host>-<pid>
    python peer_work.py fail DIR      # rank 1 writes DIR/tfail and exits 3; the other ranks sleep 60 s
    python peer_work.py sleep DIR     # stamp, then sleep 300 s (to be cancelled)
    python peer_work.py train DIR     # a real torch DDP job (gloo): median step time -> DIR/train-<rank>.json
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

STEPS, WARMUP = 40, 5


def rank() -> int:
    """This process's rank as the launcher told it (torchrun's RANK, else srun's SLURM_PROCID)."""
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))


def stamp(folder: str) -> None:
    with open(os.path.join(folder, f"t1-{socket.gethostname()}-{os.getpid()}"), "w") as fh:
        fh.write(repr(time.time()))


def fail(folder: str) -> None:
    if rank() == 1:
        with open(os.path.join(folder, "tfail"), "w") as fh:
            fh.write(repr(time.time()))
        sys.exit(3)
    time.sleep(60)


def sleep(folder: str) -> None:
    stamp(folder)
    time.sleep(300)


def train(folder: str) -> None:
    """DDP over gloo on a small MLP: the median of STEPS step times after WARMUP, and how the process was placed."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
    times = []
    for step in range(WARMUP + STEPS):
        start = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if step >= WARMUP:
            times.append(time.perf_counter() - start)
    times.sort()
    result = {
        "rank": dist.get_rank(),
        "world": dist.get_world_size(),
        "host": socket.gethostname(),
        "step_s": times[len(times) // 2],
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpus_allowed": len(os.sched_getaffinity(0)),
    }
    with open(os.path.join(folder, f"train-{dist.get_rank()}.json"), "w") as fh:
        json.dump(result, fh)
    dist.destroy_process_group()


def train_submitit(folder: str) -> None:
    """:func:`train` as a submitit user writes it: submitit's helper sets the torch.distributed variables."""
    import submitit

    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    train(folder)


WORK = {"stamp": stamp, "fail": fail, "sleep": sleep, "train": train}

if __name__ == "__main__":
    WORK[sys.argv[1]](sys.argv[2])
