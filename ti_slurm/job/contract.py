"""The platform contract: the environment each node of a job sees.

``whole_contract(plan, env, component, job_dir)`` is the one call that builds a node's whole contract (the
attempt's plan, the contract's variables and files, the command's full environment, the folders it needs);
``job/node.py`` does what it says (folders, files, the command), ``ti-slurm env`` and ``node --dry-run`` print
its environment. Its core, ``node_contract(plan, env, component, job_dir)``, is a pure function of the plan and
Slurm's own variables (``SLURM_JOB_NODELIST[_HET_GROUP_<n>]``,
``SLURM_NODEID``, ``SLURM_JOB_ID``, ``SLURM_JOB_PARTITION``). It runs in every
job step, so it imports only the standard library and its siblings.

Ranks come from ``SLURM_NODEID`` (this node's place in its component), never
from matching addresses. The supervisor names each component's nodes of an attempt in rank order
(``TI_SLURM_STEP_NODES_<n>``: a spare took a lost node's place, or a component holds spares); then
they come from there, and this node is ``SLURMD_NODENAME`` among them. Node names become addresses through the resolver
(``/etc/hosts`` or DNS); ``TI_SLURM_NODE_ADDR`` pins every node to one
address (the local runner uses 127.0.0.1).
"""

from __future__ import annotations

import os

from ti_slurm.core.environ import MAX_ENV_STRING, env_string_size
from ti_slurm.core.errors import ContractError
from ti_slurm.core.hostlist import expand, is_number
from ti_slurm.core.paths import stage_root
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.record import Record
from ti_slurm.job.modes import get_mode
from ti_slurm.job.modes.base import JobLayout, NodeContext
from ti_slurm.job.platforms import get_platform

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

# The seed's RDMA variables for HCC machines, in the seed's order and with its values.
RDMA_ENV: dict[str, str] = {
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_IB_SL": "3",
    "NCCL_CHECK_DISABLE": "1",
    "NCCL_P2P_DISABLE": "0",
    "NCCL_IB_DISABLE": "0",
    "NCCL_LL_THRESHOLD": "16384",
    "NCCL_IB_CUDA_SUPPORT": "1",
    "NCCL_IB_HCA": "mlx5_bond",
    "NCCL_NET_GDR_LEVEL": "2",
    "NCCL_IB_QPS_PER_CONNECTION": "4",
    "NCCL_IB_TC": "160",
    "NCCL_PXN_DISABLE": "1",
    "NCCL_IB_TIMEOUT": "24",
    "NCCL_DEBUG": "INFO",
    "NCCL_SOCKET_IFNAME": "eth0",
    "GLOO_SOCKET_IFNAME": "eth0",
    "TCCL_TOPO_AFFINITY": "4",
}


# what every mode's nodes get beside the mode's own (common_env; npu_env on NPU nodes)
COMMON_NAMES = frozenset({"NODE_LIST", "INDEX", "GPU_NUM", "GPU_NUM_PER_NODE", "RANK_TABLE_FILE", "RANK_SIZE"})
OWN_PREFIXES = {"TI_SLURM_": "ti-slurm", "SLURM_": "Slurm"}


def contract_setter(mode: str, platform: str, name: str) -> str | None:
    """Who sets variable ``name`` on the nodes of a ``mode`` job on ``platform``, as a phrase ("mode ddp",
    "MA_* variables ... platform modelarts"); ``None`` when nobody does, so a spec's ``env:`` may set it."""
    if name in get_mode(mode).env_names:
        return f"{name} is set by mode {mode}"
    if name in COMMON_NAMES:
        return f"{name} is set by ti-slurm"
    reserved = {**OWN_PREFIXES, **dict.fromkeys(get_platform(platform).reserved_prefixes, f"platform {platform}")}
    prefix = next((p for p in reserved if name.startswith(p)), None)
    return f"{prefix}* variables are set by {reserved[prefix]}" if prefix else None


