"""Parsing what the Slurm commands print (the formats ti-slurm relies on)."""

from __future__ import annotations

import subprocess

import pytest

from ti_slurm.backends.base import JobInfo
from ti_slurm.backends.slurm import SlurmBackend, parse_job_id, parse_squeue, parse_version
from ti_slurm.errors import BackendError, SubmissionError


@pytest.mark.parametrize(
    "text,version", [("slurm 22.05.8", (22, 5)), ("slurm-wlm 22.05.8\n", (22, 5)), ("slurm 25.11.0", (25, 11))]
)
def test_versions(text: str, version: tuple[int, int]) -> None:
    assert parse_version(text) == version


@pytest.mark.parametrize("text,job", [("123\n", "123"), ("77;cluster2\n", "77"), ("warning: x\n456\n", "456")])
def test_job_ids(text: str, job: str) -> None:
    assert parse_job_id(text) == job


def test_no_job_id_is_an_error() -> None:
    with pytest.raises(SubmissionError, match="no job id"):
        parse_job_id("sbatch: error: Batch job submission failed\n")


def test_het_components_fold_into_one_job() -> None:
    jobs = parse_squeue("10+0|RUNNING|None|node01|ray\n10+1|PENDING|Resources||ray\n11|PENDING|Priority||x\n")
    assert jobs["10"].state == "RUNNING" and jobs["10"].nodes == "node01"
    assert (jobs["11"].state, jobs["11"].reason) == ("PENDING", "Priority")


def test_one_squeue_call_for_many_jobs() -> None:
    calls = []

    def run(argv, stdin):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "1|RUNNING|None|n1|a\n2|PENDING|Resources||b\n", "")

    states = SlurmBackend(run).queue_states([JobInfo(str(i)) for i in range(1, 201)])
    assert len(calls) == 1 and calls[0][-1] == "--jobs=" + ",".join(str(i) for i in range(1, 201))
    assert set(states) == {"1", "2"}


def test_finished_jobs_are_simply_not_queued() -> None:
    def run(argv, stdin):  # type: ignore[no-untyped-def]
        return subprocess.CompletedProcess(argv, 1, "", "slurm_load_jobs error: Invalid job id specified")

    assert SlurmBackend(run).queue_states([JobInfo("99")]) == {}


class FakeSlurm:
    """A command runner that answers like the Slurm tools and remembers what it was asked."""

    def __init__(self, answers: dict[str, subprocess.CompletedProcess[str]]) -> None:
        self.answers, self.calls = answers, []  # type: list[tuple[list[str], str | None]]

    def __call__(self, argv, stdin):  # type: ignore[no-untyped-def]
        self.calls.append((list(argv), stdin))
        return self.answers.get(argv[0], subprocess.CompletedProcess(argv, 0, "", ""))


def test_submit_makes_the_output_dir_and_tags_the_job(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ti_slurm.job.plan import Component, JobPlan

    runner = FakeSlurm({"sbatch": subprocess.CompletedProcess(["sbatch"], 0, "4242\n", "")})
    plan = JobPlan("t", "ddp", "true", (Component("ddp", 1, 0, 1),), output_dir=str(tmp_path / "out"), submission="s1")
    info = SlurmBackend(runner).submit(plan, "#!/bin/bash\n")
    assert (tmp_path / "out").is_dir()
    assert runner.calls == [(["sbatch", "--parsable", "--comment=ti-slurm:s1"], "#!/bin/bash\n")]
    assert (info.job_id, info.job_dir, info.state) == ("4242", str(tmp_path / "out" / "4242"), "PENDING")


def test_a_refused_job_is_a_submission_error_with_sbatch_reason(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ti_slurm.job.plan import Component, JobPlan

    refused = "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"
    runner = FakeSlurm({"sbatch": subprocess.CompletedProcess(["sbatch"], 1, "", refused)})
    plan = JobPlan("t", "ddp", "true", (Component("ddp", 9, 0, 1),), output_dir=str(tmp_path))
    with pytest.raises(SubmissionError) as err:
        SlurmBackend(runner).submit(plan, "#!/bin/bash\n")
    assert str(err.value) == f"sbatch failed: {refused.strip()}"


def test_queue_states_say_what_the_job_is_doing() -> None:
    jobs = parse_squeue("5|CONFIGURING|None|n[1-2]|a\n6|COMPLETING|None|n3|b\n7|REQUEUED|BeginTime||c\n")
    assert [(j.state, j.reason) for j in jobs.values()] == [
        ("RUNNING", "CONFIGURING"),
        ("RUNNING", "COMPLETING"),
        ("PENDING", "BeginTime"),
    ]


def test_a_job_directory_is_found_from_its_output_file() -> None:
    show = "JobId=77 JobName=x\n   StdOut=/scratch/jobs/slurm-77.out\n"
    runner = FakeSlurm({"scontrol": subprocess.CompletedProcess(["scontrol"], 0, show, "")})
    assert SlurmBackend(runner).find_job_dir("77") == "/scratch/jobs/77"
    assert SlurmBackend(FakeSlurm({})).find_job_dir("78") is None


def test_cancel_is_scancel_and_its_failure_one_line() -> None:
    runner = FakeSlurm({"scancel": subprocess.CompletedProcess(["scancel"], 1, "", "scancel: error: Kill job error\n")})
    with pytest.raises(BackendError, match=r"^scancel failed: scancel: error: Kill job error$"):
        SlurmBackend(runner).cancel(JobInfo("9"))
