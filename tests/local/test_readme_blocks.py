"""Every YAML, TOML, shell and Python block of the README at least parses, and every spec renders.

The blocks that run on the test machines run as printed elsewhere: the first two commands, the
Python API example (test_readme_api.py), the hand-written sbatch script (cluster tier).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
BLOCKS = [
    (m.group(1), m.group(2), ROOT.joinpath("README.md").read_text()[: m.start()].count("\n") + 1)
    for m in BLOCK.finditer((ROOT / "README.md").read_text())
]
# fields a fragment (a block showing one feature's fields) is completed with, where it lacks them
BASE = {"mode": "mode: ddp", "command": "command: python train.py", "nodes": "nodes: 2"}


def blocks(kind: str) -> list[tuple[str, int]]:
    return [(body, line) for k, body, line in BLOCKS if k == kind]


def test_the_readme_has_the_blocks_these_tests_read() -> None:
    assert len(blocks("yaml")) >= 5 and blocks("bash") and blocks("python") and blocks("toml")


@pytest.mark.parametrize("body,line", blocks("yaml"), ids=[f"line{n}" for _, n in blocks("yaml")])
def test_every_yaml_spec_renders_through_the_cli_as_printed(tmp_path: Path, body: str, line: int) -> None:
    written = set(re.findall(r"^(\w+):", body, re.M))
    fill = [text for key, text in BASE.items() if key not in written and not (key == "nodes" and "ps" in written)]
    if "head" in written or "worker_groups" in written:
        fill = [text for text in fill if not text.startswith("nodes")]
    spec = tmp_path / "job.yaml"
    shared = tmp_path.with_name(f"{tmp_path.name}-fs")  # the shared filesystem the examples name, made here
    for path in re.findall(r"/lustre/[^\s,}]+", body):
        Path(shared, path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    body = body.replace(" /lustre/", f" {shared}/lustre/")
    spec.write_text(body + "".join(f"{text}\n" for text in fill))
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # blocks name the examples from the top directory
    res = run_cli("render", str(spec), cwd=tmp_path)
    assert res.returncode == 0, f"README line {line}: {res.stderr}"
    assert res.stdout.startswith("#!/bin/bash\n")


def section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    return text[text.index(f"\n## {title}") :].split("\n## ", 2)[1]


def test_the_readme_modelarts_job_trains_as_printed(tmp_path: Path) -> None:
    """Its spec, run from a directory whose examples/ is the repository's; its start script, the example's."""
    ma = section("ModelArts jobs")
    found = {m.group(1): m.group(2) for m in reversed(list(BLOCK.finditer(ma)))}  # the first of each kind
    spec_block, script_block = found["yaml"], found["bash"]
    assert script_block in (ROOT / "examples/modelarts/code/torchrun.sh").read_text()  # the example's own script
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "job.yaml").write_text(spec_block)
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path, env={"XDG_STATE_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    logs = "".join(p.read_text() for p in tmp_path.glob("ti-slurm-jobs/*/logs/*.log"))
    assert sorted(re.findall(r"rank (\d)/4 on \S+ task=worker-\d in_sync=True", logs)) == ["0", "1", "2", "3"]


@pytest.mark.parametrize("body,line", blocks("json"), ids=[f"line{n}" for _, n in blocks("json")])
def test_every_json_block_parses(body: str, line: int) -> None:
    import json

    json.loads(body)


@pytest.mark.parametrize("body,line", blocks("toml"), ids=[f"line{n}" for _, n in blocks("toml")])
def test_the_site_config_block_is_a_valid_site_config(tmp_path: Path, body: str, line: int) -> None:
    from ti_slurm.core.site import load_site_config

    path = tmp_path / "config.toml"
    path.write_text(body)
    site = load_site_config(str(path))
    assert site.rdma_partitions and site.port_min == 61000 and site.rdma_check == "drain", f"README line {line}"
    assert site.nccl == {"rdma": {"NCCL_IB_GID_INDEX": "5", "NCCL_IB_HCA": "mlx5_0"}}


@pytest.mark.parametrize("body,line", blocks("bash"), ids=[f"line{n}" for _, n in blocks("bash")])
def test_every_shell_block_is_valid_bash(body: str, line: int) -> None:
    res = subprocess.run(["bash", "-n"], input=re.sub(r"<([a-z ]+)>", r"X", body), text=True, capture_output=True)
    assert res.returncode == 0, f"README line {line}: {res.stderr}"


@pytest.mark.parametrize("body,line", blocks("python"), ids=[f"line{n}" for _, n in blocks("python")])
def test_every_python_block_compiles(body: str, line: int) -> None:
    compile(body.replace("...  #", "pass  #"), f"README.md:{line}", "exec")
