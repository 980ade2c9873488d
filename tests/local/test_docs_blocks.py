"""Every code block of the README and of every page under docs/, checked as printed: each YAML spec
renders through the CLI and passes the spec's JSON Schema, each `ti-slurm` command line parses with the
CLI's own parser, shell and Python compile, TOML is a valid site config, JSON parses.

The blocks that can run on the test machines run as printed elsewhere, found by their markers
(tests/docs.py): the quick start's (test_quickstart.py), the Python API's (test_readme_api.py), the
hand-written sbatch script, the pipeline and the sweep (cluster tier), the README's first command on a
fresh Debian (test_fresh_debian.py).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import ROOT, run_cli
from tests.docs import BLOCK, PAGES, blocks
from ti_slurm.cli import build_parser
from ti_slurm.help.schema import spec_schema
from ti_slurm.submitting.specfile import _Loader

# fields a fragment (a block showing one feature's fields) is completed with, where it lacks them
BASE = {"mode": "mode: ddp", "command": "command: python train.py", "nodes": "nodes: 2"}


def ids(found: list[tuple[str, str]]) -> list[str]:
    return [where for _, where in found]


def test_the_docs_have_the_blocks_these_tests_read() -> None:
    assert len(blocks("yaml")) >= 10 and blocks("bash") and blocks("python") and blocks("toml")


def completed(body: str, tmp_path: Path) -> str:
    """A fragment made a whole spec, its /lustre paths made under ``tmp_path``."""
    written = set(re.findall(r"^(\w+):", body, re.M))
    fill = [text for key, text in BASE.items() if key not in written and not (key == "nodes" and "ps" in written)]
    if "head" in written or "worker_groups" in written:
        fill = [text for text in fill if not text.startswith("nodes")]
    shared = tmp_path.with_name(f"{tmp_path.name}-fs")  # the shared filesystem the examples name, made here
    for path in re.findall(r"/lustre/[^\s,}]+", body):
        Path(shared, path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return body.replace(" /lustre/", f" {shared}/lustre/") + "".join(f"{text}\n" for text in fill)


@pytest.mark.parametrize("body,where", blocks("yaml"), ids=ids(blocks("yaml")))
def test_every_yaml_spec_renders_through_the_cli_and_passes_the_schema(tmp_path: Path, body: str, where: str) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(completed(body, tmp_path))
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # blocks name the examples from the top directory
    res = run_cli("render", str(spec), cwd=tmp_path)
    assert res.returncode == 0, f"{where}: {res.stderr}"
    assert res.stdout.startswith("#!/bin/bash\n")
    document = yaml.load(spec.read_text(), Loader=_Loader)  # as an editor's YAML 1.2 reads it
    jsonschema.validate(document, spec_schema())


def test_the_modelarts_job_trains_as_printed(tmp_path: Path) -> None:
    """Its spec, run from a directory whose examples/ is the repository's; its start script, the example's."""
    found = {m.group(1): m.group(2) for m in reversed(list(BLOCK.finditer((ROOT / "docs/modelarts.md").read_text())))}
    spec_block, script_block = found["yaml"], found["bash"]  # the first of each kind
    assert script_block in (ROOT / "examples/modelarts/code/torchrun.sh").read_text()  # the example's own script
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "job.yaml").write_text(spec_block)
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path, env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    logs = "".join(p.read_text() for p in tmp_path.glob("ti-slurm-jobs/*/logs/*.log"))
    assert sorted(re.findall(r"rank (\d)/4 on \S+ task=worker-\d in_sync=True", logs)) == ["0", "1", "2", "3"]


@pytest.mark.parametrize("body,where", blocks("json"), ids=ids(blocks("json")))
def test_every_json_block_parses(body: str, where: str) -> None:
    json.loads(body)


USER_CONFIG = re.compile(r"^# (~/\.config/ti-slurm/config\.toml|the user config)", re.M)


@pytest.mark.parametrize("body,where", blocks("toml"), ids=ids(blocks("toml")))
def test_every_config_block_is_read_as_printed(
    tmp_path: Path, body: str, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block that says it is the user config is read as one; every other is a site config. The admin page's
    whole example has every value it shows."""
    from ti_slurm.core.site import load_site_config
    from ti_slurm.submitting.userconfig import read_user_config

    if USER_CONFIG.search(body):
        (tmp_path / "ti-slurm").mkdir()
        (tmp_path / "ti-slurm" / "config.toml").write_text(body)
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
        assert read_user_config(), where
        if "[[cluster]]" in body:  # its clusters as `ti-slurm clusters` reads them
            from ti_slurm.clusters import user_clusters

            assert user_clusters(), where
        return
    path = tmp_path / "config.toml"
    path.write_text(body)
    site = load_site_config(str(path))
    if "rdma_partitions" in body:
        assert site.rdma_partitions and site.port_min == 61000 and site.rdma_check == "drain", where
        assert site.nccl == {"rdma": {"NCCL_IB_GID_INDEX": "5", "NCCL_IB_HCA": "mlx5_0"}}


@pytest.mark.parametrize("body,where", blocks("bash"), ids=ids(blocks("bash")))
def test_every_shell_block_is_valid_bash(body: str, where: str) -> None:
    res = subprocess.run(["bash", "-n"], input=re.sub(r"<([a-z ]+)>", r"X", body), text=True, capture_output=True)
    assert res.returncode == 0, f"{where}: {res.stderr}"


def command_lines() -> list[tuple[str, str]]:
    """Every `ti-slurm ...` command of a shell block (also inside ``$(...)``, after ``;`` or ``&&``), and every
    ``$ ti-slurm ...`` line of an output block."""
    out = []
    for body, where in blocks("bash"):
        for line in body.splitlines():
            out += [(found.strip(), where) for found in re.findall(r"(?:^|\$\(|; |&& )(ti-slurm [^)#;&\n]*)", line)]
    for body, where in blocks(""):
        out += [(line[2:].strip(), where) for line in body.splitlines() if line.startswith("$ ti-slurm ")]
    return out


@pytest.mark.parametrize("line,where", command_lines(), ids=[f"{w}:{c[:40]}" for c, w in command_lines()])
def test_every_ti_slurm_command_in_the_docs_parses(line: str, where: str) -> None:
    """Synopsis lines' optional parts (``[--when ok|failed|any]``) and redirections are left out; placeholders
    (``JOB``, ``N``, ``"$job"``) become values."""
    text = re.sub(r"\[[^\]]*\]", "", line).replace("<id>", "123").split(" > ")[0].split(" | ")[0]
    words = [w for w in shlex.split(text) if w != "\\"]
    words = ["123" if re.fullmatch(r"[A-Z]+", w) or w.startswith("$") else w for w in words[1:]]
    try:
        build_parser().parse_args(words)
    except SystemExit as exc:
        pytest.fail(f"{where}: {line!r} does not parse (exit {exc.code})")


@pytest.mark.parametrize("body,where", blocks("python"), ids=ids(blocks("python")))
def test_every_python_block_compiles(body: str, where: str) -> None:
    compile(body.replace("...  #", "pass  #"), where, "exec")


def test_the_docs_are_the_readme_and_docs_pages() -> None:
    assert PAGES[0].name == "README.md" and len(PAGES) > 20
