"""DDP training that survives time limits, preemption and lost nodes: save on the signal, resume.

The checkpoint contract (see the README's "Jobs that survive"): every node's
command gets ``$TI_SLURM_CHECKPOINT_SIGNAL`` (USR2 by default) before the time
limit or when the job is preempted; it saves into ``$TI_SLURM_CHECKPOINT_DIR``
(kept across requeues) and exits; ti-slurm requeues the job under the same id,
and the next attempt (``$TI_SLURM_RESTART_COUNT`` = 1, 2, ...) resumes from
the checkpoint. Start it with the seed's launch line, e.g.::

    python -m torch.distributed.launch --nproc_per_node 1 --nnodes $WORLD_SIZE --node_rank $RANK \\
        --master_addr $MASTER_ADDR --master_port $MASTER_PORT resume.py --steps 300 --out model.json

Every step's data comes from (rank, step) alone, so a run interrupted any
number of times ends with exactly the model of an uninterrupted run: the
final weights go to ``--out`` as exact hex floats.
"""

import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

stop_requested = False


def request_stop(signum: int, frame: object) -> None:
    global stop_requested
    stop_requested = True


def save(model: DistributedDataParallel, opt: torch.optim.Optimizer, step: int, ckpt: str) -> None:
    torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt + ".tmp")
    os.replace(ckpt + ".tmp", ckpt)  # a checkpoint is whole or absent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--local-rank", "--local_rank", type=int, default=0)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="make each step take this long")
    parser.add_argument("--out", default="", help="write the final weights here (rank 0)")
    parser.add_argument("--fail-rank", type=int, default=-1, help="this rank exits 3 at --fail-step")
    parser.add_argument("--hang-rank", type=int, default=-1, help="this rank stops printing at --fail-step")
    parser.add_argument("--fail-step", type=int, default=5)
    parser.add_argument("--fail-once", action="store_true", help="fail or hang in the first attempt only")
    parser.add_argument("--save-every", type=int, default=0, help="rank 0 also saves a checkpoint every N steps")
    args, _ = parser.parse_known_args()
    signal.signal(getattr(signal, "SIG" + os.environ.get("TI_SLURM_CHECKPOINT_SIGNAL", "USR2")), request_stop)

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ckpt = os.path.join(os.environ.get("TI_SLURM_CHECKPOINT_DIR", "."), "checkpoint.pt")
    step = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
    attempt, world = os.environ.get("TI_SLURM_RESTART_COUNT", "0"), dist.get_world_size()
    print(f"rank {rank}: attempt {attempt} starts at step {step}, {world} ranks", flush=True)

    while step < args.steps:
        stop = torch.tensor([1.0 if stop_requested else 0.0])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # every rank stops at the same step
        if stop.item():
            if rank == 0:
                save(model, opt, step, ckpt)
                print(f"rank 0: saved step {step}; exiting for the requeue", flush=True)
            dist.barrier()
            sys.stdout.flush()
            os._exit(0)
        first = os.environ.get("TI_SLURM_RESTART_COUNT", "0") == "0"
        if step == args.fail_step and rank == args.fail_rank and (first or not args.fail_once):
            print(f"rank {rank}: exiting 3 on purpose at step {step}", flush=True)
            os._exit(3)
        if step == args.fail_step and rank == args.hang_rank and (first or not args.fail_once):  # silently
            while True:
                time.sleep(1)
        gen = torch.Generator().manual_seed(rank * 100003 + step)  # the data is a function of (rank, step)
        x = torch.rand(16, 4, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True) * 0.5 + 1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if args.save_every and step % args.save_every == 0 and rank == 0:
            save(model, opt, step, ckpt)
        if step % 20 == 0:
            print(f"rank {rank}: step {step} loss {loss.item():.5f}", flush=True)
        time.sleep(args.step_seconds)

    if rank == 0 and args.out:
        weights = [w.hex() for p in model.module.parameters() for w in p.detach().flatten().tolist()]
        with open(args.out, "w") as fh:
            json.dump({"steps": step, "weights": weights}, fh)
    print(f"rank {rank}: done at step {step}", flush=True)
    dist.barrier()  # then leave without gloo's teardown (see train.py)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
