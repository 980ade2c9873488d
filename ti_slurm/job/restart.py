"""Surviving interruptions: why an attempt ended, whether to requeue it, and asking Slurm to.

The causes are the spec's ``restart.on`` words: ``preempt``, ``timeout``,
``node_fail``, ``failure`` and ``hang``. A job that may restart is submitted
``--requeue`` (so Slurm itself requeues it on preemption and node failure) with
``--signal=B:<signal>@<before>`` (so the supervisor hears of the time limit, and
of preemption where the site sends the user's signal then). The supervisor
requeues the rest from the batch step: ``scontrol requeue`` of this job (or of
this task of a job array), with the lost nodes in ``ExcNodeList``.

Runs inside the batch step: standard library only, and Slurm's commands only
when an interruption happens.
"""

from __future__ import annotations

from ti_slurm.core.states import REQUEUED_STATES, JobState
from ti_slurm.slurm.text import NODE_STATES_FORMAT, parse_node_pairs, show_job_records, unreachable

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from ti_slurm.core.plan import JobPlan

# how an attempt that ended by each of RESTART_CAUSES (ti_slurm.core.choices) is recorded
CAUSE_STATES = {
    "preempt": JobState.PREEMPTED,
    "timeout": JobState.TIMEOUT,
    "node_fail": JobState.NODE_FAIL,
    "failure": JobState.FAILED,
    "hang": JobState.FAILED,
    "launch": JobState.NODE_FAIL,
    **dict.fromkeys(("gpu_fault", "nccl", "filesystem", "host_oom", "user_error", "gpu_oom", "nan"), JobState.FAILED),
}
REQUEUE_SETTLE = 5.0  # seconds a requeue command killed by a signal waits for Slurm to show the job requeued
SCONTROL_TIMEOUT = 10.0  # seconds; Slurm kills the batch step KillWait (30 s by default) after its SIGTERM


def should_requeue(plan: JobPlan, cause: str, requeues: int, earlier: Sequence[str] = ()) -> bool:
    """Whether an attempt that ended by ``cause`` is requeued: ``restart.on`` allows it (the cause, or the word
    that covers it; a cause of the user's own once in a row: :func:`~ti_slurm.core.causes.restart_allowed`,
    ``earlier``: the causes before) and requeues are left (``requeues``: how often the job was requeued so far)."""
    from ti_slurm.core.causes import restart_allowed

    return restart_allowed(cause, plan.restart_on, earlier)[0] and requeues < plan.restart_max


def requeue_target(environ: Mapping[str, str]) -> str:
    """The id to requeue: ``<array id>_<task id>`` for a task of a job array (else the whole array would be)."""
    array, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return environ.get("SLURM_JOB_ID", "")


class SlurmControl:
    """The few Slurm commands the batch step runs when an attempt is interrupted."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = dict(environ)
        self.target = requeue_target(environ)
        components = environ.get("SLURM_HET_SIZE", "")
        # each component of a heterogeneous job is updated by its own id: <leader>+<offset>
        self.update_ids = (
            [f"{self.target}+{k}" for k in range(int(components))] if components.isdigit() else [self.target]
        )

    def run(self, args: list[str]) -> tuple[int, str]:
        """Run a Slurm command; its exit code and output (127 and why, when it cannot run)."""
        import subprocess

        try:
            done = subprocess.run(
                args,
                env=self.environ,
                capture_output=True,
                text=True,
                timeout=SCONTROL_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 127, f"{args[0]}: {exc}"
        return done.returncode, (done.stdout + done.stderr).strip()

    def show_job(self) -> dict[str, str]:
        """This job's fields as ``scontrol show job`` prints them ({} when Slurm does not answer)."""
        code, out = self.run(["scontrol", "-o", "show", "job", self.environ.get("SLURM_JOB_ID", "")])
        records = show_job_records(out) if code == 0 else []
        return records[0] if records else {}

    def unreachable_nodes(self, names: Iterable[str]) -> list[str]:
        """Those of ``names`` that Slurm says are down or not responding."""
        names = sorted(set(names))
        if not names:
            return []
        code, out = self.run(["sinfo", "-h", "-N", "-n", ",".join(names), "-o", NODE_STATES_FORMAT])
        states = parse_node_pairs(out) if code == 0 else {}
        return [name for name in names if name in states and unreachable(states[name])]

    def shows_requeued(self, settle: float = 0) -> bool:
        """Whether Slurm shows this job requeued, asking again for up to ``settle`` seconds. A requeue command
        killed by a signal needs them: the requeue itself ends this batch step, whose processes (the command,
        and the next one asking) get Slurm's SIGTERM, before or after the job shows as requeued."""
        import time

        deadline = time.monotonic() + settle
        while True:
            if self.show_job().get("JobState") in REQUEUED_STATES:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)

    def requeue(self, exclude: list[str], already: bool = False) -> str:
        """Requeue this job (unless Slurm ``already`` did), away from ``exclude``; "" or Slurm's refusal.

        Slurm starts a requeued job no sooner than its credential lifetime later (``AuthInfo=cred_expire``,
        ``SchedulerParameters=requeue_delay`` from 24.05; 120 s by default), and applies that delay as the
        job finishes ending, so nothing the batch step does can shorten it.
        """
        if not already:
            code, out = self.run(["scontrol", "requeue", self.target])
            if code < 0 and exclude:  # killed by the requeue's own SIGTERM: the requeue is done, and this step has
                self.exclude(exclude)  # KillWait left (5 s on some sites): the exclusion first, not after the settle
            # refused because Slurm requeued it meanwhile (a node it found down: "Job is pending execution")
            already = "pending execution" in out or self.shows_requeued(settle=REQUEUE_SETTLE if code < 0 else 0)
            if code != 0 and not already:
                return out.splitlines()[-1] if out else f"scontrol requeue exited {code}"
        if exclude:  # best effort: without it the next attempt may land on a lost node once it is back
            self.exclude(exclude)
        return ""

    def exclude(self, nodes: list[str]) -> None:
        """Keep the job's next attempt off ``nodes`` (each component's ``ExcNodeList``)."""
        for job_id in self.update_ids:
            self.run(["scontrol", "update", f"JobId={job_id}", f"ExcNodeList={','.join(sorted(set(nodes)))}"])

    def disable_requeue(self) -> None:
        """No more requeues: the restarts are used up, so preemption or node failure ends the job."""
        for job_id in self.update_ids:
            self.run(["scontrol", "update", f"JobId={job_id}", "Requeue=0"])
