"""Several clusters at once: both test clusters (22.05 and 25.11) named in a user config, one through its
slurmrestd, the other through its slurm.conf; `clusters`, `--cluster NAME`, `--cluster auto` choosing the one that
would start first, a cluster that is down skipped in seconds, and `list` following both. Run from the 22.05
tier only (it uses both clusters, whichever tier runs it)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.conftest import Island, turn_on
from tests.conftest import run_cli
from tests.testcluster import this_cluster

pytestmark = pytest.mark.usefixtures("cluster")
CONF_2511 = Path("/etc/slurm-25.11/slurm.conf")
SITE_2511 = Path("/etc/ti-slurm/config-25.11.toml")


def answers(conf: Path) -> bool:
    """Whether the controller of ``conf`` answers (its slurm.conf stays when the cluster is down)."""
    argv = ["/opt/slurm-25.11/bin/sinfo", "-h", "-o", "%P"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, env={**os.environ, "SLURM_CONF": str(conf)})
    return done.returncode == 0


@pytest.fixture
def two_clusters(tmp_path: Path, island: Island) -> Iterator[dict[str, str]]:
    """A user config naming both test clusters (``old``: 22.05 through its slurmrestd, in an island of its own;
    ``new``: 25.11 through its slurm.conf and commands) and a third that is down; the environment that reads
    it."""
    if this_cluster().version != "22.05":
        pytest.skip("run from the 22.05 tier (it uses both clusters)")
    if not CONF_2511.exists() or not SITE_2511.exists() or not answers(CONF_2511):
        why = "the 25.11 test cluster is not up beside this one (ci/slurm-cluster/up --slurm 25.11)"
        if os.environ.get("TI_SLURM_REQUIRE_CLUSTER"):  # CI runs these once both are up: never skipped there
            pytest.fail(why)
        pytest.skip(why)
    rest_url = next(
        line.split("=", 1)[1].strip().strip('"')
        for line in this_cluster().site_config.read_text().splitlines()
        if line.startswith("rest_url")
    )
    token = subprocess.run(["scontrol", "token", "lifespan=900"], capture_output=True, text=True, check=True)
    (tmp_path / "token").write_text(token.stdout)
    (tmp_path / "token").chmod(0o600)  # as a user keeps a token (others may not read it)
    down = tmp_path / "down.conf"  # a controller nobody runs: an address no machine has
    down.write_text("ClusterName=gone\nSlurmctldHost=gone(10.99.99.1)\nNodeName=n1\nPartitionName=p Nodes=n1\n")
    (tmp_path / "config" / "ti-slurm").mkdir(parents=True)
    (tmp_path / "config" / "ti-slurm" / "config.toml").write_text(
        f'[[cluster]]\nname = "old"\nrest_url = "{rest_url}"\nrest_token = "file:{tmp_path / "token"}"\n'
        f'partition = "{island.name}"\n\n'
        f'[[cluster]]\nname = "new"\nslurm_conf = "{CONF_2511}"\nbin_dir = "/opt/slurm-25.11/bin"\n'
        'partition = "debug"\n\n'
        f'[[cluster]]\nname = "gone"\nslurm_conf = "{down}"\n'
    )
    with turn_on(str(CONF_2511)):  # the 25.11 cluster's tests that change every job's world wait meanwhile
        yield {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}


@contextlib.contextmanager
def filled(island: Island, nodes: int) -> Iterator[None]:
    """``nodes`` of the 22.05 cluster's island held by another job (running before this yields) until the end."""
    filler = subprocess.run(
        ["sbatch", "--parsable", "-p", island.name, f"-N{nodes}", "--exclusive", "--time=5",
         "-o", "/dev/null", "--wrap", "sleep 300"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    try:
        while "RUNNING" not in subprocess.run(["squeue", "-h", "-j", filler, "-o", "%T"], capture_output=True,
                                               text=True).stdout:  # fmt: skip
            time.sleep(0.5)
        yield
    finally:
        subprocess.run(["scancel", filler], check=False)


def idle(island: Island) -> int:
    """The island's idle nodes, as the 22.05 cluster's sinfo says."""
    out = subprocess.run(["sinfo", "-h", "-p", island.name, "-t", "idle", "-o", "%D"], capture_output=True, text=True)
    return sum(int(n) for n in out.stdout.split() if n.isdigit())


def spec(tmp_path: Path, name: str, command: str = "hostname", more: str = "") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nmode: ddp\nnodes: 2\noutput_dir: {tmp_path / 'out'}\ncommand: {command}\n{more}")
    return str(path)


def test_clusters_says_which_answer_and_what_they_have_idle(tmp_path: Path, two_clusters: dict[str, str]) -> None:
    started = time.monotonic()
    res = run_cli("clusters", env=two_clusters)
    assert res.returncode == 0, res.stderr
    rows = {line.split()[0]: line for line in res.stdout.splitlines()[1:]}
    assert set(rows) == {"old", "new", "gone"}
    assert re.search(r"\byes\b.*\bisland\d:\d", rows["old"]) and re.search(r"\byes\b.*\bdebug:\d", rows["new"])
    assert re.search(r"\bno\b", rows["gone"])
    assert time.monotonic() - started < 20  # the one that is down costs seconds, not minutes


def test_auto_goes_where_the_job_starts_first_and_list_follows_both(
    tmp_path: Path, two_clusters: dict[str, str], island: Island
) -> None:
    # the 22.05 cluster's island is full for 5 minutes: auto goes to the other cluster, and says why
    with filled(island, len(island.nodes)):
        auto = run_cli("submit", "--cluster", "auto", "--wait", spec(tmp_path, "auto"), env=two_clusters)
        assert auto.returncode == 0, auto.stderr
        assert auto.stdout.split()[0].startswith("new:")
        said = next(line for line in auto.stderr.splitlines() if "to cluster" in line)
        assert re.search(r"to cluster new: it would start the job at \S+ \(old: later; gone: ", said), said
    named = run_cli("submit", "--wait", spec(tmp_path, "named", more="cluster: old\n"), env=two_clusters)  # the spec's
    assert named.returncode == 0, named.stderr
    assert named.stdout.split()[0].startswith("old:")
    listed = run_cli("list", env=two_clusters)
    rows = listed.stdout.splitlines()[1:]
    assert {row.split()[0].split(":")[0] for row in rows} == {"old", "new"}, listed.stdout
    assert all("COMPLETED" in row for row in rows), listed.stdout
    shown = run_cli("status", auto.stdout.split()[0], env=two_clusters)
    assert shown.returncode == 0 and "COMPLETED" in shown.stdout, shown.stdout + shown.stderr


def test_a_cluster_not_in_the_config_is_one_line(tmp_path: Path, two_clusters: dict[str, str]) -> None:
    said = "ti-slurm: error: cluster: 'gpu': no such cluster (yours: old, new, gone"  # then Slurm's, with slurmdbd
    res = run_cli("submit", "--cluster", "gpu", spec(tmp_path, "x"), env=two_clusters)
    assert res.returncode != 0 and res.stderr.startswith(said) and res.stderr.count("\n") == 1, res.stderr
    res = run_cli("submit", spec(tmp_path, "y", more="cluster: gpu\n"), env=two_clusters)  # the spec's own
    assert res.returncode != 0 and res.stderr.startswith(said) and res.stderr.count("\n") == 1, res.stderr


def test_a_sweep_runs_on_the_cluster_its_spec_names_and_auto_picks_one(
    tmp_path: Path, two_clusters: dict[str, str], island: Island
) -> None:
    """`cluster: old` in a sweep's spec: the whole sweep (one job array) on the 22.05 cluster through its
    slurmrestd, its id and its points' ids with the cluster; `--cluster auto` sends one where it starts first."""
    path = tmp_path / "grid.yaml"
    path.write_text(f"name: grid\nmode: ddp\nnodes: 1\noutput_dir: {tmp_path / 'out'}\ncommand: echo lr={{lr}}\n"
                    "cluster: old\n")  # fmt: skip
    res = run_cli("sweep", str(path), "--param", "lr=0.1,0.2", "--wait", env=two_clusters)
    assert res.returncode == 0, res.stderr
    sweep = res.stdout.strip()
    assert re.fullmatch(r"old:\d+", sweep), sweep
    shown = run_cli("status", sweep, env=two_clusters)
    assert shown.returncode == 0 and "2 points: 2 COMPLETED" in shown.stdout.splitlines()[0], shown.stdout
    point = run_cli("logs", f"{sweep}_1", "--node", "0", env=two_clusters)
    assert point.stdout == "lr=0.2\n", point.stdout + point.stderr
    auto = run_cli("sweep", str(path), "--cluster", "auto", "--param", "lr=0.3", "--wait", env=two_clusters)
    assert auto.returncode == 0, auto.stderr
    assert re.search(r"^ti-slurm: to cluster (old|new): it would start the job", auto.stderr, re.M), auto.stderr
    listed = run_cli("list", env=two_clusters).stdout
    assert re.search(rf"^{re.escape(sweep)}\s+grid\s+SWEEP", listed, re.M), listed
    # one on the 25.11 cluster, cancelled there by its id (the array's own id goes to that cluster's scancel)
    path.write_text(f"name: long\nmode: ddp\nnodes: 1\noutput_dir: {tmp_path / 'out'}\ncommand: sleep 300\n")
    long = run_cli("sweep", str(path), "--cluster", "new", "--param", "lr=1,2", env=two_clusters)
    assert long.returncode == 0, long.stderr
    long_id = long.stdout.strip()
    assert re.fullmatch(r"new:\d+", long_id), long_id
    cancel = run_cli("cancel", long_id, env=two_clusters)
    assert cancel.returncode == 0, cancel.stderr
    deadline = time.monotonic() + 60
    while "2 CANCELLED" not in (shown := run_cli("status", long_id, env=two_clusters).stdout):
        assert time.monotonic() < deadline, shown
        time.sleep(1)
    queue = subprocess.run(["/opt/slurm-25.11/bin/squeue", "-h", "-t", "PD,R", "-j", long_id.split(":")[1]],
                           capture_output=True,
                           text=True, env={**os.environ, "SLURM_CONF": str(CONF_2511)})  # fmt: skip
    assert queue.stdout.strip() == "", queue.stdout


def test_an_auto_sweep_spreads_its_points_where_each_starts_first_and_is_followed_and_cancelled_on_both(
    tmp_path: Path, two_clusters: dict[str, str], island: Island
) -> None:
    """`--cluster auto` with 4 two-node points while the 22.05 cluster's island has 2 nodes free: point 0 goes
    there (through slurmrestd, starting now), the rest to the 25.11 cluster; the sweep is followed, shown and
    cancelled across both."""
    with filled(island, len(island.nodes) - 2):
        # each point holds its nodes a while: one that ended before the next was placed would free them for it
        grid = spec(tmp_path, "spread", command="sleep 8; echo lr={lr} on $(hostname)")
        res = run_cli("sweep", grid, "--cluster", "auto", "--param", "lr=1,2,3,4", "--wait", env=two_clusters)
        assert res.returncode == 0, res.stderr
        sweep = res.stdout.strip()
        assert re.fullmatch(r"sweep-old:\d+", sweep), sweep
        said = next(line for line in res.stderr.splitlines() if "to cluster" in line)
        assert said.startswith("ti-slurm: point 0 to cluster old; points 1, 2, 3 to cluster new, each to the"), said
        assert re.search(r"point 0 went to cluster old: it would start the job now \(new: at \S+; gone: ", said)
    shown = run_cli("status", sweep, env=two_clusters)
    assert shown.returncode == 0 and "4 points: 4 COMPLETED" in shown.stdout.splitlines()[0], shown.stdout
    rows = [line.split() for line in shown.stdout.splitlines()[2:]]
    assert [row[1].split(":")[0] for row in rows] == ["old", "new", "new", "new"], shown.stdout
    for k, row in enumerate(rows):  # each point's logs from its own cluster
        logs = run_cli("logs", row[1], "--node", "0", env=two_clusters)
        assert logs.stdout.startswith(f"lr={k + 1} on "), logs.stdout + logs.stderr
    listed = run_cli("list", env=two_clusters).stdout
    assert re.search(rf"^{re.escape(sweep)}\s+spread\s+SWEEP", listed, re.M), listed
    # a spread sweep cancelled: its points on both clusters. Each point holds its two nodes (Slurm would put
    # several on the same nodes, which have CPUs to spare: the cluster could then start them all at once)
    deadline = time.monotonic() + 60
    while idle(island) < len(island.nodes):  # the filler's nodes back
        assert time.monotonic() < deadline, f"{island.name}: {idle(island)} nodes idle"
        time.sleep(0.5)
    long = spec(tmp_path, "long", command="sleep 300", more="sbatch: {exclusive: true}\n")
    res = run_cli("sweep", long, "--cluster", "auto", "--param", "lr=1,2,3", env=two_clusters)
    assert res.returncode == 0, res.stderr
    long_id = res.stdout.strip()
    on = [row.split()[1].split(":")[0] for row in run_cli("status", long_id, env=two_clusters).stdout.splitlines()[2:]]
    assert on == ["old", "old", "new"], on  # the island's 4 nodes take 2 points, the third goes to the other cluster
    assert run_cli("cancel", long_id, env=two_clusters).returncode == 0
    deadline = time.monotonic() + 60
    while "3 CANCELLED" not in (shown := run_cli("status", long_id, env=two_clusters)).stdout:
        assert time.monotonic() < deadline, shown.stdout
        time.sleep(1)


def test_a_pipeline_waits_on_the_cluster_of_the_jobs_it_names(tmp_path: Path, two_clusters: dict[str, str]) -> None:
    """`--after old:<id>` sends the next step to cluster old (Slurm's dependency holds only within a cluster);
    jobs of two clusters, or another cluster named beside them, are one line and nothing is submitted."""
    first = run_cli("submit", "--cluster", "old", spec(tmp_path, "first", command="sleep 300"), env=two_clusters)
    assert first.returncode == 0, first.stderr
    first_id = first.stdout.split()[0]
    try:
        second = run_cli("submit", "--after", first_id, spec(tmp_path, "second"), env=two_clusters)
        assert second.returncode == 0, second.stderr
        second_id = second.stdout.split()[0]
        assert second_id.startswith("old:"), second_id
        shown = run_cli("status", second_id, env=two_clusters)
        assert "PENDING" in shown.stdout and first_id.split(":")[1] in shown.stdout, shown.stdout + shown.stderr
        other = run_cli("submit", "--after", first_id, "--cluster", "new", spec(tmp_path, "x"), env=two_clusters)
        assert other.returncode != 0 and len(other.stderr.strip().splitlines()) == 1, other.stderr
        assert "these jobs are on cluster old" in other.stderr and "--cluster old" in other.stderr, other.stderr
        mixed = run_cli("submit", "--after", first_id, "--after", "new:7", spec(tmp_path, "y"), env=two_clusters)
        assert mixed.returncode != 0 and "these are on new, old" in mixed.stderr, mixed.stderr
    finally:
        run_cli("cancel", first_id, env=two_clusters)
    assert "CANCELLED" in run_cli("wait", second_id, env=two_clusters, timeout=120).stderr


def test_the_console_lists_both_clusters_jobs_each_with_its_cluster_and_filters_by_one(
    tmp_path: Path, two_clusters: dict[str, str]
) -> None:
    """One console over both clusters: a job on each (`old` through its slurmrestd, `new` through its
    slurm.conf), each row with its cluster; the cluster filter shows one cluster's; a job's page on `old` shows
    its nodes, read through slurmrestd and the shared filesystem."""
    from tests.browser import browser_page, console_process, need_browser, shot

    need_browser()
    from playwright.sync_api import expect

    ids = {}
    for name in ("old", "new"):
        res = run_cli("submit", spec(tmp_path, f"on-{name}", command="sleep 60"), "--cluster", name, env=two_clusters)
        assert res.returncode == 0, res.stderr
        ids[name] = res.stdout.strip()
    try:
        with console_process(tmp_path, two_clusters) as url, browser_page() as page:
            page.goto(url)
            for name, job in ids.items():
                row = page.locator(f'#jobs tr[data-job="{job}"]')
                expect(row.locator("td").nth(5)).to_have_text(name, timeout=15000)  # the cluster column
            page.select_option('#filters select[name="cluster"]', "new")
            expect(page.locator(f'#jobs tr[data-job="{ids["old"]}"]')).to_have_count(0, timeout=5000)
            expect(page.locator(f'#jobs tr[data-job="{ids["new"]}"]')).to_have_count(1)
            shot(page, "two-clusters", tmp_path)
            page.goto(url.split("?")[0] + f"job/{ids['old']}")
            expect(page.locator("#nodes tbody tr")).to_have_count(2, timeout=60000)
            expect(page.locator("#state")).to_have_text("RUNNING", timeout=60000)
    finally:
        for job in ids.values():
            run_cli("cancel", job, env=two_clusters)
