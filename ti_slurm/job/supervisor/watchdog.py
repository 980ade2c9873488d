"""What the supervisor watches across an attempt's nodes while they run: their paces (stragglers,
:mod:`~ti_slurm.job.supervisor.pace`), the job's TensorBoard steps and loss (a hang, a NaN:
:mod:`ti_slurm.job.tensorboard`), and, once a node hung, every node's stacks grouped
(:mod:`~ti_slurm.job.supervisor.stacks`). A node's own watchdog (silence, its progress file) is
:mod:`ti_slurm.job.watch`'s, in its step."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from ti_slurm.core.events import NodeExit
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.plan import JobPlan
from ti_slurm.core.states import JobState
from ti_slurm.job.supervisor.judge import NodeNames, Outcome
from ti_slurm.job.supervisor.launchers import Launch
from ti_slurm.job.supervisor.pace import StepPace
from ti_slurm.job.supervisor.stacks import gather_stacks
from ti_slurm.job.tensorboard import TensorBoardWatch


def node_label(name: str | None, component: str, i: int) -> str:
    """A node as the supervisor's log names it: its name and its place (``node02 (ddp 1)``)."""
    return f"{name} ({component} {i})"


class AttemptWatch:
    """One attempt's watch over its nodes (``event``, ``say``: the supervisor's record and log)."""

    def __init__(
        self,
        plan: JobPlan,
        paths: JobPaths,
        launches: Sequence[Launch],
        names: NodeNames,
        attempt: int,
        event: Callable[..., None],
        say: Callable[[str], None],
    ) -> None:
        self.paths, self.launches, self.names, self.attempt = paths, launches, names, attempt
        self.event, self.say = event, say
        started = time.time()
        self.pace: StepPace | None = None
        if plan.watchdog_straggler:
            files = {
                node_label(names.of(x, i), x.component, i): paths.progress(x.component, i)
                for x in launches
                for i in x.nodes
            }
            self.pace = StepPace(files, plan.watchdog_straggler, started)
        self.tensorboard: TensorBoardWatch | None = None
        if plan.watchdog_progress:
            self.tensorboard = TensorBoardWatch(paths.tensorboard(plan.outputs), started)
            self.tensorboard.look(started)  # what earlier attempts wrote

    def look(self, records: Callable[[], Mapping[tuple[str, int], NodeExit]]) -> Outcome | None:
        """Say the stragglers found; the attempt's end when the job's TensorBoard steps stopped (a hang: every
        node's stacks grouped) or its loss is NaN."""
        for found in self.pace.look(time.time()) if self.pace is not None else []:
            self.event("straggler", **found)
            self.say(
                f"straggler: node {found['node']} took {found['seconds_a_step']} s a step over the last"
                f" {found['window']} s, the other nodes {found['others']} s"
            )
        if self.tensorboard is None:
            return None
        hung = self.tensorboard.look(time.time())
        if self.tensorboard.bad_loss is not None:
            tag, step, value = self.tensorboard.bad_loss
            text = f"the loss is {value} at step {step} (TensorBoard tag {tag})"
            outcome = Outcome(JobState.FAILED, f"{text}; cause: nan", cause="nan")
        elif hung:
            text = hung.removeprefix("hung: ")
            outcome = Outcome(JobState.FAILED, f"HUNG: {text}", cause="hang")
            self.show_grouped_stacks(records(), None)
        else:
            return None
        outcome.evidence = {"cause": outcome.cause, "node": "", "log": "tensorboard", "line": 0, "text": text}
        return outcome

    def progress(self) -> dict[str, object]:
        """The attempt's first and last TensorBoard step ({} without them)."""
        return self.tensorboard.progress() if self.tensorboard is not None else {}

    def show_grouped_stacks(self, records: Mapping[tuple[str, int], NodeExit], first: NodeExit | None) -> None:
        """A node hung: every still running node's stacks too, grouped beside the hung ones' (the supervisor's
        log), so the odd node stands out."""
        logs, running = {}, []
        for launch in self.launches:
            for i in launch.nodes:
                label = node_label(self.names.of(launch, i), launch.component, i)
                logs[label] = self.paths.node_log(launch.component, i)
                if (launch.component, i) not in records:
                    running.append(label)
        first_label = node_label(first.node, first.component, first.index) if first is not None else ""
        for line in gather_stacks(self.paths.stacks_request, self.attempt, logs, running, first_label):
            self.say(line)
