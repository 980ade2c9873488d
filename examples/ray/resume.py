"""A Ray driver that survives preemption: count with remote tasks, save the count on the signal, resume.

Run as a ti-slurm ``ray`` job's command with ``restart:`` (see the README's "Jobs that survive"):
the driver (on the head) gets ``$TI_SLURM_CHECKPOINT_SIGNAL``, saves into ``$TI_SLURM_CHECKPOINT_DIR``
and exits; the job is requeued, the head and workers come back together, and the next attempt goes on.

    python resume.py 60
"""

import os
import signal
import sys
import time

import ray

stop_requested = False


def request_stop(signum: int, frame: object) -> None:
    global stop_requested
    stop_requested = True


@ray.remote(resources={"Rank:1": 0.001})  # on the first worker node
def square(x: int) -> int:
    return x * x


def main() -> None:
    signal.signal(getattr(signal, "SIG" + os.environ.get("TI_SLURM_CHECKPOINT_SIGNAL", "USR2")), request_stop)
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    ckpt = os.path.join(os.environ.get("TI_SLURM_CHECKPOINT_DIR", "."), "count")
    n, acc = 0, 0
    if os.path.exists(ckpt):
        with open(ckpt) as fh:
            n, acc = (int(x) for x in fh.read().split())
    ray.init()
    print(f"attempt {os.environ.get('TI_SLURM_RESTART_COUNT', '0')} starts at {n}", flush=True)
    while n < total:
        if stop_requested:
            with open(ckpt + ".tmp", "w") as fh:
                fh.write(f"{n} {acc}\n")
            os.replace(ckpt + ".tmp", ckpt)
            print(f"saved {n}; exiting for the requeue", flush=True)
            return
        acc += ray.get(square.remote(n))
        n += 1
        time.sleep(0.5)
    print(f"sum of squares below {total}: {acc} after {os.environ.get('TI_SLURM_RESTART_COUNT', '0')} restarts")


if __name__ == "__main__":
    main()
