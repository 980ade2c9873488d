"""Reading what Slurm prints: each parser of ti_slurm/slurm/text.py fed what Slurm 22.05 and 25.11 printed.

The recordings in tests/data/slurm/<version>/ were taken on the test clusters (ci/slurm-cluster/up) with a held
job named with a space and a comment, a held array (2-5%2), a held heterogeneous job, a running array and a running
heterogeneous job, all by root.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ti_slurm.backends.slurm import parse_scontrol_jobs
from ti_slurm.core.errors import BackendError, SubmissionError
from ti_slurm.core.states import REQUEUED_STATES, JobState
from ti_slurm.slurm.text import (
    array_task_ids,
    clock_time,
    conf_lines,
    launch_failure,
    no_controller,
    output_dir,
    owner_uid,
    parse_cluster_names,
    parse_comments,
    parse_config,
    parse_idle,
    parse_job_id,
    parse_node_pairs,
    parse_partitions,
    parse_test_only,
    parse_version,
    preempted,
    read_conf,
    show_job_record,
    show_job_records,
    time_minutes,
    time_seconds,
    unreachable,
    value,
)

RECORDED = Path(__file__).parents[1] / "data" / "slurm"
VERSIONS = {"22.05": (22, 5), "25.11": (25, 11)}


def recorded(version: str, name: str) -> str:
    return (RECORDED / version / f"{name}.txt").read_text()


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_show_job_reads_every_kind_of_record(version: str) -> None:
    records = show_job_records(recorded(version, "scontrol-show-job"))
    assert len(records) == 8 and all(owner_uid(r) == 0 for r in records)
    held = records[0]
    assert (held["JobName"], held["JobState"], held["Reason"], held["Comment"]) == (
        "plain name",
        "CANCELLED",
        "JobHeldUser",
        "ti-slurm:abc",
    )
    assert held["TimeLimit"] == "1-02:00:00" and time_minutes(held["TimeLimit"]) == 26 * 60
    assert value(held, "Dependency") == "" and value(held, "NoSuchField") == ""
    assert output_dir(held) == "/work/main" and not preempted(held)
    het = [r for r in records if r.get("JobName") == "runhet"]
    assert [value(r, "HetJobOffset") for r in het] == ["0", "1"] and {r["HetJobId"] for r in het} == {het[0]["JobId"]}
    assert all(r["JobState"] == "RUNNING" and value(r, "NodeList") for r in het)
    array = [r for r in records if r.get("JobName") == "run arr"]
    assert sorted(r["ArrayTaskId"] for r in array) == ["0", "1"]


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_the_queue_of_a_user_from_recorded_records(version: str) -> None:
    text = recorded(version, "scontrol-show-job")
    jobs = parse_scontrol_jobs(text, 0)
    first = show_job_records(text)[0]["JobId"]
    het = next(j for j in jobs.values() if j.name == "runhet")
    assert het.state is JobState.RUNNING and len(het.nodes.split(",")) == 2  # both components' nodes
    assert jobs[first].name == "plain name" and jobs[first].state is JobState.CANCELLED
    assert sum(1 for j in jobs.values() if j.name == "run arr") == 2
    assert parse_scontrol_jobs(text, 1000) == {}  # root's jobs are not another user's


def test_a_field_value_may_hold_spaces_and_equals_signs_that_start_no_field() -> None:
    line = "JobId=7 JobName=my run a=b UserId=me(1000) JobState=RUNNING Reason=None Command=/x/run.sh --lr=3 WorkDir=/x"
    fields = show_job_record(line)
    assert (fields["JobName"], fields["UserId"], fields["Command"], fields["WorkDir"]) == (
        "my run a=b",
        "me(1000)",
        "/x/run.sh --lr=3",
        "/x",
    )
    assert owner_uid(fields) == 1000 and owner_uid({"UserId": "gone"}) is None
    assert show_job_records("slurm_load_jobs error: Invalid job id specified\n") == []


def test_preemption_is_read_from_the_preempt_time() -> None:
    assert preempted({"PreemptTime": "2026-11-30T08:00:00"})
    assert not any(preempted({"PreemptTime": t}) for t in ("None", "Unknown", ""))


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_sinfo_formats_from_recorded_answers(version: str) -> None:
    parts = parse_partitions(recorded(version, "sinfo-partitions"))
    assert parts["debug"].default and parts["debug"].nodes == 4 and parts["debug"].max_minutes is None
    assert parts["debug"].max_per_node == {"gpu": 8, "npu": 8} and parts["rdma"].max_gpus_per_node == 8
    states = parse_node_pairs(recorded(version, "sinfo-node-states"))
    assert len(states) >= 4 and not any(unreachable(s) for s in states.values())
    addresses = parse_node_pairs(recorded(version, "sinfo-node-addresses"))
    assert set(addresses) == set(states) and all(a.count(".") == 3 for a in addresses.values())


def test_partitions_sum_their_groups_of_alike_nodes() -> None:
    text = "debug*|4|gpu:8|infinite\nrdma|2|gpu:8(S:0-1)|2-00:00:00\nsmall|3|(null)|30:00\nsmall|1|gpu:a100:2|30:00\n"
    parts = parse_partitions(text + "ascend|2|gpu:8,npu:8(S:0-1)|infinite\nnot a line\n")
    assert [(p.name, p.nodes, p.max_gpus_per_node, p.max_minutes, p.default) for p in parts.values()] == [
        ("debug", 4, 8, None, True),
        ("rdma", 2, 8, 2880, False),
        ("small", 4, 2, 30, False),
        ("ascend", 2, 8, None, False),
    ]
    assert parts["ascend"].max_per_node == {"gpu": 8, "npu": 8}


def test_node_states_that_mean_gone() -> None:
    assert parse_node_pairs("node01 down*\nnode02 allocated\nbroken\n") == {"node01": "down*", "node02": "allocated"}
    assert [unreachable(s) for s in ("down*", "idle*", "allocated", "mixed", "fail", "drained", "mixed+drain")] == [
        True, True, False, False, True, False, False]  # fmt: skip


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_squeue_comments_name_heterogeneous_jobs_by_their_leader(version: str) -> None:
    text = recorded(version, "squeue-comments")
    first = recorded(version, "sbatch-parsable").strip()
    comments = parse_comments(text)
    assert comments[first] == "ti-slurm:abc"
    assert not any("+" in job_id for job_id in comments) and list(comments.values()).count("(null)") == 2


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_config_and_version_from_recorded_answers(version: str) -> None:
    config = parse_config(recorded(version, "scontrol-show-config"))
    assert config["MaxArraySize"] == "1001" and config["SLURM_CONF"].endswith("/slurm.conf")
    assert config["AuthType"].startswith("auth/") and "preempt_send_user_signal" in config["SlurmctldParameters"]
    assert parse_version(recorded(version, "sinfo-version")) == VERSIONS[version]
    assert parse_job_id(recorded(version, "sbatch-parsable")).isdigit()


@pytest.mark.parametrize(
    "text,version", [("slurm 22.05.8", (22, 5)), ("slurm-wlm 22.05.8\n", (22, 5)), ("slurm 25.11.0", (25, 11))]
)
def test_versions(text: str, version: tuple[int, int]) -> None:
    assert parse_version(text) == version
    with pytest.raises(BackendError, match="cannot read a Slurm version from 'sinfo: not found'"):
        parse_version("sinfo: not found")


@pytest.mark.parametrize("text,job", [("123\n", "123"), ("77;cluster2\n", "77"), ("warning: x\n456\n", "456")])
def test_job_ids(text: str, job: str) -> None:
    assert parse_job_id(text) == job
    with pytest.raises(SubmissionError, match="no job id"):
        parse_job_id("sbatch: error: Batch job submission failed\n")


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("30", 1800),
        ("30:01", 1801),
        ("1:00:00", 3600),
        ("2-12", 216000),
        ("1-00:30", 88200),
        ("1-00:00:05", 86405),
        # no limit, however it is said: as sbatch reads 0, as sinfo and scontrol print none
        ("0", None),
        ("00:00:00", None),
        ("UNLIMITED", None),
        ("infinite", None),
        ("NONE", None),
        ("N/A", None),
        ("", None),
        (None, None),
    ],
)
def test_one_reading_of_slurm_times(text: str | None, seconds: int | None) -> None:
    assert time_seconds(text) == seconds
    assert time_minutes(text) == (None if seconds is None else -(-seconds // 60))


@pytest.mark.parametrize("text", ["soon", "1:2:3:4", "x-01:00", "1:-5"])
def test_text_that_is_no_time_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        time_seconds(text)


def test_conf_files(tmp_path: Path) -> None:
    conf = tmp_path / "oci.conf"
    conf.write_text('# a comment\n\nRunTimeRun="crun run %b"\nRunTimeKill = crun kill %n\nbroken line\n')
    assert conf_lines(str(conf)) == ['RunTimeRun="crun run %b"', "RunTimeKill = crun kill %n", "broken line"]
    assert read_conf(str(conf)) == {"RunTimeRun": "crun run %b", "RunTimeKill": "crun kill %n"}
    assert conf_lines(str(tmp_path / "absent.conf")) == [] and read_conf(str(tmp_path)) == {}


def test_array_task_ids_and_requeued_states() -> None:
    assert array_task_ids("N/A", "N/A") == [] and array_task_ids("7", "1,3-7:2") == ["7_1", "7_3", "7_5", "7_7"]
    assert array_task_ids("9", "2-5%2") == ["9_2", "9_3", "9_4", "9_5"]
    assert {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"} == REQUEUED_STATES
    assert all(JobState.from_slurm(s) is JobState.PENDING for s in REQUEUED_STATES)


def test_srun_names_each_node_it_could_not_start_the_step_on() -> None:
    said = recorded("25.11", "srun-launch-failed").splitlines()  # a node whose slurmd was killed, then srun -N2
    assert [launch_failure(line) for line in said if launch_failure(line)] == [
        ("node02", "Communication connection failure")
    ]
    assert launch_failure("srun: error: Application launch failed: Communication connection failure") is None


@pytest.mark.parametrize(
    "said,none_answers",
    [
        ("sinfo: error: slurm_load_partitions: Insane message length", True),  # a config naming no live controller
        ("slurm_load_partitions: Unable to contact slurm controller (connect failure)", True),
        ("sbatch: error: Batch job submission failed: Invalid partition name specified", False),
    ],
)
def test_no_controller_is_told_from_other_refusals(said: str, none_answers: bool) -> None:
    assert no_controller(said) is none_answers


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_what_clusters_and_auto_read_from_recorded_answers(version: str) -> None:
    """``clusters`` and ``--cluster auto``: idle nodes per partition (a 2-node job running in debug), when a job
    would start (and a refusal: no time), the multi-cluster setup's names (25.11's cluster has no slurmdbd)."""
    idle = parse_idle(recorded(version, "sinfo-idle"))
    assert idle["debug"] == 2 and idle["rdma"] == 2 and idle["lowprio"] == 2  # lowprio shares debug's nodes
    said = recorded(version, "sbatch-test-only")
    when = clock_time(said.split(" to start at ")[1].split()[0])
    assert when is not None
    assert parse_test_only(said, when) == (said.split(" to start at ")[1].split()[0], "debug")
    assert parse_test_only(recorded(version, "sbatch-test-only-refused"), when) is None
    names = parse_cluster_names(recorded(version, "sacctmgr-clusters"))
    assert names == (["tisci", "tistwin"] if version == "22.05" else [])


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_points_in_time_as_scontrol_prints_them(version: str) -> None:
    import time

    ends = {value(r, "EndTime") for r in show_job_records(recorded(version, "scontrol-show-job"))}
    read = {clock_time(e) for e in ends if e != "Unknown"}
    assert read and all(t is not None and abs(t - time.time()) < 10 * 365 * 86400 for t in read)
    assert clock_time("Unknown") is None and clock_time("") is None
    assert clock_time("2026-11-30T07:56:27") == time.mktime((2026, 11, 30, 7, 56, 27, 0, 0, -1))
