"""The supervisor: start every component's steps, apply the mode's rule, record status.

One supervisor serves both launchers:

- :class:`SlurmLauncher` (inside the batch script) starts one background
  ``srun [--het-group=<n>]`` per component, each running the step wrapper
  (:mod:`ti_slurm.jobpath`)
  on every node of that component;
- :class:`LocalLauncher` (``submit --local``) starts one process per simulated
  node on this machine, with the same Slurm variables a step would see.

The rule (see :class:`ti_slurm.modes.Rule`): a required component's non-zero
exit fails the job at once and stops everything; when every required
component has exited 0, background components (parameter servers, Ray
workers) are stopped and the job succeeds; a background component that exits
before then fails the job.

``<job dir>/status.jsonl`` gets one JSON line per event as it happens:
``start``, ``step-exit`` and ``end``. The per-node records that the step
wrapper writes in ``<job dir>/nodes/`` name the failing node.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Protocol

from ti_slurm import jobpath
from ti_slurm.hostlist import expand
from ti_slurm.modes import MODES
from ti_slurm.plan import JobPlan
from ti_slurm.status import node_log
from ti_slurm.step import terminate

POLL_SECONDS = 0.1


@dataclass
class Step:
    """One launched process that serves some nodes of one component."""

    group: int
    component: str
    nodes: list[int]
    proc: subprocess.Popen[bytes]
    exit_code: int | None = None
    stopping: bool = False


class Launcher(Protocol):
    """Starts the processes that serve a component's nodes."""

    # On cancel, write the job's final record before stopping its steps? Slurm
    # kills the batch script KillWait seconds after scancel, so there the record
    # goes first; locally nothing kills the supervisor, so CANCELLED means gone.
    record_before_stop_on_cancel: bool

    def node_names(self, group: int) -> list[str]: ...

    def start(self, plan: JobPlan, group: int, nodes: list[int]) -> list[Step]: ...

    def stop(self, step: Step, grace: float) -> None: ...


def step_command(plan: JobPlan, group: int, plan_path: str, job_dir: str) -> list[str]:
    return jobpath.command(plan.python, "step", plan_path, str(group), job_dir)


class SlurmLauncher:
    """Inside the batch script: one ``srun`` per component."""

    record_before_stop_on_cancel = True

    def __init__(self, plan_path: str, job_dir: str, environ: dict[str, str] | None = None) -> None:
        self.plan_path, self.job_dir = plan_path, job_dir
        self.environ = dict(os.environ if environ is None else environ)

    def node_names(self, group: int) -> list[str]:
        text = self.environ.get(f"SLURM_JOB_NODELIST_HET_GROUP_{group}") or self.environ.get("SLURM_JOB_NODELIST", "")
        return expand(text) if text else []

    def srun_args(self, plan: JobPlan, group: int, nodes: list[int]) -> list[str]:
        comp = plan.components[group]
        log = node_log(self.job_dir, comp.name, "%n")  # srun fills in each node's place in the step
        args = ["srun"]
        if plan.heterogeneous:
            args.append(f"--het-group={group}")
        args += [
            f"--nodes={len(nodes)}",
            f"--ntasks={len(nodes)}",
            "--ntasks-per-node=1",
            f"--cpus-per-task={comp.cpus_per_node}",
            "--kill-on-bad-exit=1",
            "--wait=0",
            "--export=ALL",
            f"--job-name={comp.name}",
            f"--output={log}",
        ]
        if len(nodes) < comp.nodes:
            args.append(f"--nodelist={','.join(self.node_names(group)[i] for i in nodes)}")
        return args + step_command(plan, group, self.plan_path, self.job_dir)

    def start(self, plan: JobPlan, group: int, nodes: list[int]) -> list[Step]:
        os.makedirs(os.path.join(self.job_dir, "logs"), exist_ok=True)  # srun cannot start a step without it
        proc = subprocess.Popen(self.srun_args(plan, group, nodes), env=self.environ)
        return [Step(group, plan.components[group].name, nodes, proc)]

    def stop(self, step: Step, grace: float) -> None:
        # srun forwards SIGTERM to the step's tasks; the step wrapper stops its command.
        terminate(step.proc, grace + 5, group=False)


