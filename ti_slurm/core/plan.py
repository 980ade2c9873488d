"""The job plan: what a spec becomes once decided, as plain data.

:func:`ti_slurm.submitting.planning.make_plan` makes it at submit. The plan travels into
the job as JSON and is read back with :meth:`JobPlan.from_json` in every job
step, so the classes are :class:`~ti_slurm.core.record.Record`s (frozen
dataclasses without importing ``dataclasses``) and this module imports
nothing heavy.
"""

from __future__ import annotations

import os
import sys

from ti_slurm.core.record import Record

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

PLAN_VERSION = 7  # 2: the plan names its platform; 3: NPUs (npus_per_node, npu_gres, hccn_conf);
# 4: the job layout (code_*, inputs, staged, stage_dir, outputs) and in-place restarts (restart_in_place);
# 5: spare nodes (Component.spares); 6: elastic size (Component.min_nodes); 7: sweeps (points, max_parallel)
# and notifications (notify, notify_proxy)

PARAM_PREFIX = "TI_SLURM_PARAM_"  # a sweep point's value of parameter lr: TI_SLURM_PARAM_LR


class Container(Record):
    """The training image a component's commands run in (``container:`` in the spec)."""

    image: str  # a squashfs file or enroot-importable reference (pyxis), an OCI bundle directory (oci)
    runtime: str = ""  # pyxis | oci; "": the site's default, decided on the node
    mounts: tuple[str, ...] = ()  # SRC:DST[:ro|rw]
    workdir: str = ""  # "": the job's workdir, mounted at its own path


class Component(Record):
    """Nodes alike in role and resources: one component of a Slurm heterogeneous job when there are several."""

    name: str  # ddp | mpi | horovod | ps | worker | head | worker1..worker5
    nodes: int
    gpus_per_node: int
    cpus_per_node: int
    npus_per_node: int = 0  # Ascend NPUs (Slurm GRES npu_gres): each such node is a server of the rank table
    mem: str | None = None
    partition: str | None = None
    command: str = ""  # this role's own start command; "" runs the job's
    container: Container | None = None  # None: the command runs on the bare node
    spares: int = 0  # nodes allocated beyond `nodes`, held idle: each can take a lost node's place
    min_nodes: int = 0  # elastic size (`nodes: {min, max}`, `nodes` the max): the fewest it runs on; 0: fixed

    @property
    def allocated(self) -> int:
        """The nodes Slurm allocates to the component at most: its own and its spares."""
        return self.nodes + self.spares

    @property
    def fewest(self) -> int:
        """The fewest nodes the component runs on: ``min_nodes`` when its size is elastic, else ``nodes``."""
        return self.min_nodes or self.nodes

    @property
    def elastic(self) -> bool:
        return self.fewest < self.nodes

    @property
    def node_request(self) -> str:
        """What Slurm is asked for (``--nodes``): ``8``, or a range ``6-8`` when the size is elastic (spares
        on top of both ends: Slurm gives the spares before the component shrinks)."""
        if not self.elastic:
            return str(self.allocated)
        return f"{self.fewest + self.spares}-{self.allocated}"

    @property
    def slots(self) -> int:
        """Processes per node for hostfiles and NODE_IP_SLOT_LIST: one per GPU (or NPU), at least one."""
        return max(self.accelerators, 1)

    @property
    def accelerators(self) -> int:
        """GPUs or NPUs per node (ModelArts' MA_NUM_GPUS counts either)."""
        return self.gpus_per_node or self.npus_per_node


