"""`ti-slurm render` (and `submit`) of a spec file seen before takes the plan and script kept then: shown by a
mark planted in the kept script (the user's own cache), which is printed while every input is as it was, and
gone as soon as any input changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import run_cli

MARK = "# kept by an earlier render\n"


def planted(run: Path) -> int:
    """Plant the mark in every kept script; how many there are."""
    entries = list((run / f"ti-slurm-{os.getuid()}" / "plans").glob("*.json"))
    for entry in entries:
        data = json.loads(entry.read_text())
        data["script"] += MARK
        entry.write_text(json.dumps(data))
    return len(entries)


def test_a_render_seen_before_is_the_kept_script_until_any_input_changes(tmp_path: Path) -> None:
    run, work = tmp_path / "run", tmp_path / "work"
    run.mkdir(mode=0o700)
    work.mkdir()
    (tmp_path / "config" / "ti-slurm").mkdir(parents=True)
    site, user = tmp_path / "site.toml", tmp_path / "config" / "ti-slurm" / "config.toml"
    site.write_text("")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"mode: ddp\nnodes: 2\ncommand: hostname\nworkdir: {work}\noutput_dir: out\n")
    env = {"XDG_RUNTIME_DIR": str(run), "XDG_CONFIG_HOME": str(tmp_path / "config"), "TI_SLURM_CONFIG": str(site)}

    def render(**extra: str) -> str:
        res = run_cli("render", str(spec), cwd=Path(extra.pop("cwd", tmp_path)), env={**env, **extra})
        assert res.returncode == 0, res.stderr
        return res.stdout

    first = render()
    assert planted(run) == 1
    assert render() == first + MARK  # the kept script, as kept
    changes = {
        "the spec": lambda: spec.write_text(spec.read_text().replace("nodes: 2", "nodes: 3")),
        "the site config": lambda: site.write_text('rendezvous_timeout = 77\n'),
        "the user config": lambda: user.write_text('backend = "slurm"\n'),
    }
    for what, change in changes.items():
        change()
        assert MARK not in render(), what
        assert planted(run) >= 1
    assert "--nodes=\"3\"" in render() and '"rendezvous_timeout":77' in render()
    for what, extra in {
        "an environment variable ti-slurm reads": {"TI_SLURM_NOTHING": "1"},
        "PATH": {"PATH": f"{tmp_path}:{os.environ['PATH']}"},
        "the current directory (output_dir: out is taken from it)": {"cwd": str(work)},
    }.items():
        shown = render(**extra)
        assert MARK not in shown, what
    assert f"{work}/out" in render(cwd=str(work))
    planted(run)
    os.rmdir(work)  # what planning checked here no longer holds: planned again, and refused in one line
    res = run_cli("render", str(spec), cwd=tmp_path, env=env)
    assert res.returncode != 0 and res.stderr.count("\n") == 1 and "workdir" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
