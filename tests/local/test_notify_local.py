"""Notifications on the local runner, to a real HTTP server on this machine: each event once and in order, each
format's body, and servers that refuse or hang costing the job nothing but a note (the cluster tier posts
from the nodes' network)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.notify_server import bad_servers, recording_server
from ti_slurm.job.notify import DRAIN_SECONDS

pytestmark = pytest.mark.usefixtures("own_registry")

FLAKY = "test -e failed-once || { touch failed-once; echo boom; exit 4; }; echo fine"


def spec(folder: Path, notify: str, command: str = FLAKY) -> Path:
    path = folder / "job.yaml"
    path.write_text(
        f"name: told\nmode: ddp\nnodes: 2\ncommand: '{command}'\n"
        f"restart: {{on: [failure], in_place: 1}}\nnotify:\n{notify}"
    )
    return path


def test_every_event_of_a_job_that_fails_once_arrives_once_in_order(tmp_path: Path) -> None:
    with recording_server("127.0.0.1") as server:
        notify = f"  - {{url: '{server.url}/all'}}\n  - {{url: '{server.url}/chat', on: [requeued], format: slack}}\n"
        res = run_cli("submit", str(spec(tmp_path, notify)), "--local", "--wait", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        job = res.stdout.strip()
        posts = server.bodies("/all", at_least=4)
        chat = server.bodies("/chat", at_least=1)
        time.sleep(1.0)  # nothing more comes
        assert len(server.received) == 5, server.received
    assert [(p["event"], p["attempt"]) for p in posts] == [
        ("running", 0),
        ("requeued", 0),
        ("running", 1),
        ("completed", 1),
    ]
    requeued = posts[1]
    assert (requeued["job"], requeued["name"], requeued["state"]) == (job, "told", "FAILED")
    assert requeued["node_label"] in ("ddp-0", "ddp-1") and requeued["log_tail"] == ["boom"]
    assert requeued["logs_command"] == f"ti-slurm logs {job} --node {requeued['node_label']}"
    assert posts[3]["status_command"] == f"ti-slurm status {job}" and posts[3]["state"] == "COMPLETED"
    assert len(chat) == 1 and chat[0]["text"].startswith(f"ti-slurm: job {job} (told) requeued: FAILED, ")
    assert "  boom" in chat[0]["text"].splitlines()
    assert any(line.startswith("time: ") and ", lost " in line for line in chat[0]["text"].splitlines())
    # where the time went, at each end: the failed attempt's time lost, the whole wall time at the last
    for post in (requeued, posts[3]):
        split = post["goodput"]
        assert set(split) == {"starting", "productive", "lost", "recomputed", "wall", "effective"}, split
        parts = split["starting"] + split["productive"] + split["lost"]
        assert split["wall"] > 0 and abs(parts - split["wall"]) < 0.01, split
    assert requeued["goodput"]["productive"] == 0 and requeued["goodput"]["lost"] > 0
    assert posts[3]["goodput"]["wall"] > requeued["goodput"]["wall"]


@pytest.mark.parametrize(
    "fmt,path",
    [("wecom", ["text", "content"]), ("dingtalk", ["text", "content"]), ("feishu", ["content", "text"])],
)
def test_each_chat_robot_gets_its_own_text_message(tmp_path: Path, fmt: str, path: list[str]) -> None:
    with recording_server("127.0.0.1") as server:
        notify = f"  - {{url: '{server.url}/robot', on: [completed], format: {fmt}}}\n"
        res = run_cli("submit", str(spec(tmp_path, notify, "echo fine")), "--local", "--wait", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        (body,) = server.bodies("/robot", at_least=1)
    text = body[path[0]][path[1]]
    assert text.startswith(f"ti-slurm: job {res.stdout.strip()} (told) completed: COMPLETED"), body
    assert (body.get("msgtype") or body.get("msg_type")) == "text"


def test_servers_that_refuse_or_hang_cost_the_job_nothing_but_a_note(tmp_path: Path) -> None:
    with bad_servers("127.0.0.1") as (refused, hangs):
        notify = f"  - {{url: '{refused}?token=secret'}}\n  - {{url: '{hangs}', on: [completed]}}\n"
        started = time.monotonic()
        res = run_cli("submit", str(spec(tmp_path, notify, "echo fine")), "--local", "--wait", cwd=tmp_path)
        took = time.monotonic() - started
    assert res.returncode == 0, res.stderr
    assert took < 10, took  # the job's end is recorded first: posting never holds it up
    deadline = time.monotonic() + DRAIN_SECONDS + 5  # ... and the supervisor gives up on the hanging server
    while True:
        status = run_cli("status", res.stdout.strip(), "--json", cwd=tmp_path).stdout
        notes = json.loads(status)["undelivered"]
        if len(notes) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert {(n["notification"], n["to"]) for n in notes} >= {
        ("running", refused.rsplit("/", 1)[0] + "/..."),
        ("completed", hangs.rsplit("/", 1)[0] + "/..."),
    }
    assert "secret" not in status and "/refused" not in status, status
    table = run_cli("status", res.stdout.strip(), cwd=tmp_path).stdout
    assert "notification not delivered: running to http://127.0.0.1:" in table, table


def test_a_hung_job_is_told_as_hung_with_its_silent_node(tmp_path: Path) -> None:
    with recording_server("127.0.0.1") as server:
        (tmp_path / "job.yaml").write_text(
            "name: stuck\nmode: ddp\nnodes: 2\ncommand: 'echo started; sleep 60'\nwatchdog: {silence: 10}\n"
            f"notify: {{url: '{server.url}/h', on: [hung, failed]}}\n"
        )
        res = run_cli("submit", "job.yaml", "--local", "--wait", cwd=tmp_path)
        assert res.returncode == 1, res.stderr
        posts = server.bodies("/h", at_least=2)
    assert [p["event"] for p in posts] == ["hung", "failed"], posts
    assert (
        posts[0]["reason"].startswith("HUNG: node(s) localhost printed nothing")
        and posts[0]["log_tail"][0] == "started"
    )
