"""A small MindSpore data-parallel training script: each worker calls mindspore.communication.init().

Run with ``mode: mindspore`` (one worker per node; ti-slurm sets MS_ROLE, MS_SCHED_HOST, MS_SCHED_PORT,
MS_WORKER_NUM and MS_NODE_ID, and runs the scheduler on node 0), or under ``msrun``. It fits y = 3x + 1
with a one-weight model, every worker on its own data, the gradients averaged across workers; at the end
it gathers every worker's weights, checks they are equal and prints one line per worker.
DEVICE_TARGET picks the device (CPU by default; Ascend where there are NPUs).
"""

import argparse
import os
import socket
import sys

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.communication import get_group_size, get_rank, init


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    args, _ = parser.parse_known_args()
    ms.set_device(os.environ.get("DEVICE_TARGET", "CPU"))
    init()
    rank, size = get_rank(), get_group_size()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    net = nn.Dense(1, 1, weight_init="zeros", bias_init="zeros")
    loss_fn = nn.MSELoss()
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)

    def forward(x: Tensor, y: Tensor) -> Tensor:
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward, None, opt.parameters)
    reduce_grads = nn.DistributedGradReducer(opt.parameters, mean=True, degree=size)
    data = np.random.default_rng(rank)  # each worker sees different data
    for _ in range(args.epochs):
        x = data.random((32, 1), dtype=np.float32)
        loss, grads = grad_fn(Tensor(x), Tensor(3 * x + 1))
        opt(reduce_grads(grads))
    weights = ops.cat([p.reshape(-1) for p in net.trainable_params()])
    gathered = ops.AllGather()(weights).asnumpy().reshape(size, -1)
    in_sync = bool((gathered == gathered[0]).all())
    host, last = socket.gethostname(), float(loss.asnumpy())
    print(f"rank {rank}/{size} on {host} loss={last:.4f} in_sync={in_sync}", flush=True)
    sys.exit(0 if in_sync else 1)


if __name__ == "__main__":
    main()
