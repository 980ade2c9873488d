"""A launcher that launches nothing, for the supervisor's unit tests (no processes, no Slurm)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from ti_slurm.core.events import NodeExit
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.plan import JobPlan
from ti_slurm.job.supervisor.launchers import Launch


class FakeProcess:
    """Stands in for a Popen: exits with ``code`` after ``polls`` polls (never, with None)."""

    def __init__(self, code: int | None, polls: int = 0) -> None:
        self.code, self.polls, self.returncode = code, polls, None
        self.pid = 0

    def poll(self) -> int | None:
        if self.code is not None and self.polls <= 0:
            self.returncode = self.code
            return self.code
        self.polls -= 1
        return None


class FakeLauncher:
    """Launches nothing: each node's outcome is scripted as (exit code, polls until it exits)."""

    record_before_stop_on_cancel = False
    resolves_names = False
    times_signal = False

    def __init__(
        self,
        plan: JobPlan,
        job_dir: Path,
        script: dict[str, tuple[int | None, int]],
        control: Any = None,
        restart_count: int = 0,
        given: list[int] | None = None,
        resolves_names: bool = False,
        unlaunched: dict[str, str] | None = None,
    ) -> None:
        self.plan, self.paths, self.script = plan, JobPaths(str(job_dir)), script
        self.given = given  # how many nodes Slurm gave each component (default: all it asked, spares too)
        self.resolves_names = resolves_names  # as Slurm's launcher: each node a name of its own
        self.control, self.restart_count = control, restart_count
        self.attempt = restart_count  # the supervisor sets it for each attempt
        self.stopped: list[str] = []
        self.signalled: list[tuple[str, int]] = []
        self.assigned: list[list[list[str]]] = []  # each assign() the supervisor made
        # "<key>@<attempt>" -> Slurm's words: srun could not start that node's step (it leaves no record)
        self.unlaunched = unlaunched or {}

    def node_names(self, component: int) -> list[str]:
        comp = self.plan.components[component]
        count = comp.allocated if self.given is None else self.given[component]
        return [f"{comp.name}-host{i}" for i in range(count)]

    def assign(self, nodes: list[list[str]]) -> None:
        self.assigned.append([list(names) for names in nodes])

    def start(self, plan: JobPlan, component: int, nodes: list[int]) -> list[Launch]:
        comp = plan.components[component]
        launches = []
        for index in nodes:
            key = f"{comp.name}-{index}"  # "<key>@<attempt>": that attempt's, before the key's for every attempt
            code, polls = self.script.get(f"{key}@{self.attempt}", self.script.get(key, (0, 0)))
            if code is not None:  # the node's step records its exit, as the real one does
                Path(self.paths.nodes_dir).mkdir(parents=True, exist_ok=True)
                name = self.assigned[-1][component][index] if self.assigned else f"{comp.name}-host{index}"
                record = NodeExit(comp.name, index, name, code, 0.0, float(polls))
                Path(self.paths.node_record(comp.name, index)).write_text(record.to_json())
            proc = cast(Any, FakeProcess(code, polls))
            launches.append(Launch(component, comp.name, [index], proc))
            why = self.unlaunched.get(f"{key}@{self.attempt}")
            if why is not None:  # as srun says it on stderr: the node by its name
                launches[-1].unlaunched[self.assigned[-1][component][index] if self.assigned else key] = why
        return launches

    def stop(self, launch: Launch, grace: float, ended: Any = None) -> None:
        self.stopped.append(f"{launch.component}-{launch.nodes[0]}")
        launch.proc.returncode = -15

    def stop_leftovers(self, grace: float) -> None:
        pass

    def pass_signal(self, launch: Launch, signum: int) -> None:
        self.signalled.append((f"{launch.component}-{launch.nodes[0]}", signum))


def events(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(JobPaths(str(tmp_path)).status).read_text().splitlines()]