class LocalLauncher:
    """On this machine: one process per simulated node, all at 127.0.0.1."""

    record_before_stop_on_cancel = False

    def __init__(self, plan: JobPlan, plan_path: str, job_dir: str, job_id: int) -> None:
        self.plan_path, self.job_dir, self.job_id = plan_path, job_dir, job_id
        self.names = [["localhost"] * c.nodes for c in plan.components]

    def node_names(self, group: int) -> list[str]:
        return self.names[group]

    def env_for(self, plan: JobPlan, group: int, index: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(
            SLURM_JOB_ID=str(self.job_id),
            SLURM_NODEID=str(index),
            SLURM_PROCID=str(index),
            SLURM_JOB_NAME=plan.name,
            TI_SLURM_NODE_ADDR="127.0.0.1",
            TI_SLURM_PORT_PER_NODE="1",
            TI_SLURM_LOCAL="1",
        )
        if plan.heterogeneous:
            env["SLURM_HET_SIZE"] = str(len(plan.components))
            env["SLURM_HET_JOB_ID"] = str(self.job_id)
            for g, comp in enumerate(plan.components):
                env[f"SLURM_JOB_NODELIST_HET_GROUP_{g}"] = ",".join(["localhost"] * comp.nodes)
        else:
            env["SLURM_JOB_NODELIST"] = ",".join(["localhost"] * plan.components[0].nodes)
        return env

    def start(self, plan: JobPlan, group: int, nodes: list[int]) -> list[Step]:
        comp = plan.components[group]
        os.makedirs(os.path.join(self.job_dir, "logs"), exist_ok=True)
        steps = []
        for index in nodes:
            with open(node_log(self.job_dir, comp.name, index), "wb") as log:
                proc = subprocess.Popen(
                    step_command(plan, group, self.plan_path, self.job_dir),
                    env=self.env_for(plan, group, index),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            steps.append(Step(group, comp.name, [index], proc))
        return steps

    def stop(self, step: Step, grace: float) -> None:
        terminate(step.proc, grace + 5, group=True)


@dataclass
class Outcome:
    """How a job ended."""

    state: str  # COMPLETED | FAILED | CANCELLED
    reason: str = ""
    failed: dict[str, object] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if self.state == "COMPLETED":
            return 0
        code = self.failed.get("exit_code")
        return code if isinstance(code, int) and 0 < code < 256 else 1


class Supervisor:
    """Runs a plan's steps through a launcher and decides the job's outcome."""

    def __init__(
        self, plan: JobPlan, job_dir: str, launcher: Launcher, say: Callable[[str], None] | None = None
    ) -> None:
        self.plan, self.job_dir, self.launcher = plan, job_dir, launcher
        self.rule = MODES[plan.mode].RULE
        self.say = say or (lambda text: print(f"ti-slurm: {text}", flush=True))
        self.steps: list[Step] = []
        self._cancel_signal: int | None = None

    # -- status file ---------------------------------------------------
    def event(self, kind: str, **data: object) -> None:
        record = {"event": kind, "time": round(time.time(), 3), "submission": self.plan.submission, **data}
        mode = "w" if kind == "start" else "a"  # a requeued job (same id) starts a fresh record
        with open(os.path.join(self.job_dir, "status.jsonl"), mode, encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")

    def node_records(self) -> list[dict[str, object]]:
        folder = os.path.join(self.job_dir, "nodes")
        records = []
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as fh:
                    records.append(json.loads(fh.read()))
            except (OSError, ValueError):
                continue
        return records

    # -- the rule --------------------------------------------------------
    def launch_plan(self) -> list[tuple[int, list[int]]]:
        return [
            (g, [0] if self.rule.launcher_only else list(range(c.nodes))) for g, c in enumerate(self.plan.components)
        ]

    def required_commands_done(self) -> bool:
        """Every node of every required component has recorded exit 0."""
        done = {(r["component"], r["index"]) for r in self.node_records() if r.get("exit_code") == 0}
        return all(
            (step.component, i) in done
            for step in self.steps
            if self.rule.is_required(step.component)
            for i in step.nodes
        )

    def step_records(self, step: Step) -> list[dict[str, object]]:
        """The node records of the nodes ``step`` served."""
        return [r for r in self.node_records() if r.get("component") == step.component and r.get("index") in step.nodes]

    def node_labels(self, step: Step, indexes: list[int]) -> str:
        names = self.launcher.node_names(step.group)
        return ",".join(names[i] if i < len(names) else str(i) for i in indexes)

    def failure(self, step: Step, any_exit: bool = False) -> Outcome:
        """The outcome naming the first node of ``step`` that failed (or, with ``any_exit``, that exited)."""
        bad = [r for r in self.step_records(step) if any_exit or r.get("exit_code")]
        bad.sort(key=lambda r: float(r.get("ended", 0)))  # type: ignore[arg-type]
        if bad:
            first = bad[0]
            failed = {
                "component": step.component,
                "node": first.get("node"),
                "index": first.get("index"),
                "exit_code": first.get("exit_code"),
            }
            reason = f"{step.component} node {failed['node']} (index {failed['index']}) exited {failed['exit_code']}"
        else:
            nodes = self.node_labels(step, step.nodes)
            failed = {"component": step.component, "node": nodes, "index": None, "exit_code": step.exit_code}
            reason = f"{step.component} step on {nodes} exited {step.exit_code}"
        return Outcome("FAILED", reason, failed)

    def judge(self, step: Step) -> Outcome | None:
        """Apply the mode's rule after ``step`` exited; ``None`` means keep going."""
        required = self.rule.is_required(step.component)
        if required and step.exit_code != 0:
            return self.failure(step)
        seen = {r.get("index") for r in self.step_records(step)}
        missing_indexes = [i for i in step.nodes if i not in seen]
        if required and missing_indexes:
            # srun can exit 0 when a task failed to launch: only node records count as success
            missing = self.node_labels(step, missing_indexes)
            reason = (
                f"{step.component} step exited {step.exit_code} but node(s) {missing} left no exit record "
                f"(the command never ran, or {self.job_dir} is not on a filesystem every node shares)"
            )
            return Outcome("FAILED", reason, {"component": step.component, "node": missing, "exit_code": None})
        if not required and not step.stopping:
            if self.required_commands_done():
                return None  # shutting down after the command (Ray workers leave when the head stops)
            outcome = self.failure(step, any_exit=True)
            outcome.reason = f"{outcome.reason} while the job was still running"
            return outcome
        if all(s.exit_code == 0 for s in self.steps if self.rule.is_required(s.component)):
            return Outcome("COMPLETED", "every required step exited 0")
        return None

    # -- running ---------------------------------------------------------
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._cancel_signal = signum

    def step_exit_event(self, step: Step) -> None:
        records = [{k: r.get(k) for k in ("index", "node", "exit_code")} for r in self.step_records(step)]
        self.event(
            "step-exit",
            component=step.component,
            nodes=step.nodes,
            exit_code=step.exit_code,
            stopped=step.stopping,
            records=records,
        )

    def stop_running(self) -> None:
        for step in self.steps:
            if step.exit_code is None:
                step.stopping = True
        for step in self.steps:
            if step.exit_code is None:
                self.launcher.stop(step, self.plan.stop_grace)
                code = step.proc.returncode
                step.exit_code = 128 - code if code < 0 else code
                self.step_exit_event(step)

    def run(self) -> Outcome:
        os.makedirs(self.job_dir, exist_ok=True)
        shutil.rmtree(os.path.join(self.job_dir, "nodes"), ignore_errors=True)  # records of an earlier run
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2):
            signal.signal(sig, self._on_signal)
        for g, nodes in self.launch_plan():
            self.steps.extend(self.launcher.start(self.plan, g, nodes))
        self.event(
            "start",
            mode=self.plan.mode,
            components=[
                {"name": c.name, "nodes": self.launcher.node_names(g)} for g, c in enumerate(self.plan.components)
            ],
        )
        self.say(f"started {len(self.steps)} step(s) for {self.plan.mode} job {self.plan.name}")
        try:
            outcome = self._loop()
        except Exception as exc:  # never leave steps running behind a broken supervisor
            outcome = Outcome("FAILED", f"ti-slurm supervisor error: {type(exc).__name__}: {exc}")
        record_first = outcome.state == "CANCELLED" and self.launcher.record_before_stop_on_cancel
        if not record_first:
            self.stop_running()
        self.event("end", state=outcome.state, reason=outcome.reason, failed=outcome.failed)
        if record_first:
            self.stop_running()
        self.say(f"{outcome.state}: {outcome.reason}")
        return outcome

    def _loop(self) -> Outcome:
        while True:
            if self._cancel_signal is not None:
                return Outcome("CANCELLED", f"received signal {signal.Signals(self._cancel_signal).name}")
            for step in self.steps:
                if step.exit_code is not None:
                    continue
                code = step.proc.poll()
                if code is None:
                    continue
                step.exit_code = 128 - code if code < 0 else code
                self.step_exit_event(step)
                if not self.rule.is_required(step.component) and not step.stopping:
                    self._settle_background_exit()
                outcome = self.judge(step)
                if outcome is not None:
                    if outcome.state == "COMPLETED":
                        self.stop_running()
                    return outcome
            time.sleep(POLL_SECONDS)

    def _settle_background_exit(self) -> None:
        # A Ray worker may notice the head stopping before the head's own step
        # exits; give the head's record a moment to land before judging.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not self.required_commands_done():
            if any(
                s.exit_code is None and s.proc.poll() is not None
                for s in self.steps
                if self.rule.is_required(s.component)
            ):
                break
            time.sleep(POLL_SECONDS)


def supervise(plan_path: str, job_dir: str) -> int:
    """Entry point inside the batch script."""
    with open(plan_path, encoding="utf-8") as fh:
        plan = JobPlan.from_json(fh.read())
    outcome = Supervisor(plan, job_dir, SlurmLauncher(plan_path, job_dir)).run()
    return outcome.exit_code
