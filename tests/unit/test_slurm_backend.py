"""Parsing what the Slurm commands print (the formats ti-slurm relies on)."""

from __future__ import annotations

import subprocess

import pytest

from ti_slurm.backends.base import JobInfo
from ti_slurm.backends.slurm import SlurmBackend, parse_scontrol_jobs
from ti_slurm.core.errors import BackendError, SubmissionError
from ti_slurm.transports import LocalTransport


def job_line(job_id: str, state: str, reason: str = "None", nodes: str = "(null)", **extra: str) -> str:
    het = f" HetJobId={extra['het']} HetJobOffset={extra['offset']}" if "het" in extra else ""
    user = extra.get("user", "me(1000)")
    return (
        f"JobId={job_id}{het} JobName={extra.get('name', 'x')} UserId={user} GroupId=g(1000) Priority=1 "
        f"JobState={state} Reason={reason} Dependency=(null) NodeList={nodes} BatchHost=n1 WorkDir=/home/me a b\n"
    )


def test_het_components_fold_into_one_job() -> None:
    text = (
        job_line("10", "RUNNING", nodes="node01", het="10", offset="0", name="ray job")
        + job_line("11", "PENDING", "Resources", het="10", offset="1")
        + job_line("12", "PENDING", "Priority")
        + job_line("13", "RUNNING", user="other(1001)")
    )
    jobs = parse_scontrol_jobs(text, 1000)
    assert sorted(jobs) == ["10", "12"]  # another user's job is not ours
    assert (jobs["10"].state, jobs["10"].nodes, jobs["10"].name) == ("RUNNING", "node01", "ray job")
    assert (jobs["12"].state, jobs["12"].reason) == ("PENDING", "Priority")


def test_one_controller_call_for_many_jobs() -> None:
    calls = []

    def run(argv, stdin):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "1000\n" + job_line("1", "RUNNING") + job_line("2", "PENDING"), "")

    states = SlurmBackend(LocalTransport(run)).queue_states([JobInfo(str(i)) for i in range(1, 201)])
    assert len(calls) == 1 and calls[0][-4:] == ["scontrol", "-o", "show", "job"]
    assert set(states) == {"1", "2"}


def test_a_cluster_of_a_multi_cluster_setup_gets_every_command_with_clusters() -> None:
    calls: list[list[str]] = []

    def run(argv, stdin):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        out = {"sbatch": "77;twin\n", "sh": "1000\n" + job_line("77", "RUNNING")}.get(argv[0], "")
        return subprocess.CompletedProcess(argv, 0, out, "")

    here, there = SlurmBackend(LocalTransport(run)), SlurmBackend(LocalTransport(run), slurm_cluster="twin")
    assert there.sbatch(there.command("sbatch", "--parsable"), "#!/bin/sh\n") == "77"  # Slurm's "id;cluster"
    there.queue_states([JobInfo("77")])
    there.cancel(JobInfo("77"))
    there.sinfo()
    assert [c for c in calls if "--clusters=twin" not in c] == []
    assert calls[1][-5:] == ["scontrol", "--clusters=twin", "-o", "show", "job"]
    assert here.partitions_key() != there.partitions_key()  # two clusters' answers are never shared


def test_no_jobs_at_all_is_an_empty_queue() -> None:
    def run(argv, stdin):  # type: ignore[no-untyped-def]
        return subprocess.CompletedProcess(argv, 0, "1000\nNo jobs in the system\n", "")

    assert SlurmBackend(LocalTransport(run)).queue_states([JobInfo("99")]) == {}


class FakeSlurm:
    """A command runner that answers like the Slurm tools and remembers what it was asked."""

    def __init__(self, answers: dict[str, subprocess.CompletedProcess[str]]) -> None:
        self.answers, self.calls = answers, []  # type: list[tuple[list[str], str | None]]

    def __call__(self, argv, stdin):  # type: ignore[no-untyped-def]
        self.calls.append((list(argv), stdin))
        return self.answers.get(argv[0], subprocess.CompletedProcess(argv, 0, "", ""))


