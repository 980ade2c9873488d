"""Several clusters, the pure parts: the user config's [[cluster]] tables checked, sbatch --test-only and sinfo
read, the earliest start chosen, ids named by cluster (the cluster tier runs both test clusters at once)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ti_slurm.backends.base import JobInfo
from ti_slurm.clusters import Cluster, Estimate, earliest, find_cluster, known_clusters
from ti_slurm.core.errors import ConfigError
from ti_slurm.routing import check_job_id
from ti_slurm.slurm.text import parse_idle, parse_test_only
from ti_slurm.submitting.userconfig import parse_user_config


def parse_clusters(tables: object, where: str) -> list[Cluster]:
    return parse_user_config({"cluster": tables}, where).cluster


def test_cluster_tables_are_read_and_each_mistake_is_one_line() -> None:
    tables = [
        {"name": "gpu", "host": "gpu-login", "partition": "a100"},
        {"name": "npu", "slurm_conf": "/etc/slurm-npu/slurm.conf", "bin_dir": "/opt/slurm/bin"},
        {"name": "portal", "rest_url": "https://slurm.example.org:6820", "rest_token": "env"},
        {"name": "twin", "slurm_cluster": "tistwin"},
        {"name": "far", "host": "far-login", "slurm_cluster": "far2"},
    ]
    gpu, npu, portal, twin, far = parse_clusters(tables, "config.toml")
    assert (gpu.reached, npu.reached, portal.reached) == (
        "ssh gpu-login", "slurm.conf /etc/slurm-npu/slurm.conf", "slurmrestd https://slurm.example.org:6820"
    )
    assert (twin.reached, far.reached) == ("--clusters=tistwin", "ssh far-login --clusters=far2")
    assert gpu.defaults() == {"partition": "a100"} and npu.defaults() == {}
    two = [{"name": "gpu", "host": "a"}, {"name": "gpu", "host": "b"}]
    mistakes = [
        ([{"name": "gpu"}], "cluster.0: give exactly one of slurm_conf.*given: none"),
        ([{"name": "gpu", "host": "a", "rest_url": "http://b"}], "cluster.0: give exactly one of.*: host, rest_url"),
        ([{"name": "9x", "host": "a"}], "cluster.0.name: '9x': expected a name"),
        ([{"name": "gpu", "host": "a", "partiton": "x"}], "cluster.0.partiton: 'x': unknown key; did you mean 'part"),
        ([{"nmae": "gpu", "host": "a"}], "cluster.0.nmae: 'gpu': unknown key; did you mean 'name'"),
        (two, "cluster: two \\[\\[cluster\\]\\] tables are named 'gpu'"),
        ([{"name": "gpu", "host": 5}], "cluster.0.host: 5: expected text"),
        ([{"name": "gpu", "rest_url": "http://b", "slurm_cluster": "c"}], "cluster.0: slurmrestd serves its own"),
        ([{"name": "gpu", "slurm_cluster": "a b"}], "cluster.0.slurm_cluster: 'a b': expected a name"),
        ({"name": "gpu"}, "cluster: .*expected a list"),
    ]
    for given, said in mistakes:
        with pytest.raises(ConfigError, match="^user config config.toml: " + said) as refused:
            parse_clusters(given, "config.toml")
        assert "\n" not in str(refused.value)


def test_test_only_and_idle_nodes_are_read_as_slurm_prints_them() -> None:
    said = "sbatch: Job 5648001 to start at 2026-12-05T12:01:30 using 2 processors on nodes node[01-02] in partition"
    said += " debug"
    import datetime

    now = datetime.datetime.fromisoformat("2026-12-05T11:50:00").timestamp()
    assert parse_test_only(said, now) == ("2026-12-05T12:01:30", "debug")
    said_2511 = "sbatch: Job 11648168 to start at 2026-12-05T11:54:55 a using 2 processors on nodes node[01-02] in"
    assert parse_test_only(said_2511 + " partition debug", now) == ("2026-12-05T11:54:55", "debug")
    assert parse_test_only("sbatch: error: Batch job submission failed: Invalid partition name specified", now) is None
    far = "sbatch: Job 7 to start at 2537-04-25T05:18:53 a using 2 processors on nodes node[01-02] in partition debug"
    assert parse_test_only(far, now) == ("2537-04-25T05:18:53", "debug")  # 25.11's "when unlimited jobs end"
    for odd in ("0000-01-01T00:00:00", "1970-01-01T00:00:00", "2026-13-45T99:00:00", "soon"):  # no time to trust
        assert parse_test_only(f"sbatch: Job 5 to start at {odd} using 2 processors in partition debug", now) is None
    sinfo = "debug* idle 2\ndebug* alloc 2\nrdma idle 2\nlowprio alloc 4\n"
    assert parse_idle(sinfo) == {"debug": 2, "rdma": 2, "lowprio": 0}


def test_the_earliest_start_wins_and_now_before_any_time() -> None:
    a, b, c = Cluster(name="a", host="a"), Cluster(name="b", host="b"), Cluster(name="c", host="c")
    later, sooner = Estimate(a, "2026-12-05T13:00:00"), Estimate(b, "2026-12-05T12:00:00")
    down = Estimate(c, "", "no answer within 8 s")
    assert earliest([later, sooner, down]) is sooner
    assert earliest([later, Estimate(c, "now")]).cluster is c  # type: ignore[union-attr]
    assert earliest([down]) is None


def test_a_job_on_a_named_cluster_is_named_by_it() -> None:
    assert JobInfo("123", cluster="gpu").ref == "gpu:123" and JobInfo("123").ref == "123"
    check_job_id("gpu:123")
    check_job_id("gpu-2:123_4")
    for bad in ("gpu:", ":123", "g p:1", "1gpu:2"):
        with pytest.raises(ConfigError):
            check_job_id(bad)


def test_a_name_no_table_has_may_be_a_cluster_of_the_slurm_multi_cluster_setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sacctmgr as a site with two clusters on one slurmdbd answers it (a stand-in on PATH: the cluster tier
    # shows the real one)
    fake = tmp_path / "sacctmgr"
    fake.write_text("#!/bin/sh\nprintf 'tisci\\ntistwin\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    mine = [Cluster(name="gpu", host="gpu-login")]
    assert find_cluster("tistwin", mine) == Cluster(name="tistwin", slurm_cluster="tistwin")
    with pytest.raises(ConfigError, match=r"'x': no such cluster \(yours: gpu; this machine's Slurm reaches: tisci, "):
        find_cluster("x", mine)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))  # no [[cluster]] tables: Slurm's are the ones
    assert [c.name for c in known_clusters()] == ["tisci", "tistwin"]
