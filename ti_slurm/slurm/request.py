"""The options a plan asks Slurm for, per component: the one place they are decided (pure).

:func:`component_options` turns a :class:`~ti_slurm.core.plan.JobPlan` into sbatch's long options with
their values as sbatch reads them; the renderers write them out: as ``#SBATCH`` lines
(:mod:`ti_slurm.submitting.script`) or as pyslurm's job description (:mod:`ti_slurm.backends.pyslurm`). What a
spec's ``sbatch:`` table may not set comes from here too (:func:`refusal`): every option this module can
emit (each declared in :data:`MANAGED` with what ti-slurm uses it for; emitting an undeclared one is a bug
that fails at once), the options that undo one of them (``no-requeue``), and the few that would break the
job's layout (:data:`LAYOUT`). sbatch takes the last of two equal options, so a user's ``signal`` after
ti-slurm's would silently drop the checkpoint signal: that is why these are refused, not merged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ti_slurm.core.paths import BATCH_OUTPUT
from ti_slurm.core.plan import Component, JobPlan
from ti_slurm.slurm.text import Partition, time_minutes

Value = str | int | bool  # True: a flag (``--no-kill``)
USE_INSTEAD = "use --backend slurm (the Slurm commands) instead"  # said by a backend that cannot ask for it


@dataclass(frozen=True)
class Managed:
    """An option ti-slurm sets: what for (the words of a refusal), and the options that would undo it."""

    used_for: str
    undone_by: tuple[str, ...] = ()


MANAGED: dict[str, Managed] = {
    "job-name": Managed("the spec's name"),
    "output": Managed("the batch output beside the job directories (output_dir)"),
    "comment": Managed("the submission tag that makes a retried submit safe"),
    "array": Managed("a sweep's points (ti-slurm sweep)"),
    "dependency": Managed("what the job waits for (after:)"),
    "kill-on-invalid-dep": Managed("ending a job whose after: can never be met"),
    "nodes": Managed("the node count (nodes, or a role's nodes)"),
    "ntasks-per-node": Managed("one ti-slurm step per node (the processes field sets how many commands)"),
    "cpus-per-task": Managed("cpus_per_node"),
    "gres": Managed("gpus_per_node and npus_per_node"),
    "mem": Managed("mem"),
    "partition": Managed("partition"),
    "account": Managed("account"),
    "qos": Managed("qos"),
    "time": Managed("time"),
    "signal": Managed("the checkpoint signal before the time limit (signal, restart)"),
    "requeue": Managed("requeueing a preempted or failed job (restart)", undone_by=("no-requeue",)),
    "open-mode": Managed("each attempt's batch output after the last one's (restart)"),
    "no-kill": Managed("a job that outlives a lost node (spare_nodes, elastic nodes with restart.in_place)"),
}

# options ti-slurm never emits but which would break the job it writes: option -> what to use instead
LAYOUT: dict[str, str] = {
    "ntasks": "ti-slurm runs one step per node (use processes: for several commands per node)",
    "gpus": "use gpus_per_node",
    "gpus-per-node": "use gpus_per_node",
    "error": "the batch output is one file beside the job directories (output_dir)",
    "chdir": "use workdir",
    "export": "use env",
    "export-file": "use env",
    "wrap": "ti-slurm writes the batch script",
    "hetjob": "ti-slurm writes the components of a multi-role mode",
    "het-group": "ti-slurm writes the components of a multi-role mode",
    "parsable": "ti-slurm reads sbatch's answer itself",
    "wait": "use ti-slurm submit --wait",
}


# sbatch options that are one field of a job description with the value as sbatch reads it, for the backends
# that describe a job instead of running sbatch: option -> (pyslurm's JobSubmitDescription field, slurmrestd's
# job description field); None where that API takes the option otherwise (a list, a number: the backend says).
DESCRIPTION_FIELDS: dict[str, tuple[str | None, str | None]] = {
    "job-name": ("name", "name"),
    "output": ("standard_output", "standard_output"),
    "comment": ("comment", "comment"),
    "array": ("array", "array"),
    "dependency": ("dependencies", "dependency"),
    "partition": (None, "partition"),
    "account": ("account", "account"),
    "qos": ("qos", "qos"),
    "cpus-per-task": ("cpus_per_task", None),
    "mem": ("memory_per_node", None),
    "time": ("time_limit", None),
    "open-mode": ("log_files_open_mode", None),
    "begin": ("begin_time", "begin_time"),
    "constraint": ("constraints", "constraints"),
    "exclude": ("excluded_nodes", "excluded_nodes"),
    "nodelist": ("required_nodes", "required_nodes"),
    "reservation": ("reservations", "reservation"),
    "licenses": ("licenses", "licenses"),
    "mail-type": ("mail_types", "mail_type"),
    "mail-user": ("mail_user", "mail_user"),
    "wckey": ("wckey", "wckey"),
    "cpus-per-gpu": ("cpus_per_gpu", None),
    "deadline": ("deadline", None),
    "distribution": ("distribution", None),
    "gpus-per-task": ("gpus_per_task", None),
    "mem-per-cpu": ("memory_per_cpu", None),
    "mem-per-gpu": ("memory_per_gpu", None),
    "mincpus": ("min_cpus_per_node", None),
    "network": ("network", None),
    "nice": ("nice", None),
    "priority": ("priority", None),
    "threads-per-core": ("threads_per_core", None),
    "time-min": ("time_limit_min", None),
    "tmp": ("temporary_disk_per_node", None),
}
PYSLURM, REST = 0, 1  # DESCRIPTION_FIELDS' columns


def description_field(option: str, api: int) -> str | None:
    """The field of API ``api`` (:data:`PYSLURM`, :data:`REST`) that takes sbatch option ``option`` as it is."""
    return DESCRIPTION_FIELDS.get(option, (None, None))[api]


def refused_options() -> dict[str, str]:
    """Every option ``sbatch:`` may not set, with why: ti-slurm's own, what undoes them, and :data:`LAYOUT`."""
    out = {name: f"ti-slurm sets it for {m.used_for}" for name, m in MANAGED.items()}
    for name, managed in MANAGED.items():
        why = f"it undoes --{name}, which ti-slurm sets for {managed.used_for}"
        out.update(dict.fromkeys(managed.undone_by, why))
    out.update(LAYOUT)
    return out


