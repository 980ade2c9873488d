"""The supervisor at scale, without processes: ``python3 bench/supervisor_load.py NODES [MODE]``.

A fake launcher starts one launch per node (as the local launcher does: the most launches a supervisor
watches), each of which exits 0 on a later poll and writes its node's exit record as it does, as real
node steps do. Every exit is timed from its reaping to the rule's decision (the step-exit event and
one snapshot of the records included). Prints one JSON line: the decisions' median and worst time,
the peak RSS of this process, and the job's outcome.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ti_slurm.core.events import NodeExit
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.plan import Component, JobPlan
from ti_slurm.job.supervisor import loop, steps
from ti_slurm.job.supervisor.launchers import Launch

EXITS_PER_POLL = 256  # how many nodes end between two polls of the loop


class ExitingProcess:
    """Stands in for a node's step: on its ``polls``-th poll it writes its exit record, and exits 0 on the next
    (the node's own work, so not in the supervisor's time)."""

    def __init__(self, paths: JobPaths, component: str, index: int, polls: int) -> None:
        self.paths, self.component, self.index, self.polls = paths, component, index, polls
        self.returncode: int | None = None
        self.pid = 0

    def poll(self) -> int | None:
        if self.returncode is None:
            self.polls -= 1
            if self.polls == 0:
                record = NodeExit(self.component, self.index, f"n{self.index}", 0, 0.0, time.time())
                Path(self.paths.node_record(self.component, self.index)).write_text(record.to_json())
            elif self.polls < 0:
                self.returncode = 0
        return self.returncode


class FakeLauncher:
    record_before_stop_on_cancel = False
    resolves_names = False
    times_signal = False
    restart_count = 0
    control = None

    def __init__(self, plan: JobPlan, job_dir: str) -> None:
        self.plan, self.paths = plan, JobPaths(job_dir)

    def node_names(self, component: int) -> list[str]:
        return [f"n{i}" for i in range(self.plan.components[component].nodes)]

    def assign(self, nodes: list[list[str]]) -> None:
        pass

    def start(self, plan: JobPlan, component: int, nodes: list[int]) -> list[Launch]:
        os.makedirs(self.paths.nodes_dir, exist_ok=True)
        name = plan.components[component].name
        procs = [ExitingProcess(self.paths, name, i, 1 + i // EXITS_PER_POLL) for i in nodes]
        return [Launch(component, name, [i], cast(Any, proc)) for i, proc in zip(nodes, procs, strict=True)]

    def stop(self, launch: Launch, grace: float, ended: Any = None) -> None:
        launch.proc.returncode = -15

    def stop_leftovers(self, grace: float) -> None:
        pass

    def pass_signal(self, launch: Launch, signum: int) -> None:
        pass


def io_floor(job_dir: str, repeat: int = 200) -> float:
    """The I/O every exit needs however it is judged: read one exit record, append one event line (seconds)."""
    record = Path(job_dir, "record.json")
    record.write_text(NodeExit("ddp", 0, "n0", 0, 0.0, 0.0).to_json())
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        NodeExit.from_json(record.read_text())
        with open(Path(job_dir, "events.jsonl"), "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"event": "step-exit", "records": [{"index": 0, "node": "n0", "exit_code": 0}]}) + "\n")
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(nodes: int) -> dict[str, object]:
    decisions: list[float] = []
    original_reaped, original_judge = steps.Steps.reaped, steps.judge
    started: list[float] = []

    def reaped(self: steps.Steps, launch: Launch) -> bool:
        t = time.perf_counter()
        done = original_reaped(self, launch)
        if done:
            started.append(t)
        return done

    def judge(*args: Any, **kwargs: Any) -> Any:
        outcome = original_judge(*args, **kwargs)
        decisions.append(time.perf_counter() - started.pop())
        return outcome

    steps.Steps.reaped = reaped  # type: ignore[method-assign]
    steps.judge = judge
    with tempfile.TemporaryDirectory() as job_dir:
        plan = JobPlan("bench", "ddp", "train", (Component("ddp", nodes, 0, 1),), python=sys.executable)
        supervisor = loop.Supervisor(plan, job_dir, cast(Any, FakeLauncher(plan, job_dir)), say=lambda text: None)
        outcome = supervisor.run()
        floor = io_floor(job_dir)
    decisions.sort()
    return {
        "nodes": nodes,
        "exits": len(decisions),
        "median_ms": statistics.median(decisions) * 1000,
        "p99_ms": decisions[int(len(decisions) * 0.99)] * 1000,
        "max_ms": decisions[-1] * 1000,
        "io_floor_ms": floor * 1000,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "state": str(outcome.state),
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096)))
