# Place a function on the node with RANK 1 through its custom resource "Rank:1".
import os
import socket

import ray

ray.init()


@ray.remote(resources={"Rank:1": 0.001})
def f(a, b, c):
    return a + b + c, socket.gethostname(), os.environ.get("RANK")


value, host, rank = ray.get(f.remote(1, 2, 3))
print(f"f(1, 2, 3) = {value} on {host} (RANK={rank})")
print("nodes:", sorted((n["NodeManagerHostname"], n["NodeManagerAddress"]) for n in ray.nodes() if n["Alive"]))