def refusal(option: str) -> str | None:
    """Why a spec's ``sbatch:`` may not set ``option`` (sbatch's long name, or any prefix sbatch would
    expand to a refused one: ``--partit`` is ``--partition``); None when it may."""
    refused = refused_options()
    if option in refused:
        return f"--{option}: {refused[option]}"
    for name in sorted(refused):
        if name.startswith(option):
            return f"--{option} is what sbatch reads as --{name}: {refused[name]}"
    return None


def submission_comment(submission: str) -> str:
    """The Slurm comment a submit tags its job with, to find it again when a retry cannot tell if it landed."""
    return f"ti-slurm:{submission}"


def slurm_filename(path: str) -> str:
    """Escape ``%`` so sbatch's filename patterns leave a user's path alone."""
    return path.replace("\\", "\\\\").replace("%", "%%")


def batch_output_pattern(plan: JobPlan) -> str:
    """sbatch's ``--output`` name of the batch script's output: ``slurm-<job id>.out``, an array task's
    ``slurm-<array id>_<task>.out`` (beside its job directory ``<array id>_<task>``)."""
    return BATCH_OUTPUT.replace("%j", "%A_%a") if plan.points else BATCH_OUTPUT


def array_range(plan: JobPlan) -> str:
    """``--array``'s value for a sweep's plan: ``0-5``, ``0-5%2`` with max_parallel."""
    throttle = f"%{plan.max_parallel}" if 0 < plan.max_parallel < len(plan.points) else ""
    return f"0-{len(plan.points) - 1}{throttle}"


