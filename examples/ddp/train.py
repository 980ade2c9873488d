"""A small PyTorch DDP training script (CPU + gloo, or GPU + NCCL).

Started by torch.distributed.launch / torchrun with the TI platform's
variables, e.g. the seed's line:

    python -m torch.distributed.launch --nproc_per_node $GPU_NUM_PER_NODE \
        --nnodes $WORLD_SIZE --node_rank $RANK \
        --master_addr $MASTER_ADDR --master_port $MASTER_PORT train.py

It fits y = 3x + 1 with a linear model, checks that every rank ends with the
same weights (DDP kept them in sync) and prints one line per rank.
"""

import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--local-rank", "--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--fail-rank", type=int, default=-1, help="this global rank exits 3 (failure tests)")
    args, _ = parser.parse_known_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{args.local_rank}" if use_cuda else "cpu")
    if rank == args.fail_rank:
        print(f"rank {rank}: exiting 3 on purpose", flush=True)
        os._exit(3)

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(1, 1).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)  # each rank sees different data
    for _ in range(args.epochs):
        x = torch.rand(32, 1, generator=gen).to(device)
        loss = torch.nn.functional.mse_loss(model(x), 3 * x + 1)
        opt.zero_grad()
        loss.backward()
        opt.step()

    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights)
    in_sync = all(torch.equal(g, gathered[0]) for g in gathered)
    # one write per line: the processes of a node share its log
    line = (
        f"rank {rank}/{world} on {socket.gethostname()} node_rank={os.environ.get('GROUP_RANK', '?')} "
        f"loss={loss.item():.4f} in_sync={in_sync}\n"
    )
    print(line, end="", flush=True)
    # Every rank is done with the group once the barrier returns. Leave without the interpreter's and
    # C++'s teardown: gloo's worker threads still alive at that point abort the process ("terminate
    # called without an active exception", SIGABRT) on a busy machine, failing a finished run.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0 if in_sync else 1)


if __name__ == "__main__":
    main()
