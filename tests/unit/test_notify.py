"""Notifications, the pure parts: which events a record is, what is posted in each format, what logs may show
of a URL, and the spec, site and user config that choose them (the HTTP is in the local and cluster tiers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from ti_slurm.core.errors import ConfigError
from ti_slurm.core.paths import JobPaths
from ti_slurm.core.site import SiteConfig, parse_site_config
from ti_slurm.job.notify import body, event_names, message, shown_url
from ti_slurm.submitting.planning import make_plan, plan_job
from ti_slurm.submitting.spec import load_spec

JOB = "mode: ddp\nnodes: 2\ncommand: python train.py\n"


@pytest.mark.parametrize(
    "record,names",
    [
        ({"event": "start"}, ["running"]),
        ({"event": "end", "state": "COMPLETED"}, ["completed"]),
        ({"event": "end", "state": "FAILED", "requeue": True, "in_place": True}, ["requeued"]),
        ({"event": "end", "state": "FAILED", "cause": "hang"}, ["hung", "failed"]),
        ({"event": "end", "state": "TIMEOUT"}, ["failed"]),
        ({"event": "end", "state": "CANCELLED"}, ["cancelled"]),
        ({"event": "step-exit"}, []),
        ({"event": "notify"}, []),
    ],
)
def test_what_users_subscribe_to_each_record_is(record: dict, names: list[str]) -> None:
    assert event_names(record) == names


def test_a_failed_event_names_the_node_and_its_last_lines(write_spec, tmp_path: Path) -> None:
    plan = make_plan(load_spec(write_spec(JOB + "name: told\n")))
    paths = JobPaths(str(tmp_path / "77"))
    Path(paths.logs_dir).mkdir(parents=True)
    Path(paths.node_log("ddp", 1)).write_text("".join(f"line {i}\n" for i in range(30)))
    failed = {"component": "ddp", "index": 1, "node": "node02", "exit_code": 3}
    evidence = {"cause": "gpu_oom", "node": "node02", "log": "logs/ddp-1.log", "line": 29, "text": "CUDA out of memory"}
    record = {"event": "end", "state": "FAILED", "reason": "ddp node node02 (index 1) exited 3", "failed": failed,
              "cause": "gpu_oom", "evidence": evidence}  # fmt: skip
    msg = message(plan, paths, "failed", record)
    assert (msg["job"], msg["name"], msg["node"], msg["node_label"]) == ("77", "told", "node02", "ddp-1")
    assert (msg["cause"], msg["evidence"]) == ("gpu_oom", evidence)
    assert (
        msg["log_tail"] == [f"line {i}" for i in range(10, 30)]
        and msg["logs_command"] == "ti-slurm logs 77 --node ddp-1"
    )
    slack = json.loads(body("slack", msg))["text"].splitlines()
    assert slack[0] == "ti-slurm: job 77 (told) failed: FAILED, ddp node node02 (index 1) exited 3"
    assert slack[1] == "node node02 (ddp-1), its last lines:" and slack[-1] == "ti-slurm status 77"
    assert json.loads(body("json", msg)) == msg
    assert json.loads(body("feishu", msg))["content"]["text"] == "\n".join(slack)


def test_logs_show_a_urls_scheme_and_host_only() -> None:
    assert shown_url("https://hooks.slack.com/services/T0/B0/secret") == "https://hooks.slack.com/..."
    assert shown_url("https://user:pw@oapi.dingtalk.com/robot/send?access_token=x") == "https://oapi.dingtalk.com/..."
    assert shown_url("https://hooks.example?key=TOKEN") == "https://hooks.example/..."  # no path: the query is cut
    assert shown_url("https://hooks.example#TOKEN") == "https://hooks.example/..."


def test_the_site_can_turn_notifications_off_or_send_them_through_a_proxy(write_spec) -> None:
    spec = load_spec(write_spec(JOB + "notify: {url: 'https://example.com/h'}\n"))
    assert make_plan(spec).notify == (
        {"url": "https://example.com/h", "on": list(make_plan(spec).notify[0]["on"]), "format": "json"},
    )
    assert make_plan(spec, SiteConfig(notify=False)).notify == ()
    site = parse_site_config({"notify_proxy": "http://proxy.example:3128"})
    assert make_plan(spec, site).notify_proxy == "http://proxy.example:3128"
    with pytest.raises(ConfigError, match="notify_proxy: 'proxy:3128': expected an http:// or https:// proxy URL"):
        parse_site_config({"notify_proxy": "proxy:3128"})


@pytest.mark.parametrize(
    "text,line",
    [
        ("notify: {url: 'ftp://x/y'}\n", "notify.0.url: 'ftp://x/y': Value error, expected an http:// or https:// URL"),
        (
            "notify: {url: 'https://x', on: [done]}\n",
            "notify.0.on.0: 'done': Value error, expected one of: running, completed",
        ),
        (
            "notify: {url: 'https://x', format: teams}\n",
            "notify.0.format: 'teams': Value error, expected one of: json, slack",
        ),
        ("notify: {url: 'https://x', on: []}\n", "notify.0.on: []: List should have at least 1 item"),
        (
            "notify: {url: 'https://bot:s3cret@hooks.example/x'}\n",
            "notify.0.url: 'https://bot:s3cret@hooks.example/x': Value error, a user:password@ in the URL is not sent",
        ),
        (
            'notify: {url: "https://x/\\e[2Jhook"}\n',  # an escape sequence would reach terminals and records
            "notify.0.url: 'https://x/\\x1b[2Jhook': Value error, expected an http:// or https:// URL (no spaces or "
            "control characters)",
        ),
    ],
)
def test_a_bad_notify_is_one_line(write_spec, tmp_path: Path, text: str, line: str) -> None:
    res = run_cli("render", str(write_spec(JOB + text)), cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert (
        res.stderr.removeprefix("ti-slurm: error: ")
        .replace("Value error, ", "")
        .startswith(line.replace("Value error, ", ""))
    ), res.stderr


def test_the_user_configs_notify_is_the_default(write_spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config" / "ti-slurm" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[[notify]]\nurl = "https://hooks.example.com/x"\non = ["failed"]\nformat = "slack"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    plain = load_spec(write_spec(JOB))
    assert plan_job(plain).notify == ({"url": "https://hooks.example.com/x", "on": ["failed"], "format": "slack"},)
    own = load_spec(write_spec(JOB + "notify: [{url: 'https://mine.example.com/y'}]\n"))
    assert [n["url"] for n in plan_job(own).notify] == ["https://mine.example.com/y"]  # the spec's own wins
    config.write_text('[[notify]]\nurl = "hooks.example.com"\n')
    with pytest.raises(ConfigError, match=r"user config .*config.toml: notify.0.url: 'hooks.example.com'"):
        plan_job(plain)
