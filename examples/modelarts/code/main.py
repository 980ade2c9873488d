"""A PyTorch DDP training script written the ModelArts way: it reads only ModelArts' variables.

ModelArts' DDP guide (modelarts-distributed-0011) starts it three ways, and each runs unchanged under
``ti-slurm submit`` with ``platform: modelarts``:

1. one process per node that spawns one worker per accelerator (``torch.multiprocessing.spawn``), told the
   master, its node index and the node count on its command line:
       python ${MA_JOB_DIR}/code/main.py --init_method "tcp://${VC_WORKER_HOSTS%%,*}:$PORT" \
           --rank $VC_TASK_INDEX --world_size $MA_NUM_HOSTS
2. ``python -m torch.distributed.launch`` (code/launch.sh), and
3. ``torchrun`` (code/torchrun.sh), both fed from MA_NUM_HOSTS, VC_TASK_INDEX, MA_NUM_GPUS and
   VC_WORKER_HOSTS.

It fits y = 3x + 1, checks that every process ends with the same weights and prints one line per process.
On a node without GPUs (gloo on the CPU) it starts as many processes as MA_NUM_GPUS says.
"""

import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel


def train(local_rank: int, args: argparse.Namespace, per_node: int) -> None:
    use_cuda = torch.cuda.is_available()
    if args.init_method:  # way 1: this process is one of the node's spawned workers
        rank, world = args.rank * per_node + local_rank, args.world_size * per_node
        dist.init_process_group("nccl" if use_cuda else "gloo", args.init_method, rank=rank, world_size=world)
    else:  # ways 2 and 3: the launcher set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for this process
        dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(1, 1).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)  # each process sees different data
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
    task = f"{os.environ['MA_TASK_NAME']}-{os.environ['VC_TASK_INDEX']}"
    print(f"rank {rank}/{world} on {socket.gethostname()} task={task} in_sync={in_sync}", flush=True)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0 if in_sync else 1)  # skip gloo's teardown (see examples/ddp/train.py)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--init_method", default="", help="tcp://MASTER:PORT: spawn one worker per accelerator")
    parser.add_argument("--rank", type=int, default=0, help="this node's index (VC_TASK_INDEX)")
    parser.add_argument("--world_size", type=int, default=1, help="nodes in the job (MA_NUM_HOSTS)")
    parser.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    parser.add_argument("--epochs", type=int, default=20)
    args, _ = parser.parse_known_args()
    if not args.init_method:
        train(args.local_rank, args, 1)
        return
    per_node = torch.cuda.device_count() or max(int(os.environ.get("MA_NUM_GPUS", "1")), 1)
    mp.spawn(train, args=(args, per_node), nprocs=per_node)


if __name__ == "__main__":
    main()
