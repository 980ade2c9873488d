"""What following a job costs at the start of each command: `list`, `status`, `logs`, `wait` and `cancel` of a
recorded job import none of the heavy packages only submitting needs (the spec's models, YAML, templates, SSH,
the console)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("pydantic", "yaml", "jinja2", "paramiko", "starlette", "uvicorn")  # each tens to hundreds of ms
PROBE = (
    "import sys\nfrom ti_slurm.cli import main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
    "print('MODULES', ' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
)
JOB = "local-424242"
COMMANDS = [["list"], ["list", "--limit", "0"], ["status", JOB], ["logs", JOB], ["wait", JOB], ["cancel", JOB]]


def recorded_job(home: Path) -> None:
    """A local job that ended, as its run leaves it: its registry entry and its record."""
    job_dir = home / "jobs" / JOB
    job_dir.mkdir(parents=True)
    nodes = [{"name": "ddp", "nodes": ["n"]}]
    start = {"event": "start", "time": 1.0, "attempt": 0, "mode": "ddp", "components": nodes}
    end = {"event": "end", "time": 2.0, "attempt": 0, "state": "COMPLETED", "reason": "every required step exited 0"}
    (job_dir / "status.jsonl").write_text(json.dumps(start) + "\n" + json.dumps(end) + "\n")
    registry = home / "state" / "ti-slurm" / "jobs"
    registry.mkdir(parents=True)
    entry = {"job_id": JOB, "name": "done", "backend": "local", "job_dir": str(job_dir), "state": "COMPLETED"}
    (registry / f"{JOB}.json").write_text(json.dumps(entry))


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv))
def test_following_commands_import_nothing_heavy(tmp_path: Path, argv: list[str]) -> None:
    recorded_job(tmp_path)
    root = str(Path(__file__).resolve().parents[2])
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": root, "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, cwd=tmp_path)
    line = next((x for x in done.stdout.splitlines() if x.startswith("MODULES ")), "")
    assert line, done.stdout + done.stderr
    loaded = set(line.split()[1:])
    assert "ti_slurm" in loaded and not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_render_of_a_spec_seen_before_imports_nothing_heavy(tmp_path: Path) -> None:
    """The first render plans (the spec's models, YAML, the template); the next, every input unchanged, takes the
    kept script and imports none of them."""
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "job.yaml").write_text("mode: ddp\nnodes: 2\ncommand: hostname\n")
    root = str(Path(__file__).resolve().parents[2])
    env = {"XDG_RUNTIME_DIR": str(tmp_path / "run"), "HOME": str(tmp_path), "PYTHONPATH": root, "PATH": "/usr/bin:/bin"}
    loaded = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", PROBE, "render", "job.yaml"], capture_output=True, text=True,
                              env=env, cwd=tmp_path)  # fmt: skip
        assert done.stdout.startswith("#!/bin/bash\n"), done.stdout + done.stderr
        loaded.append(set(done.stdout.splitlines()[-1].split()[1:]) & set(HEAVY))
    assert loaded == [{"pydantic", "yaml", "jinja2"}, set()]


def test_list_through_slurmrestd_with_a_shared_answer_imports_no_http(tmp_path: Path) -> None:
    """A `list` (in a `watch`, beside a console) that takes another process's fresh queue answer of slurmrestd
    makes no request, so imports no HTTP, TLS or proxy code (http.client alone is 25 ms)."""
    import os
    import time

    from ti_slurm.backends.answers import cache_key

    (tmp_path / "run").mkdir(mode=0o700)
    url = "http://127.0.0.1:9"  # nothing answers there: a request would fail the command
    (tmp_path / "site.toml").write_text(f'backend = "rest"\nrest_url = "{url}"\n')
    registry = tmp_path / "state" / "ti-slurm" / "jobs"
    registry.mkdir(parents=True)
    entry = {"job_id": "77", "name": "waits", "backend": "rest", "state": "PENDING", "submitted": time.time() - 60}
    (registry / "77.json").write_text(json.dumps(entry))
    shared = tmp_path / "run" / f"ti-slurm-{os.getuid()}"
    shared.mkdir(mode=0o700)
    queued = {"job_id": "77", "name": "waits", "backend": "rest", "state": "PENDING", "reason": "Priority"}
    answer = {"time": time.time(), "mark": 0, "jobs": {"77": queued}}
    (shared / f"queue-{cache_key('rest', '', url)}.json").write_text(json.dumps(answer))
    root = str(Path(__file__).resolve().parents[2])
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_RUNTIME_DIR": str(tmp_path / "run"), "SLURM_JWT": "x",
           "TI_SLURM_CONFIG": str(tmp_path / "site.toml"), "PYTHONPATH": root, "PATH": "/usr/bin:/bin"}  # fmt: skip
    probe = PROBE.replace("{m.split('.')[0] for m in sys.modules}", "set(sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe, "list"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert re.search(r"^77 +waits +PENDING +Priority", done.stdout, re.M), done.stdout + done.stderr
    web = set(done.stdout.splitlines()[-1].split()[1:]) & {"http.client", "ssl", "urllib.request", "email.parser"}
    assert not web, sorted(web)
