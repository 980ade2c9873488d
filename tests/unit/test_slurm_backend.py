"""Parsing what the Slurm commands print (the formats ti-slurm relies on)."""

from __future__ import annotations

import subprocess

import pytest

from ti_slurm.backends.base import JobInfo
from ti_slurm.backends.slurm import SlurmBackend, parse_job_id, parse_squeue, parse_version
from ti_slurm.errors import BackendError


@pytest.mark.parametrize(
    "text,version", [("slurm 22.05.8", (22, 5)), ("slurm-wlm 22.05.8\n", (22, 5)), ("slurm 25.11.0", (25, 11))]
)
def test_versions(text: str, version: tuple[int, int]) -> None:
    assert parse_version(text) == version


@pytest.mark.parametrize("text,job", [("123\n", "123"), ("77;cluster2\n", "77"), ("warning: x\n456\n", "456")])
def test_job_ids(text: str, job: str) -> None:
    assert parse_job_id(text) == job


def test_no_job_id_is_an_error() -> None:
    with pytest.raises(BackendError, match="no job id"):
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
