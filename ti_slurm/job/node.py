"""Each node's step: its contract, its files, then the user's command.

Runs once per node in every job step (through :mod:`ti_slurm.job.main`), so
it imports only the standard library and the light job modules, and those
that only running the command needs (``subprocess``, ``signal``, ``socket``)
only when it gets there.

It computes this node's contract, writes the hostfile and launch agent the
mode needs, hands the node to its mode (which runs the command with
``bash -c`` in its own process group, forwarding SIGTERM/SIGINT to it; DDP
workers wait for the master first; Ray runs its node runtime), and records
the exit code in ``<job dir>/nodes/``.
"""

from __future__ import annotations

import os
import time

from ti_slurm.core.files import make_inside, write_atomic
from ti_slurm.core.paths import JobPaths, node_label
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.record import Record
from ti_slurm.core.shell import shell_quote
from ti_slurm.job import main_command
from ti_slurm.job.contract import NodeContract, WholeContract, whole_contract
from ti_slurm.job.modes import get_mode
from ti_slurm.job.process import run_command

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ti_slurm.job.container import ImageRun


def prepare_files(plan: JobPlan, contract: NodeContract, job_dir: str, in_image: bool = False) -> None:
    """Write the hostfile and the launch agent (as ``bin/ssh``) that this node's mode needs; in an image, the
    agent is the relay's client (:mod:`ti_slurm.job.relay`)."""
    if contract.hostfile is None:
        return
    paths = JobPaths(job_dir)
    write_atomic(paths.hostfile, contract.hostfile)
    make_inside(job_dir, paths.agent_dir)
    if in_image:
        from ti_slurm.job.relay import CLIENT

        agent = CLIENT
    else:
        argv = " ".join(shell_quote(word) for word in main_command(plan.python, "agent"))
        agent = f'#!/bin/sh\nexec {argv} "$@"\n'
    write_atomic(os.path.join(paths.agent_dir, "ssh"), agent, 0o755)
    write_atomic(os.path.join(paths.agent_dir, "ti-slurm-ssh"), agent, 0o755)


def record_exit(
    job_dir: str, plan: JobPlan, component: int, index: int, node: str, code: int, started: float, error: str = ""
) -> None:
    """Write this node's exit record (``nodes/<component>.<index>.json``) for the supervisor and ``status``;
    ``error`` is why ti-slurm ended it (a failed preflight), when it did."""
    from ti_slurm.core.events import NodeExit

    paths = JobPaths(job_dir)
    make_inside(job_dir, paths.nodes_dir)
    name = plan.components[component].name
    record = NodeExit(name, index, node, code, started, time.time(), error)
    write_atomic(paths.node_record(name, index), record.to_json() + "\n")


class NodeRun(Record):
    """One node's share of a running job, as its mode sees it."""

    plan: JobPlan
    component: int  # the component's index
    contract: NodeContract
    env: dict[str, str]  # the command's whole environment
    job_dir: str
    started: float
    image: ImageRun | None = None  # the component's training image, when it has one

    def argv(self, command: str) -> list[str]:
        """The argv that runs ``command`` for this node: ``bash -c`` here, or inside the image."""
        return self.image.argv(command) if self.image is not None else ["/bin/bash", "-c", command]

    def record(self, code: int, error: str = "") -> None:
        """Record this node's exit code (the supervisor judges the job by these records)."""
        contract = self.contract
        record_exit(self.job_dir, self.plan, self.component, contract.index, contract.node, code, self.started, error)

    def run_command(
        self, command: str | None = None, guard: Callable[[], int | None] | None = None, record: bool = True
    ) -> int:
        """Run ``command`` (default: this component's start command), record its exit code (unless ``record`` is
        False: the caller records what it decides), return it.

        ``guard`` may stop the command early (see :func:`ti_slurm.job.process.run_command`).
        The user's start command also gets the checkpoint signal, and the watchdog
        watches it where the mode's rule requires its success; a runtime the mode
        starts instead (Ray's worker daemons) gets neither.
        """
        from ti_slurm.job.watch import NodeWatch

        plan = self.plan
        users = command is None
        command = command or plan.command_of(self.component)
        if users and plan.processes == "per-npu" and plan.components[self.component].npus_per_node:
            command = self.per_npu(command)
        required = get_mode(plan.mode).rule.is_required(plan.components[self.component].name)
        forward = checkpoint_signals(plan) if users else ()
        watch = NodeWatch(self, watch_silence=users and required, signals=bool(forward))

        def guard_all(pid: int) -> int | None:
            forced = watch.tick(pid)
            return guard() if forced is None and guard is not None else forced

        workdir = None if self.image is not None else plan.workdir
        # the node's own command, or what serves a node that runs none (Ray's workers): the node has started
        noted = self.note_start if users or not self.contract.runs_command else None
        code = run_command(self.argv(command), self.env, workdir, plan.stop_grace, guard_all, forward, noted)
        watch.usage.finish()
        if record:
            self.record(code, watch.error)
        return code

    def note_start(self) -> None:
        """Note when this node's step began and when it handed over its command (``nodes/<c>.<n>.started``, for
        the supervisor's ``running`` event); a note that cannot be written is no reason to stop the node."""
        paths, name = JobPaths(self.job_dir), self.plan.components[self.component].name
        try:
            make_inside(self.job_dir, paths.nodes_dir)
            write_atomic(paths.node_started(name, self.contract.index), f"{self.started:.3f} {time.time():.3f}\n")
        except OSError:
            pass

    def per_npu(self, command: str) -> str:
        """``command`` once per NPU of this node (``processes: per-npu``)."""
        from ti_slurm.core.errors import ContractError
        from ti_slurm.job.ranktable import first_rank, per_npu_command, visible_devices

        devices = visible_devices(self.env, self.plan.components[self.component].npus_per_node)
        if isinstance(devices, str):  # the rank table's step found them fine before any command: not reached
            raise ContractError(devices)
        first = first_rank(self.plan, self.component, self.contract.index)
        return per_npu_command(command, devices, first, int(self.env["RANK_SIZE"]))