class JobPlan(Record):
    """Everything the job needs, decided before submission."""

    name: str
    mode: str
    command: str
    components: tuple[Component, ...]
    env: dict[str, str] = {}  # noqa: RUF012 (Record copies it per instance)
    rdma: str = "auto"  # auto | on | off
    rdma_partitions: tuple[str, ...] = ()
    rdma_min_nodes: int = 2
    rdma_min_gpus_per_node: int = 8
    nccl_overrides: dict[str, dict[str, str]] = {}  # noqa: RUF012 (copied per instance); partition or "*" -> vars
    master_port: int | None = None
    port_range: tuple[int, int] = (61000, 65535)
    rendezvous_timeout: int = 300
    preflight: bool = True  # each node checks names, ports, GPUs and RDMA before the command
    preflight_allreduce: bool = False  # ... and then takes part in a tiny collective across every node
    sysfs_root: str = "/sys"  # where the preflight reads InfiniBand ports ("{node}": the node's name)
    npu_gres: str = "npu"  # the Slurm GRES name of Ascend NPUs
    hccn_conf: str = "/etc/hccn.conf"  # each node's NPU device IPs (address_<id>=); "{node}": the node's name
    stop_grace: int = 10
    # surviving interruptions: requeues allowed, and for which causes (preempt timeout node_fail failure hang)
    dependency: str = ""  # Slurm's --dependency (afterok:123:124): the job runs once those ended so
    restart_max: int = 0
    restart_on: tuple[str, ...] = ()
    restart_in_place: int = 0  # restarts inside the allocation after a failure or a hang (before any requeue)
    expedited_requeue: bool = False  # the site's: --requeue=expedite (Slurm 25.11), no wait before starting again
    failure_signatures: tuple[tuple[str, str], ...] = ()  # the site's (cause, regex), tried before ti-slurm's
    checkpoint_signal: str = ""  # e.g. "USR2": every node's command gets it signal_before s before the limit
    signal_before: int = 0
    watchdog_silence: int = 0  # a node silent this long is hung (0: no watchdog)
    watchdog_progress: bool = False  # a node whose training step (TI_SLURM_PROGRESS_FILE) stopped advancing is hung
    watchdog_straggler: int = 0  # a node stepping 30% slower than the others this long is a straggler (0: not judged)
    checkpoint_dir: str = ""  # TI_SLURM_CHECKPOINT_DIR ("": <job dir>/checkpoint)
    platform: str = "ti"  # whose contract the nodes see beyond the mode's (ti | modelarts)
    processes: str = "one"  # one | per-npu: the command once per NPU of the node (DEVICE_ID, RANK_ID, ...)
    output_dir: str = "ti-slurm-jobs"
    workdir: str | None = None
    # the code snapshot the nodes run (ti_slurm/submitting/packager.py), when the spec asked for one
    code_dir: str = ""  # the snapshot: TI_SLURM_CODE_DIR (a remote plan's, until the login takes it: the source)
    code_tree: str = ""  # its hash
    code_commit: str = ""  # git's HEAD where the code was a checkout ...
    code_dirty: bool = False  # ... with changes not committed
    inputs: dict[str, str] = {}  # noqa: RUF012 (copied per instance); data channel -> its path (absolute)
    staged: tuple[str, ...] = ()  # the channels copied to each node's local disk before the command
    stage_dir: str = "/tmp"  # where on a node staged channels go (the site's)
    outputs: str = ""  # the base of each job's model/ and output/ ("": the output directory)
    python: str = sys.executable
    path_first: str = ""  # the folder of the spec's `python:` (its bin/): first on the command's PATH
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    sbatch: dict[str, str | int | bool] = {}  # noqa: RUF012 (Record copies it per instance)
    submission: str = ""  # unique per submit: tags the job's events and its Slurm comment
    # webhooks the supervisor posts the job's events to: {url, on: [events], format}; the site's proxy ("": none)
    notify: tuple[dict[str, Any], ...] = ()
    notify_proxy: str = ""
    # a sweep as one Slurm job array: each task runs the plan at its point (at_point), at most max_parallel at once
    points: tuple[dict[str, str], ...] = ()
    max_parallel: int = 0  # 0: as many as Slurm starts
    version: int = PLAN_VERSION

    def gres_per_node(self, comp: Component) -> dict[str, int]:
        """The generic resources each node of ``comp`` asks Slurm for: its GPUs, its NPUs (the site's GRES name)."""
        wanted = {"gpu": comp.gpus_per_node, self.npu_gres: comp.npus_per_node}
        return {name: count for name, count in wanted.items() if count}

    def run_dir(self) -> str:
        """Where the command runs, absolute: the plan's workdir, or (relative, or none given) this step's own
        directory (a remote submission's relative workdir is where its batch script went)."""
        return self.workdir if self.workdir and os.path.isabs(self.workdir) else os.getcwd()

    def command_of(self, component: int) -> str:
        """The start command the nodes of component number ``component`` run."""
        return self.components[component].command or self.command

    @property
    def heterogeneous(self) -> bool:
        return len(self.components) > 1

    @property
    def total_nodes(self) -> int:
        return sum(c.nodes for c in self.components)

    @property
    def outlives_a_lost_node(self) -> bool:
        """Does a lost node leave the job running here (a spare takes its place, or an elastic component goes
        on without it, in a restart in place)? Then Slurm must keep the job when a node fails (``--no-kill``)."""
        in_place = self.restart_in_place > 0 and "node_fail" in self.restart_on
        return in_place and any(c.spares or c.elastic for c in self.components)

    def sized(self, counts: Sequence[int]) -> JobPlan:
        """The plan of an attempt that runs ``counts[c]`` nodes of component ``c`` (elastic size: what Slurm
        gave, or fewer after a loss); every count that the contract derives (``WORLD_SIZE``, ``GPU_NUM``,
        the hostfile) then follows from it. The plan itself when nothing changes."""
        if len(counts) != len(self.components):
            raise ValueError(f"{len(counts)} node counts for {len(self.components)} components")
        if all(n == c.nodes for n, c in zip(counts, self.components, strict=True)):
            return self
        for n, c in zip(counts, self.components, strict=True):
            if not c.fewest <= n <= c.nodes:
                raise ValueError(f"component {c.name} runs on {c.fewest} to {c.nodes} nodes, not {n}")
        comps = tuple(c.replace(nodes=n) for n, c in zip(counts, self.components, strict=True))
        return self.replace(components=comps)

    def at_point(self, index: int) -> JobPlan:
        """The plan of a sweep's point ``index`` (an array task's, or a separate job's): its parameters in the
        environment (``TI_SLURM_PARAM_<NAME>``, all of them as JSON in ``TI_SLURM_PARAMS``, the point's number
        in ``TI_SLURM_SWEEP_POINT``) and in the commands' ``{name}`` places, shell-quoted."""
        from ti_slurm.core import lightjson

        params = self.points[index]
        env = dict(self.env)
        env.update({PARAM_PREFIX + name.upper(): value for name, value in params.items()})
        env.update(TI_SLURM_PARAMS=lightjson.dumps(params), TI_SLURM_SWEEP_POINT=str(index))
        comps = tuple(c.replace(command=with_params(c.command, params)) for c in self.components)
        command = with_params(self.command, params)
        return self.replace(env=env, command=command, components=comps, points=(), max_parallel=0)

    def to_json(self) -> str:
        """One line of JSON (no raw newlines, so it is safe inside a quoted heredoc)."""
        import json

        return json.dumps(self.as_dict(), separators=(",", ":"), sort_keys=True, ensure_ascii=True)

    @classmethod
    def from_json(cls, text: str) -> JobPlan:
        from ti_slurm.core import lightjson  # the job path: json itself would import re and enum

        data: dict[str, Any] = lightjson.loads(text)
        if data.get("version") != PLAN_VERSION:
            raise ValueError(f"plan version {data.get('version')} is not {PLAN_VERSION}")
        data["components"] = tuple(_component(c) for c in data["components"])
        data["rdma_partitions"] = tuple(data["rdma_partitions"])
        data["port_range"] = tuple(data["port_range"])
        data["restart_on"] = tuple(data.get("restart_on", ()))
        data["staged"] = tuple(data.get("staged", ()))
        data["points"] = tuple(data.get("points", ()))
        data["notify"] = tuple(data.get("notify", ()))
        data["failure_signatures"] = tuple(tuple(pair) for pair in data.get("failure_signatures", ()))
        return cls(**data)


def with_params(command: str, params: dict[str, str]) -> str:
    """``command`` with each ``{name}`` of a parameter replaced by its value as one shell word
    (``--lr {lr}`` -> ``--lr 0.1``; ``{tag}`` of ``a b`` -> ``'a b'``). Nothing else of it changes: the
    command is never a template (an unknown ``{x}``, a shell's ``${x}``, stay as written).

    One pass over the command as written: a value is never searched again, so a value that holds another
    parameter's ``{name}`` stays inside its own quotes."""
    from ti_slurm.core.shell import shell_quote

    out, done = [], 0
    while (at := command.find("{", done)) >= 0:
        end = command.find("}", at)
        if end < 0:
            break
        name = command[at + 1 : end]
        if name in params and not (at and command[at - 1] == "$"):  # the shell's own ${lr}: left to the shell
            out += [command[done:at], shell_quote(params[name])]
            done = end + 1
        else:
            out.append(command[done : at + 1])
            done = at + 1
    out.append(command[done:])
    return "".join(out)


def _component(data: dict[str, Any]) -> Component:
    container = data.get("container")
    if container is not None:
        container = Container(**(container | {"mounts": tuple(container["mounts"])}))
    return Component(**(data | {"container": container}))