def component_options(plan: JobPlan, index: int) -> dict[str, Value]:
    """sbatch's options for component ``index`` of ``plan``, in the order they are written, then the
    spec's own ``sbatch:`` table (sorted; ``false`` left out)."""
    comp = plan.components[index]
    first = index == 0
    out: dict[str, Value] = {}

    def ask(name: str, value: Value) -> None:
        if name not in MANAGED:
            raise AssertionError(f"--{name} is emitted but not declared in MANAGED (sbatch: could override it)")
        out[name] = value

    if first:
        ask("job-name", plan.name)
        ask("output", f"{slurm_filename(plan.output_dir)}/{batch_output_pattern(plan)}")
        if plan.submission:
            ask("comment", submission_comment(plan.submission))
        if plan.points:  # a sweep: one array task per point, at most max_parallel running
            ask("array", array_range(plan))
        if plan.dependency:  # the whole job's; one that can never be met ends it instead of pending on
            ask("dependency", plan.dependency)
            ask("kill-on-invalid-dep", "yes")
    _resources(plan, comp, ask)
    # surviving interruptions: every component is requeueable, the first gets the signal
    if plan.checkpoint_signal and first:  # B: the batch step only; the supervisor passes it on to every node
        ask("signal", f"B:{plan.checkpoint_signal}@{plan.signal_before}")
    if plan.restart_max > 0:  # preemption and node failure requeue it; the supervisor requeues the rest
        # expedite (the site config's, Slurm 25.11): a requeued job may start again at once, first in the queue
        ask("requeue", "expedite" if plan.expedited_requeue else True)
    if plan.restart_max > 0 and first:
        ask("open-mode", "append")  # each attempt's output after the last one's
    if plan.outlives_a_lost_node:  # every component: each is a job of its own to Slurm
        ask("no-kill", True)  # a lost node leaves the allocation, the job keeps the rest and goes on
    out.update((name, value) for name, value in sorted(plan.sbatch.items()) if value is not False)
    return out


def _resources(plan: JobPlan, comp: Component, ask: Callable[[str, Value], None]) -> None:
    ask("nodes", comp.node_request)
    if not comp.elastic:  # beside a range it makes Slurm give the fewest nodes; -N alone gives what it can
        ask("ntasks-per-node", 1)
    ask("cpus-per-task", comp.cpus_per_node)
    gres = plan.gres_per_node(comp)
    if gres:
        ask("gres", ",".join(f"{name}:{count}" for name, count in gres.items()))
    if comp.mem:
        ask("mem", comp.mem)
    partition = comp.partition or plan.partition
    if partition:
        ask("partition", partition)
    for name in ("account", "qos", "time"):
        value = getattr(plan, name)
        if value:
            ask(name, value)


# -- jobs that can never start ----------------------------------------------------
def unfit_reason(plan: JobPlan, partitions: dict[str, Partition]) -> str | None:
    """Why ``plan`` can never start on its partitions as they stand (``None`` when it can)."""
    default = next((p.name for p in partitions.values() if p.default), None)
    limit = time_minutes(plan.time)
    for comp in plan.components:
        name = comp.partition or plan.partition or default
        if name is None:
            return "no partition given and the cluster has no default partition"
        part = partitions.get(name)
        if part is None:
            return f"partition {name!r} does not exist (partitions: {', '.join(sorted(partitions))})"
        where = f"{comp.name}: " if plan.heterogeneous else ""
        fewest = comp.fewest + comp.spares
        if fewest > part.nodes:
            at_least = "at least " if comp.elastic else ""
            spares = f" ({comp.fewest} and {comp.spares} spare)" if comp.spares else ""
            return f"{where}{at_least}{fewest} nodes asked{spares}, partition {name} has {part.nodes}"
        for kind, (asked, what) in {
            "gpu": (comp.gpus_per_node, "GPUs"),
            plan.npu_gres: (comp.npus_per_node, "NPUs"),
        }.items():
            has = part.max_per_node.get(kind, 0)
            if asked > has:
                more = f"has more than {has}" if has else f"has {what} (GRES {kind})"
                return f"{where}{asked} {what} per node asked, no node of partition {name} {more}"
        if limit is not None and part.max_minutes is not None and limit > part.max_minutes:
            return f"time {plan.time} is above partition {name}'s maximum of {part.max_minutes} minutes"
    return None