def checkpoint_signals(plan: JobPlan) -> tuple[int, ...]:
    """The plan's checkpoint signal, as a number (none when the spec asks for none)."""
    if not plan.checkpoint_signal:
        return ()
    import signal

    return (int(getattr(signal, f"SIG{plan.checkpoint_signal}")),)


def prepare_node(plan: JobPlan, component: int, job_dir: str, environ: Mapping[str, str]) -> WholeContract:
    """This node's whole contract (:func:`~ti_slurm.job.contract.whole_contract`), with what it names made:
    the job's folders, the hostfile and the launch agent."""
    os.makedirs(job_dir, mode=0o700, exist_ok=True)  # a step started by hand (--print-env); private if made here
    given = whole_contract(plan, environ, component, job_dir)
    for folder in given.folders:
        make_inside(job_dir, folder)
    in_image = plan.components[component].container is not None
    prepare_files(given.plan, given.contract, job_dir, in_image)
    return given


def run_node(plan: JobPlan, component: int, job_dir: str, environ: Mapping[str, str] | None = None) -> int:
    """Serve this node's share of the job; return the exit code to report."""
    environ = os.environ if environ is None else environ
    started = time.time()
    if plan.checkpoint_signal:  # it may come before the command starts: then the command gets it as it starts
        from ti_slurm.job.process import remember_signals

        remember_signals(checkpoint_signals(plan))
    given = prepare_node(plan, component, job_dir, environ)
    plan, contract, env = given.plan, given.contract, given.env
    stop = None
    if "SLURM_JOB_ID" in environ:  # the supervisor stops a Slurm step through a file, not through srun
        from ti_slurm.job.watch import watch_stop_request

        path = JobPaths(job_dir).stop_request(plan.components[component].name)
        stop = watch_stop_request(path, env["TI_SLURM_RESTART_COUNT"])
    image = None
    if plan.components[component].container is not None:
        from ti_slurm.job.container import ImageRun

        image = ImageRun(plan, component, contract.index, contract.node, job_dir, env)
        problem = image.check()
        if problem:
            return refuse(NodeRun(plan, component, contract, env, job_dir, started), problem)
        if contract.hostfile is not None:  # the mode has a launch agent: the image's reaches it through a relay
            from ti_slurm.job.relay import Relay

            relay = Relay(main_command(plan.python, "agent"), env, JobPaths(job_dir).agent_dir, contract.node)
            relay.start()
            env["TI_SLURM_AGENT_RELAY"] = relay.address
    run = NodeRun(plan, component, contract, env, job_dir, started, image)
    try:
        code = checked_run(run)
    finally:
        if image is not None:
            image.cleanup()
    # Stopped on request, the step ends 0 (its record keeps the command's code): srun's --kill-on-bad-exit
    # would otherwise kill the step's other nodes while they still stop within their grace.
    return 0 if stop is not None and stop.is_set() else code


def refuse(run: NodeRun, problem: str) -> int:
    """End this node before its command: one line saying why, recorded as its error."""
    import sys

    from ti_slurm.job.preflight import PREFLIGHT_EXIT

    print(f"ti-slurm: {problem}", file=sys.stderr, flush=True)
    run.record(PREFLIGHT_EXIT, problem)
    return PREFLIGHT_EXIT


def checked_run(run: NodeRun) -> int:
    """The preflight (unless the spec turned it off), then the node's share of the job through its mode."""
    plan, component, contract, env = run.plan, run.component, run.contract, run.env
    if plan.preflight:
        from ti_slurm.job.preflight import problems

        problem = problems(plan, component, contract, env)
        if problem is None and plan.preflight_allreduce:
            from ti_slurm.job.preflight import allreduce

            found = allreduce(plan, contract, env)
            problem = f"preflight on {contract.node}: {found}" if found else None
        if problem:
            return refuse(run, problem)
    if plan.components[component].npus_per_node:  # the rank table: every NPU node's part, before any command
        from ti_slurm.job.ranktable import share

        problem = share(plan, component, contract.index, contract.addr, contract.node, env)
        if problem:
            return refuse(run, problem)
    if not plan.staged:
        return get_mode(plan.mode).run_node(run)
    from ti_slurm.job.staging import stage, stops_unwind, unstage

    with stops_unwind():
        try:
            label = node_label(plan.components[component].name, contract.index)
            progress = os.path.join(JobPaths(run.job_dir).staging, label)  # how far the copy is, for --wait
            problem = stage(plan, contract.node, env, progress)  # before the mode starts: DDP's rendezvous timeout
            return refuse(run, problem) if problem else get_mode(plan.mode).run_node(run)
        finally:
            unstage(plan, env)
