"""``ti-slurm init``: a commented starter spec for a mode and a platform, that submits as written.

Its command prints what the mode gives each node (so ``submit --local --wait`` shows the contract at
work on this machine); the comment above it is the platform's own launch line to put in its place.
"""

from __future__ import annotations

# per mode: the nodes' lines, the command that shows the contract, and the seeds' launch line for the platform
_NODES = {
    "ddp": "nodes: 2                      # or {min: 2, max: 4}: elastic size\n"
    "gpus_per_node: 0              # 8 on whole GPU machines",
    "mpi": "nodes: 2\ngpus_per_node: 0              # the hostfile's slots: GPUs per node, at least 1",
    "horovod": "nodes: 2\ngpus_per_node: 0",
    "mindspore": "nodes: 2\n"
    "# python: /opt/envs/mindspore/bin/python   # one with MindSpore and NumPy 1: its bin/ is first on PATH",
    "ps-worker": "ps: {nodes: 1, cpus_per_node: 1}       # parameter servers: CPU only\n"
    "worker: {nodes: 2, gpus_per_node: 0}",
    "ray": "head: {cpus_per_node: 1}\nworker_groups:                 # 0 to 5 groups\n  - {nodes: 1, cpus_per_node: 1}",
}
_SHOW = {
    "ddp": 'echo "node $RANK of $WORLD_SIZE: master $MASTER_ADDR:$MASTER_PORT"',
    "mpi": 'echo "node $INDEX: hosts $NODE_IP_SLOT_LIST"',
    "horovod": 'echo "launcher on $(hostname): hosts $NODE_IP_SLOT_LIST"',
    "mindspore": 'echo "worker $MS_NODE_ID of $MS_WORKER_NUM: scheduler $MS_SCHED_HOST:$MS_SCHED_PORT"',
    # parameter servers run until the workers are done: ti-slurm then stops them
    "ps-worker": 'echo "$TI_SLURM_ROLE: $TF_CONFIG"; if [ "$TI_SLURM_ROLE" = ps ]; then exec sleep 86400; fi',
    "ray": 'echo "head $HEAD_ADDR:$HEAD_PORT; driver on RANK $RANK"',
}
_LAUNCH = {
    "ddp": "python -m torch.distributed.launch --nproc_per_node $GPU_NUM_PER_NODE --nnodes $WORLD_SIZE"
    " --node_rank $RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT train.py",
    "mpi": "mpirun -np $GPU_NUM -H $NODE_IP_SLOT_LIST python train.py   # better as mode horovod: once, from node 0",
    "horovod": "mpirun -np $GPU_NUM -H $NODE_IP_SLOT_LIST -bind-to none -map-by slot -x NCCL_DEBUG=INFO"
    " -x LD_LIBRARY_PATH -x PATH -mca pml ob1 -mca btl ^openib python train.py",
    "mindspore": "python train.py   # calls mindspore.communication.init(); or msrun with $MS_* (docs/modelarts.md)",
    "ps-worker": "python train.py   # reads TF_CONFIG",
    "ray": "cd /opt/ml/code; python job.py   # ray.init() connects to the job's cluster",
}
_MODELARTS = {
    "ddp": 'echo "task $VC_TASK_INDEX of $MA_NUM_HOSTS: hosts $VC_WORKER_HOSTS"',
    # ModelArts appends --task_name=ps|worker to a PS-Worker task's command: the last echo shows it
    "ps-worker": 'if [ "$MA_TASK_NAME" = ps ]; then exec sleep 86400; fi;'
    ' echo "$MA_TASK_NAME $VC_TASK_INDEX: ps $VC_PS_HOSTS, workers $VC_WORKER_HOSTS; arguments:"',
}


def starter(mode: str, platform: str = "ti") -> str:
    """The starter spec's text (a :class:`~ti_slurm.core.errors.ConfigError` for a mode or platform not known)."""
    from ti_slurm.core.errors import ConfigError
    from ti_slurm.job.modes import mode_names
    from ti_slurm.job.platforms import platform_names

    if mode not in _NODES:
        raise ConfigError("--mode", mode, f"expected one of: {', '.join(m for m in mode_names() if m in _NODES)}")
    if platform not in platform_names():
        raise ConfigError("--platform", platform, f"expected one of: {', '.join(platform_names())}")
    show = _MODELARTS.get(mode, _SHOW[mode]) if platform == "modelarts" else _SHOW[mode]
    lines = [
        "# yaml-language-server: $schema=ti-slurm.schema.json",
        "# A ti-slurm job (made by: ti-slurm init). Try it here: ti-slurm submit --local --wait job.yaml",
        "# On Slurm: ti-slurm submit --wait job.yaml. Every field: docs/reference/spec.md;",
        "# checking it in your editor: ti-slurm schema > ti-slurm.schema.json (docs/specs.md).",
        f"name: my-{mode}",
        f"mode: {mode}",
    ]
    if platform != "ti":
        lines.append(f"platform: {platform}             # the nodes also get ModelArts' MA_*/VC_* variables")
    lines += [
        _NODES[mode],
        "# partition: debug             # Slurm placement (default: the cluster's); also account, qos, time",
        "# Prints what the mode gives each node. Your training's own line goes here, e.g.:",
        f"#   {_LAUNCH[mode]}",
        f"command: {_quoted(show)}",
    ]
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    """``text`` as one YAML single-quoted scalar."""
    return "'" + text.replace("'", "''") + "'"