def test_submit_makes_the_output_dir_and_tags_the_job(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ti_slurm.core.plan import Component, JobPlan
    from ti_slurm.submitting.script import render

    runner = FakeSlurm({"sbatch": subprocess.CompletedProcess(["sbatch"], 0, "4242\n", "")})
    plan = JobPlan("t", "ddp", "true", (Component("ddp", 1, 0, 1),), output_dir=str(tmp_path / "out"), submission="s1")
    script = render(plan)
    info = SlurmBackend(LocalTransport(runner)).submit(plan, script, check_fit=False)
    assert (tmp_path / "out").is_dir()
    assert runner.calls == [(["sbatch", "--parsable"], script)]
    assert '#SBATCH --comment="ti-slurm:s1"' in script.splitlines()
    assert (info.job_id, info.job_dir, info.state) == ("4242", str(tmp_path / "out" / "4242"), "PENDING")


def test_a_refused_job_is_a_submission_error_with_sbatch_reason(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ti_slurm.core.plan import Component, JobPlan

    refused = "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"
    runner = FakeSlurm({"sbatch": subprocess.CompletedProcess(["sbatch"], 1, "", refused)})
    plan = JobPlan("t", "ddp", "true", (Component("ddp", 9, 0, 1),), output_dir=str(tmp_path))
    with pytest.raises(SubmissionError) as err:
        SlurmBackend(LocalTransport(runner)).submit(plan, "#!/bin/bash\n", check_fit=False)
    assert str(err.value) == f"sbatch failed: {refused.strip()}"


def test_queue_states_say_what_the_job_is_doing() -> None:
    text = job_line("5", "CONFIGURING") + job_line("6", "COMPLETING") + job_line("7", "REQUEUED", "BeginTime")
    text += job_line("8", "TIMEOUT", "TimeLimit")
    assert [(j.state, j.reason) for j in parse_scontrol_jobs(text, 1000).values()] == [
        ("RUNNING", "CONFIGURING"),
        ("RUNNING", "COMPLETING"),
        ("PENDING", "BeginTime"),
        ("TIMEOUT", "TimeLimit"),
    ]


def test_a_job_directory_is_found_from_its_output_file() -> None:
    show = "JobId=77 JobName=x WorkDir=/home/me StdIn=/dev/null StdOut=/scratch/jobs/slurm-77.out\n"
    runner = FakeSlurm({"scontrol": subprocess.CompletedProcess(["scontrol"], 0, show, "")})
    assert SlurmBackend(LocalTransport(runner)).find_job_dir("77") == "/scratch/jobs/77"
    assert SlurmBackend(LocalTransport(FakeSlurm({}))).find_job_dir("78") is None


def test_cancel_is_scancel_and_its_failure_one_line() -> None:
    runner = FakeSlurm({"scancel": subprocess.CompletedProcess(["scancel"], 1, "", "scancel: error: Kill job error\n")})
    with pytest.raises(BackendError, match=r"^scancel failed: scancel: error: Kill job error$"):
        SlurmBackend(LocalTransport(runner)).cancel(JobInfo("9"))


def test_a_job_that_can_never_start_is_refused_before_sbatch(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ti_slurm.core.plan import Component, JobPlan

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # no partitions shared by another submit
    runner = FakeSlurm({"sinfo": subprocess.CompletedProcess(["sinfo"], 0, "debug*|4|gpu:8|infinite\n", "")})
    plan = JobPlan("t", "ddp", "true", (Component("ddp", 128, 0, 1),), output_dir=str(tmp_path / "out"))
    with pytest.raises(SubmissionError, match=r"^the job can never start: 128 nodes asked, partition debug has 4"):
        SlurmBackend(LocalTransport(runner)).submit(plan, "#!/bin/bash\n")
    assert [argv[0] for argv, _ in runner.calls] == ["sinfo"] and not (tmp_path / "out").exists()


def test_partitions_are_shared_and_checked_again_before_a_refusal(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ti_slurm.core.plan import Component, JobPlan

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    runner = FakeSlurm(
        {
            "sinfo": subprocess.CompletedProcess(["sinfo"], 0, "debug*|4|gpu:8|infinite\n", ""),
            "sbatch": subprocess.CompletedProcess(["sbatch"], 0, "7\n", ""),
        }
    )
    small = JobPlan("t", "ddp", "true", (Component("ddp", 2, 0, 1),), output_dir=str(tmp_path / "out"))
    for _ in range(3):  # three submits, one sinfo
        SlurmBackend(LocalTransport(runner)).submit(small, "#!/bin/bash\n")
    assert [argv[0] for argv, _ in runner.calls].count("sinfo") == 1
    runner.answers["sinfo"] = subprocess.CompletedProcess(["sinfo"], 0, "debug*|8|gpu:8|infinite\n", "")
    grown = JobPlan("t", "ddp", "true", (Component("ddp", 6, 0, 1),), output_dir=str(tmp_path / "out"))
    SlurmBackend(LocalTransport(runner)).submit(
        grown, "#!/bin/bash\n"
    )  # the shared answer says 4 nodes: asked again, fits now
    assert [argv[0] for argv, _ in runner.calls].count("sinfo") == 2


def test_two_clusters_reached_from_here_never_share_their_partitions(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A cluster's partitions are cached under its own Slurm config: the second cluster's submit asks its own
    sinfo, and a job too big for the first cluster is not refused on the second's answer."""
    from ti_slurm.core.plan import Component, JobPlan

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    small_answers = {"sinfo": subprocess.CompletedProcess(["sinfo"], 0, "debug*|2|(null)|infinite\n", "")}
    big_answers = {
        "sinfo": subprocess.CompletedProcess(["sinfo"], 0, "debug*|8|(null)|infinite\n", ""),
        "sbatch": subprocess.CompletedProcess(["sbatch"], 0, "7\n", ""),
    }
    plan = JobPlan("t", "ddp", "true", (Component("ddp", 4, 0, 1),), output_dir=str(tmp_path / "out"))
    small, big = FakeSlurm(small_answers), FakeSlurm(big_answers)
    with pytest.raises(SubmissionError, match="4 nodes asked, partition debug has 2"):
        SlurmBackend(LocalTransport(small)).submit(plan, "#!/bin/bash\n")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm-big/slurm.conf")  # the other cluster's commands
    assert SlurmBackend(LocalTransport(big)).submit(plan, "#!/bin/bash\n").job_id == "7"
    assert [argv[0] for argv, _ in big.calls] == ["sinfo", "sbatch"]
    other = SlurmBackend(LocalTransport(big))
    other.queue_key = "/etc/slurm-third/slurm.conf"  # a [[cluster]]'s slurm.conf
    assert len({other.partitions_key(), SlurmBackend(LocalTransport(big)).partitions_key()}) == 2