class NodeContract(Record):
    """One node's share of the contract."""

    env: dict[str, str]  # contract variables: always set
    defaults: dict[str, str]  # RDMA variables: set unless the environment has them
    hostfile: str | None  # text for the file named by OMPI_MCA_orte_default_hostfile
    node: str  # this node's name
    index: int  # this node's index within its component
    role: str
    runs_command: bool
    component: int = 0  # the component's index
    first_node: str = ""  # the name of the job's first node (DDP's master, Ray's head)
    rank: int = 0  # this node's place among all of the job's nodes (INDEX)
    world: int = 1  # all of the job's nodes
    preflight_addr: str = ""  # the first node's address (where the preflight's collective meets) ...
    preflight_port: int = 0  # ... and its port
    addresses: dict[str, str] = {}  # noqa: RUF012 (copied per instance); the job's one resolution of its names
    listen_ports: tuple[tuple[int, str], ...] = ()  # (port, what for) this node listens on
    addr: str = ""  # this node's address, as the contract gives it to the others


class WholeContract(Record):
    """What one node of an attempt is given: :func:`whole_contract`'s answer."""

    plan: JobPlan  # the attempt's (an elastic job: sized to the nodes it runs on)
    contract: NodeContract
    env: dict[str, str]  # the command's whole environment
    folders: tuple[str, ...]  # the job's folders the contract names (checkpoints, outputs, ...), to exist first


FOLDER_NAMES = ("TI_SLURM_CHECKPOINT_DIR", "TI_SLURM_MODEL_DIR", "TI_SLURM_OUTPUT_DIR", "TI_SLURM_TENSORBOARD_DIR")


def whole_contract(plan: JobPlan, environ: Mapping[str, str], component: int, job_dir: str) -> WholeContract:
    """Node ``SLURM_NODEID`` of component ``component``: the attempt's plan, the contract, the command's full
    environment (RDMA defaults < inherited and the spec's ``env:`` < the contract; the launch agent's and the
    spec's ``python:`` folders first on ``PATH``) and the folders to make."""
    plan = attempt_plan(plan, environ)  # elastic size: as many nodes as this attempt runs on
    contract = node_contract(plan, environ, component, job_dir)
    env = apply(contract, environ, plan.env)
    if plan.path_first:  # the spec's `python:` environment: its `python` (and its tools) is the command's
        env["PATH"] = f"{plan.path_first}:{env['PATH']}" if env.get("PATH") else plan.path_first
    folders = (*(contract.env[n] for n in FOLDER_NAMES), os.path.dirname(contract.env["TI_SLURM_HEARTBEAT_FILE"]))
    return WholeContract(plan, contract, env, folders)


def _get(env: Mapping[str, str], name: str) -> str:
    value = env.get(name)
    if not value:
        raise ContractError(f"{name} is not set: run this inside a Slurm job step (srun), or use the local runner")
    return value


def _int(env: Mapping[str, str], name: str) -> int:
    value = _get(env, name)
    if not is_number(value):
        raise ContractError(f"{name}={value[:40]!r} is not a number")
    return int(value)


def make_resolver(env: Mapping[str, str], shared: Mapping[str, str] | None = None) -> Callable[[str], str]:
    """Name -> IPv4 address, cached; ``TI_SLURM_NODE_ADDR`` pins all names; ``shared`` (the job's
    one resolution of its names, see :func:`read_addresses`) answers first."""
    pinned = env.get("TI_SLURM_NODE_ADDR")
    if pinned:
        return lambda name: pinned
    import _socket as socket  # the C module: ``socket`` would import enum, 9 ms more on every node

    cache: dict[str, str] = dict(shared or {})

    def resolve(name: str) -> str:
        if name not in cache:
            try:
                cache[name] = socket.gethostbyname(name)
            except OSError as exc:
                raise ContractError(f"cannot resolve node {name!r} to an address: {exc}") from None
        return cache[name]

    return resolve


