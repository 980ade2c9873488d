"""Notifications posted from inside a Slurm job, across the test cluster's network, to a real HTTP server on
the controller's address: every event of a job that fails once and is requeued through the queue arrives
once and in order; servers that refuse or hang cost the job nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import ti_slurm
from tests.cluster.conftest import Island
from tests.conftest import run_cli
from tests.notify_server import bad_servers, recording_server
from tests.testcluster import this_cluster
from ti_slurm import JobState

pytestmark = pytest.mark.usefixtures("cluster", "own_registry")  # ids may repeat across test clusters

FLAKY = 'test "$TI_SLURM_RESTART_COUNT" != 0 || { echo "boom on $(hostname)"; exit 4; }; echo fine'


def write(folder: Path, partition: str, notify: str, command: str = FLAKY) -> Path:
    path = folder / "job.yaml"
    path.write_text(
        f"name: told\nmode: ddp\nnodes: 2\npartition: {partition}\ncommand: '{command}'\n"
        f"restart: {{max: 1, on: [failure]}}\nnotify:\n{notify}"
    )
    return path


def test_every_event_of_a_requeued_job_arrives_once_in_order(tmp_path: Path, island: Island) -> None:
    with recording_server(this_cluster().ctl_addr) as server:
        robot = f"  - {{url: '{server.url}/wecom', on: [failed, requeued], format: wecom}}\n"
        notify = f"  - {{url: '{server.url}/hook'}}\n" + robot
        res = run_cli("submit", str(write(tmp_path, island.name, notify)), "--wait", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        job = res.stdout.strip()
        posts = server.bodies("/hook", at_least=4)
        chat = server.bodies("/wecom", at_least=1)
        time.sleep(2.0)  # nothing more comes
        assert len(server.received) == 5, [(r["path"], r["body"].get("event")) for r in server.received]
    events = [(p["event"], p["attempt"], p["state"]) for p in posts]
    assert events == [("running", 0, "RUNNING"), ("requeued", 0, "FAILED"), ("running", 1, "RUNNING"),
                      ("completed", 1, "COMPLETED")]  # fmt: skip
    requeued = posts[1]
    assert requeued["node"] in island.nodes and requeued["log_tail"] == [f"boom on {requeued['node']}"]
    assert requeued["logs_command"] == f"ti-slurm logs {job} --node {requeued['node_label']}"
    assert chat[0]["msgtype"] == "text" and chat[0]["text"]["content"].startswith(
        f"ti-slurm: job {job} (told) requeued"
    )
    assert ti_slurm.get_job(job).status().undelivered == []


def test_servers_that_refuse_or_hang_cost_a_slurm_job_nothing(tmp_path: Path, island: Island) -> None:
    with bad_servers(this_cluster().ctl_addr) as (refused, hangs):
        notify = f"  - {{url: '{refused}'}}\n  - {{url: '{hangs}'}}\n"
        res = run_cli("submit", str(write(tmp_path, island.name, notify, "echo fine")), cwd=tmp_path)
        job = ti_slurm.get_job(res.stdout.strip())
        final = job.wait(timeout=120)
        assert final.state is JobState.COMPLETED and len(final.attempts) == 1
        started, ended = final.attempts[0].started, final.attempts[0].ended
        assert started is not None and ended is not None and ended - started < 10  # the posts held nothing up
        deadline = time.monotonic() + 30
        while not job.status().undelivered and time.monotonic() < deadline:
            time.sleep(1)
    notes = job.status().undelivered
    assert {n["to"] for n in notes} <= {refused.rsplit("/", 1)[0] + "/...", hangs.rsplit("/", 1)[0] + "/..."}
    assert notes and all(n["why"] for n in notes), notes
    assert "/refused" not in json.dumps(notes)
