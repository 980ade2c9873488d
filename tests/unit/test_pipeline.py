"""Pipelines: a job that waits for others (``after:``, ``submit --after``) as Slurm's ``--dependency``, what
``status`` says while it waits, and what a wait that can never end becomes."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli
from tests.unit.test_pyslurm_backend import KNOWN, sbatch_lines
from tests.unit.test_slurm_backend import job_line
from ti_slurm.backends.base import JobInfo
from ti_slurm.backends.pyslurm import job_description
from ti_slurm.backends.slurm import parse_scontrol_jobs
from ti_slurm.core.errors import SpecError
from ti_slurm.core.states import JobState
from ti_slurm.follow.status import job_status, progress_line
from ti_slurm.submitting.planning import make_plan
from ti_slurm.submitting.script import render
from ti_slurm.submitting.spec import load_spec, with_after

EVAL = "mode: ddp\nnodes: 2\ncommand: python eval.py\n"


def test_after_becomes_slurms_dependency_and_a_wait_that_cannot_end_ends_the_job(write_spec) -> None:
    plan = make_plan(load_spec(write_spec(EVAL + "after: {jobs: [5631001, 5631002]}\n")))
    lines = sbatch_lines(plan)
    assert (lines["dependency"], lines["kill-on-invalid-dep"]) == ("afterok:5631001:5631002", "yes")
    fields = job_description(plan, "", {}, KNOWN | {"kill_on_invalid_dependency"})
    assert (fields["dependencies"], fields["kill_on_invalid_dependency"]) == ("afterok:5631001:5631002", True)
    assert "--dependency" not in render(make_plan(load_spec(write_spec(EVAL))))


def test_a_heterogeneous_job_waits_as_one(write_spec) -> None:
    roles = "mode: ps-worker\ncommand: x\nps: {nodes: 1}\nworker: {nodes: 2}\n"
    spec = write_spec(roles + "after: {jobs: 7, when: failed}\n")
    script = render(make_plan(load_spec(spec)))
    assert script.count('#SBATCH --dependency="afternotok:7"') == 1  # the first component's: the whole job's
    assert script.index("--dependency") < script.index("#SBATCH hetjob")


@pytest.mark.parametrize(
    "text,line",
    [
        ("after: {jobs: [12ab]}\n", "after.jobs: ['12ab']: Value error, '12ab' is not a Slurm job id"),
        ("after: {jobs: []}\n", "after.jobs: []: List should have at least 1 item after validation, not 0"),
        ("after: {jobs: [1], when: done}\n", "after.when: 'done': Input should be 'ok', 'failed' or 'any'"),
        (
            "after: {jobs: [1]}\nsbatch: {dependency: 'afterok:2'}\n",
            "sbatch.dependency: 'afterok:2': --dependency: ti-slurm sets it for what the job waits",
        ),
    ],
)
def test_a_bad_after_is_one_line(write_spec, text: str, line: str) -> None:
    with pytest.raises(SpecError) as err:
        make_plan(load_spec(write_spec(EVAL + text)))
    assert str(err.value).startswith(line.replace("Value error, ", "")), str(err.value)


def test_submit_after_takes_the_place_of_the_specs_and_checks_its_ids(write_spec) -> None:
    spec = load_spec(write_spec(EVAL + "after: {jobs: [1]}\n"))
    assert make_plan(with_after(spec, ["9", "10_2"], "any")).dependency == "afterany:9:10_2"
    res = run_cli("submit", str(write_spec(EVAL)), "--after", "12,x1")
    assert (res.returncode, res.stderr.strip()) == (
        2,
        "ti-slurm: error: after.jobs: ['12', 'x1']: 'x1' is not a Slurm job id (123, an array task 123_4, or 123_*)"
        " (see docs/pipelines.md)",
    )
    res = run_cli("submit", str(write_spec(EVAL)), "--when", "failed")
    assert res.returncode == 2 and "--when: 'failed': says how the --after jobs must end" in res.stderr


def test_status_says_what_a_pending_job_waits_for_and_why_it_never_ran() -> None:
    text = job_line("21", "PENDING", "Dependency").replace("Dependency=(null)", "Dependency=afterok:20(unfulfilled)")
    queued = parse_scontrol_jobs(text, 1000)["21"]
    assert queued.dependency == "afterok:20(unfulfilled)"
    job = JobInfo("21", "eval", "slurm", "/jobs/21", submission="s1")
    assert progress_line(job_status(job, [], queued)) == "PENDING (Dependency): waits for afterok:20(unfulfilled)"
    never = JobInfo("21", state=JobState.CANCELLED, reason="DependencyNeverSatisfied", dependency="afterok:20(failed)")
    status = job_status(job, [], never)
    assert (status.state, status.reason) == (
        JobState.CANCELLED,
        "never started: the jobs it waited for ended otherwise (afterok:20(failed))",
    )