def job_ports(
    plan: JobPlan, job_id: int, nodes: tuple[tuple[str, ...], ...], per_node: bool
) -> tuple[tuple[int, ...], ...]:
    """Ports for each node of each component.

    On Slurm every node of a component listens on the same port (nodes differ),
    and components differ by one; the block's base derives from the job id,
    inside the site's range, which sits above Linux's ephemeral range. The local
    runner puts all nodes on one host, so there each node gets its own port.
    """
    mode = get_mode(plan.mode)
    block, width = mode.ports_per_job, mode.ports_per_node
    lo, hi = plan.port_range
    base = lo + (job_id % ((hi - lo + 1) // block)) * block
    out = []
    offset = 0
    for c, names in enumerate(nodes):
        if per_node:
            out.append(tuple(base + (offset + i) * width for i in range(len(names))))
            offset += len(names)
        else:
            out.append(tuple([base + c * width] * len(names)))
    return tuple(out)


def read_addresses(path: str) -> dict[str, str]:
    """``<name> <address>`` lines (the supervisor's one resolution of the job's names); ``{}`` if absent."""
    try:
        with open(path, encoding="utf-8") as fh:
            return dict(line.split()[:2] for line in fh if len(line.split()) >= 2)
    except OSError:
        return {}


def resolve_all(names: list[str]) -> str:
    """The text of an addresses file for ``names``: each resolved once, here (names that fail are left out)."""
    import _socket  # the C module: ``socket`` would import enum

    lines = []
    for name in dict.fromkeys(names):
        try:
            lines.append(f"{name} {_socket.gethostbyname(name)}\n")
        except OSError:
            continue
    return "".join(lines)


def job_layout(plan: JobPlan, env: Mapping[str, str], shared: Mapping[str, str] | None = None) -> JobLayout:
    """Read the job's node lists from Slurm's variables."""
    # In a heterogeneous job every component has its own id; ports derive from the first one's.
    leader = next((v for v in ("SLURM_HET_JOB_ID", "SLURM_JOB_ID_HET_GROUP_0") if env.get(v)), "SLURM_JOB_ID")
    job_id = _int(env, leader)
    n = len(plan.components)
    if n == 1:
        nodelists = [env.get("SLURM_JOB_NODELIST_HET_GROUP_0") or _get(env, "SLURM_JOB_NODELIST")]
        partitions = [env.get("SLURM_JOB_PARTITION", "")]
    else:
        if not env.get("SLURM_JOB_NODELIST_HET_GROUP_0"):
            raise ContractError(
                f"mode {plan.mode} runs as a heterogeneous job, but SLURM_JOB_NODELIST_HET_GROUP_0 is not set"
            )
        nodelists = [_get(env, f"SLURM_JOB_NODELIST_HET_GROUP_{g}") for g in range(n)]
        partitions = [
            env.get(f"SLURM_JOB_PARTITION_HET_GROUP_{g}", env.get("SLURM_JOB_PARTITION", "")) for g in range(n)
        ]
    if env.get("TI_SLURM_STEP_NODES_0"):  # the supervisor's choice of this attempt's nodes, in rank order
        nodelists = [_get(env, f"TI_SLURM_STEP_NODES_{c}") for c in range(n)]
    nodes = tuple(tuple(expand(text)) for text in nodelists)
    for comp, names in zip(plan.components, nodes, strict=True):
        if len(names) != comp.nodes:
            raise ContractError(
                f"component {comp.name} expects {comp.nodes} nodes but Slurm gave {len(names)}: {','.join(names)[:200]}"
            )
    per_node = env.get("TI_SLURM_PORT_PER_NODE") == "1"
    resolver = make_resolver(env, shared)
    return JobLayout(job_id, nodes, job_ports(plan, job_id, nodes, per_node), tuple(partitions), resolver)


def attempt_plan(plan: JobPlan, env: Mapping[str, str]) -> JobPlan:
    """The plan sized to this attempt's nodes: with an elastic component, as many as the supervisor named
    (what Slurm gave in the range, less the nodes lost since), so that every count follows from them."""
    if not env.get("TI_SLURM_STEP_NODES_0") or not any(c.elastic for c in plan.components):
        return plan
    counts = [len(expand(_get(env, f"TI_SLURM_STEP_NODES_{c}"))) for c in range(len(plan.components))]
    try:
        return plan.sized(counts)
    except ValueError as exc:
        raise ContractError(str(exc)) from None


def node_index(env: Mapping[str, str], names: tuple[str, ...]) -> int:
    """This node's place in its component: ``SLURMD_NODENAME`` among the attempt's nodes the supervisor named,
    else ``SLURM_NODEID``."""
    if not env.get("TI_SLURM_STEP_NODES_0"):
        return _int(env, "SLURM_NODEID")
    me = _get(env, "SLURMD_NODENAME")
    if me not in names:
        raise ContractError(f"node {me} is not one of this attempt's nodes ({','.join(names)[:200]})")
    return names.index(me)


def rdma_env(plan: JobPlan, component: int, partition: str) -> dict[str, str]:
    """The NCCL RDMA variables for a node of component ``component`` on ``partition`` (empty when RDMA is off).

    ``rdma: auto`` follows the TI platform: a job of at least 2 nodes whose nodes are
    whole 8-GPU machines (both numbers are site settings), here on an RDMA partition.
    """
    on = plan.rdma == "on" or (
        plan.rdma == "auto"
        and partition in plan.rdma_partitions
        and plan.total_nodes >= plan.rdma_min_nodes
        and plan.components[component].gpus_per_node >= plan.rdma_min_gpus_per_node
    )
    if not on:
        return {}
    out = dict(RDMA_ENV)
    out.update(plan.nccl_overrides.get("*", {}))
    out.update(plan.nccl_overrides.get(partition, {}))
    return out


def check_env_sizes(env: Mapping[str, str]) -> None:
    """Fail with the variable's name instead of letting exec fail with E2BIG."""
    for name, value in env.items():
        size = env_string_size(name, value)
        if size > MAX_ENV_STRING:
            raise ContractError(
                f"{name} would be {size} bytes, over Linux's {MAX_ENV_STRING}-byte limit for one environment "
                "string; use fewer nodes per job (see docs/modes.md, environment size)"
            )


def node_contract(plan: JobPlan, env: Mapping[str, str], component: int, job_dir: str) -> NodeContract:
    """This node's contract: the node is ``SLURM_NODEID`` within component number ``component``."""
    from ti_slurm.core.paths import JobPaths

    shared = read_addresses(JobPaths(job_dir).addresses)
    layout = job_layout(plan, env, shared)
    if not 0 <= component < len(layout.nodes):
        raise ContractError(f"component {component} is not a component of this {plan.mode} job")
    index = node_index(env, layout.nodes[component])
    if index >= len(layout.nodes[component]):
        raise ContractError(f"SLURM_NODEID={index} is outside component {plan.components[component].name}")
    ctx = NodeContext(plan, layout, component, index, job_dir)
    mode = get_mode(plan.mode)
    contract_env = common_env(ctx)
    contract_env.update(mode.node_env(ctx))
    contract_env["TI_SLURM_ROLE"] = mode.role(ctx)
    for name, value in get_platform(plan.platform).node_env(ctx, contract_env, env).items():
        contract_env.setdefault(name, value)  # the platform adds; the mode's own names stay
    contract_env.update(restart_env(ctx, env))
    contract_env.update(npu_env(ctx))
    contract_env.update(data_env(ctx))
    check_env_sizes(contract_env)
    defaults = rdma_env(plan, component, layout.partitions[component])
    if plan.watchdog_silence or plan.watchdog_progress:  # output reaches the log as printed; stacks on SIGABRT
        defaults.update(PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
    return NodeContract(
        env=contract_env,
        defaults=defaults,
        hostfile=mode.hostfile(ctx),
        node=ctx.name,
        index=index,
        component=component,
        role=contract_env["TI_SLURM_ROLE"],
        runs_command=mode.runs_command(ctx),
        first_node=layout.nodes[0][0],
        rank=ctx.global_index,
        world=plan.total_nodes,
        preflight_addr=layout.addr(layout.nodes[0][0]),
        preflight_port=layout.ports[0][0] + mode.ports_per_job - 1,  # the block's last: free before the command
        addresses=shared,
        listen_ports=tuple(mode.listen_ports(ctx)),
        addr=layout.addr(ctx.name),
    )


def common_env(ctx: NodeContext) -> dict[str, str]:
    """Variables every mode shares: NODE_LIST, INDEX, GPU counts, and ti-slurm's own."""
    plan, layout = ctx.plan, ctx.layout
    node_list = ",".join(
        f"{name}:{comp.gpus_per_node}"
        for comp, names in zip(plan.components, layout.nodes, strict=True)
        for name in names
    )
    component = plan.components[ctx.component].name
    code = {"TI_SLURM_CODE_DIR": plan.code_dir} if plan.code_dir else {}  # the snapshot taken at submit
    return code | {
        "NODE_LIST": node_list,
        "INDEX": str(ctx.global_index),
        "GPU_NUM": str(sum(c.gpus_per_node * c.nodes for c in plan.components)),
        "GPU_NUM_PER_NODE": str(plan.components[ctx.component].gpus_per_node),
        "TI_SLURM_MODE": plan.mode,
        "TI_SLURM_JOB_DIR": ctx.job_dir,
        "TI_SLURM_COMPONENT": component,
        "TI_SLURM_GROUP": component,  # the name before TI_SLURM_COMPONENT; kept for scripts that read it
    }


def data_env(ctx: NodeContext) -> dict[str, str]:
    """Where the job's data is: each input channel (staged ones: their copy on this node's disk), the model and
    output directories (``/opt/ml/...`` on the TI platform), and the TensorBoard directory inside the output."""
    from ti_slurm.core.paths import JobPaths, node_label

    plan, paths = ctx.plan, JobPaths(ctx.job_dir)
    results = paths.results(plan.outputs)
    out = {"TI_SLURM_MODEL_DIR": os.path.join(results, "model"), "TI_SLURM_OUTPUT_DIR": os.path.join(results, "output")}
    out["TI_SLURM_TENSORBOARD_DIR"] = paths.tensorboard(plan.outputs)
    node = node_label(plan.components[ctx.component].name, ctx.index)
    for name, path in plan.inputs.items():
        staged = name in plan.staged
        out[f"TI_SLURM_INPUT_{name.upper()}"] = stage_path(plan, paths.job_id, node, name) if staged else path
    return out


def stage_path(plan: JobPlan, job_id: str, node: str, channel: str) -> str:
    """Where a staged channel is copied to on a node: the site's ``stage_dir``, per user, job and node step
    (two steps of a job on one machine, as the local runner's, copy apart)."""
    return os.path.join(stage_root(plan.stage_dir), job_id, node, channel)


def npu_env(ctx: NodeContext) -> dict[str, str]:
    """An NPU node's: RANK_TABLE_FILE (the job's rank table, written before the command starts) and
    RANK_SIZE (every NPU of the job), as Ascend's launchers expect them."""
    from ti_slurm.core.paths import JobPaths

    plan = ctx.plan
    if not plan.components[ctx.component].npus_per_node:
        return {}
    total = sum(c.npus_per_node * c.nodes for c in plan.components)
    return {"RANK_TABLE_FILE": JobPaths(ctx.job_dir).rank_table, "RANK_SIZE": str(total)}


def checkpoint_dir(plan: JobPlan, job_dir: str) -> str:
    """TI_SLURM_CHECKPOINT_DIR: the spec's directory (relative to the workdir), else ``<job dir>/checkpoint``.

    A relative workdir (a remote submission's, from the login's home) is where the batch script went, and
    so every node's step's own working directory.
    """
    from ti_slurm.core.paths import JobPaths

    if not plan.checkpoint_dir:
        return JobPaths(job_dir).checkpoint_dir
    return os.path.join(plan.run_dir(), plan.checkpoint_dir)


def restart_env(ctx: NodeContext, env: Mapping[str, str]) -> dict[str, str]:
    """The checkpoint contract: which attempt this is, where checkpoints survive, the heartbeat file."""
    from ti_slurm.core.paths import JobPaths

    # the supervisor's attempt (requeues and restarts in place); Slurm's restart count in a hand-written script
    count = env.get("TI_SLURM_ATTEMPT") or env.get("SLURM_RESTART_COUNT", "0")
    out = {
        "TI_SLURM_RESTART_COUNT": count if is_number(count) else "0",
        "TI_SLURM_CHECKPOINT_DIR": checkpoint_dir(ctx.plan, ctx.job_dir),
        "TI_SLURM_HEARTBEAT_FILE": JobPaths(ctx.job_dir).heartbeat(ctx.plan.components[ctx.component].name, ctx.index),
        "TI_SLURM_PROGRESS_FILE": JobPaths(ctx.job_dir).progress(ctx.plan.components[ctx.component].name, ctx.index),
    }
    if ctx.plan.checkpoint_signal:  # the signal the command gets before the time limit and on preemption
        out["TI_SLURM_CHECKPOINT_SIGNAL"] = ctx.plan.checkpoint_signal
    return out


def apply(contract: NodeContract, base: Mapping[str, str], user_env: Mapping[str, str]) -> dict[str, str]:
    """The full environment for the command: RDMA defaults < inherited and user env < contract.

    Modes with a launch agent (MPI, Horovod) also get its directory first on PATH.
    """
    out = dict(contract.defaults)
    out.update(base)
    out.update(user_env)
    out.update(contract.env)
    agent = contract.env.get("TI_SLURM_AGENT_DIR")
    if agent:
        out["PATH"] = f"{agent}:{out['PATH']}" if out.get("PATH") else agent
    return out
