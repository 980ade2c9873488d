"""A token source that fails (it prints the JWT, then exits non-zero): the token is in no message, record,
reason, page or log, through the doors users use: the CLI as a process (`list`, `status`, `submit`) and the
console's JSON. Everything those wrote (their output, the registry, the caches, the console's log) is
grepped for the token and for its payload alone."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.unit.test_rest_backend import SECRET


@pytest.fixture
def rest_user(tmp_path: Path) -> dict[str, str]:
    """A user whose config says the rest backend, with a token command that prints the token and fails, and a
    job of theirs submitted through slurmrestd earlier (in their registry)."""
    script = tmp_path / "get-token"
    script.write_text(f"#!/bin/sh\necho SLURM_JWT={SECRET}\necho 'scontrol: error: {SECRET}' >&2\nexit 1\n")
    script.chmod(0o700)
    (tmp_path / "config" / "ti-slurm").mkdir(parents=True)
    (tmp_path / "config" / "ti-slurm" / "config.toml").write_text(
        f'backend = "rest"\n[rest]\nurl = "unix:{tmp_path}/no-slurmrestd.sock"\ntoken = "command:{script}"\n'
    )
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "site.toml").write_text("")
    jobs = tmp_path / "state" / "ti-slurm" / "jobs"
    jobs.mkdir(parents=True)
    record = {"job_id": "4242", "name": "bert", "backend": "rest", "job_dir": str(tmp_path / "out" / "4242"),
              "state": "PENDING", "submitted": time.time()}  # fmt: skip
    (jobs / "4242.json").write_text(json.dumps(record))
    (tmp_path / "job.yaml").write_text(f"mode: ddp\nnodes: 1\noutput_dir: {tmp_path / 'out'}\ncommand: 'true'\n")
    return {
        "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_RUNTIME_DIR": str(tmp_path / "run"),
        "TI_SLURM_CONFIG": str(tmp_path / "site.toml"),
    }  # fmt: skip


def holds_token(text: str) -> bool:
    return SECRET in text or SECRET.split(".")[1] in text or "do-not-show" in text


def every_file(folder: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file() and p.name != "get-token")


def test_a_failing_token_source_leaves_the_token_in_no_message_record_or_page(
    tmp_path: Path, rest_user: dict[str, str]
) -> None:
    said = []
    for args in (("list",), ("list", "--json"), ("status", "4242"), ("submit", "job.yaml")):
        res = run_cli(*args, cwd=tmp_path, env=rest_user)
        said.append(res.stdout + res.stderr)
        assert "Traceback" not in res.stderr, res.stderr
    assert "getting a token with" in "".join(said)  # the failure is said ...
    assert not any(holds_token(text) for text in said), said  # ... without the token
    pytest.importorskip("starlette", reason="the console's extra: pip install 'ti-slurm[ui]'")
    from tests.browser import console_process

    with console_process(tmp_path, rest_user) as url:
        base, token = url.split("/?token=")
        ask = urllib.request.Request(f"{base}/api/jobs", headers={"Authorization": f"token {token}"})
        page = urllib.request.urlopen(ask, timeout=60).read().decode()
    assert "4242" in page and "getting a token with" in page, page  # the reason is shown, without the token
    assert not holds_token(page), page
    assert not holds_token(every_file(tmp_path)), "token material in a file"
