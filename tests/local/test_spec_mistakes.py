"""A new user's mistakes in a spec file, through the CLI as a process: one line, exit 2, the field, a
suggestion or an example of the right shape, and the docs page to read; and the spec's JSON Schema (what an
editor checks with) refuses each of them too."""

# ruff: noqa: E501  (the table reads best as a table: one mistake and its line per row)
from __future__ import annotations

import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import run_cli
from ti_slurm.help.schema import spec_schema
from ti_slurm.submitting.specfile import _Loader

BASE = "mode: ddp\nnodes: 2\ncommand: python train.py\n"
CASES = [  # (what the user wrote, what the one line must say)
    ("mode: ddp\nnodes: 2\ncomand: python train.py\n", "comand: 'python train.py': unknown field; did you mean 'command'? (see docs/reference/spec.md)"),
    ("mode: ddp\nnode: 2\ncommand: x\n", "node: 2: unknown field; did you mean 'nodes'?"),
    (BASE + "gpu_per_node: 8\n", "gpu_per_node: 8: unknown field; did you mean 'gpus_per_node'?"),
    (BASE + "gpus_per_nodes: 8\n", "did you mean 'gpus_per_node'?"),
    (BASE + "cpu_per_node: 4\n", "did you mean 'cpus_per_node'?"),
    (BASE + "partiton: debug\n", "did you mean 'partition'?"),
    (BASE + "enviroment: {A: '1'}\n", "enviroment: {'A': '1'}: unknown field"),
    (BASE + "workdr: /tmp\n", "did you mean 'workdir'?"),
    (BASE + "outputdir: out\n", "did you mean 'output_dir'?"),
    (BASE + "restart: {max: 2, inplace: 1}\n", "restart.inplace: 1: unknown field; did you mean 'in_place'? (see docs/survive.md)"),
    (BASE + "restart: {maxx: 2}\n", "did you mean 'max'? (see docs/survive.md)"),
    (BASE + "watchdog: {silent: 900}\n", "watchdog.silent: 900: unknown field; did you mean 'silence'?"),
    (BASE + "container: {imag: /i.sqsh}\n", "container.imag: '/i.sqsh': unknown field; did you mean 'image'? (see docs/images.md)"),
    (BASE + "notify: {urll: 'https://h/x'}\n", "unknown field; did you mean 'url'? (see docs/notifications.md)"),
    (BASE + "signal: {nam: USR2}\n", "did you mean 'name'?"),
    ("mode: ps-worker\ncommand: x\nps: {node: 1}\nworker: {nodes: 1}\n", "ps.node: 1: unknown field; did you mean 'nodes'?"),
    ("mode: ray\ncommand: x\nworker_groups: [{nodes: 1, gpus: 1}]\n", "worker_groups.0.gpus: 1: unknown field; the fields here: nodes, gpus_per_node"),
    (BASE + "env: [A=1]\n", "env: ['A=1']: expected a mapping, e.g. env: {OMP_NUM_THREADS: '4'} (see docs/specs.md)"),
    (BASE + "code_ignore: '*.ckpt'\n", "code_ignore: '*.ckpt': expected a list, e.g. code_ignore: ['*.ckpt', wandb]"),
    ("mode: ddp\nnodes: two\ncommand: x\n", "nodes: 'two': expected a whole number, e.g. nodes: 2 (see docs/modes.md)"),
    ("mode: ray\ncommand: x\nworker_groups: {nodes: 2}\n", "worker_groups: {'nodes': 2}: expected a list, e.g. worker_groups: [{nodes: 1"),
    (BASE + "restart: 3\n", "restart: 3: expected a mapping, e.g. restart: {max: 3"),
    ("nodes: 2\ncommand: x\n", "mode: required, and not given (see docs/modes.md)"),
    ("mode: ddp\nnodes: 2\n", "command: required, and not given"),
    ("mode: ddpp\nnodes: 2\ncommand: x\n", "mode: 'ddpp': expected one of: ddp, horovod, mindspore, mpi, ps-worker, ray (see docs/modes.md)"),
    (BASE + "rdma: maybe\n", "rdma: 'maybe':"),
]


@pytest.mark.parametrize("text,line", CASES, ids=[c[1][:40] for c in CASES])
def test_a_mistake_is_one_line_with_what_to_do(tmp_path: Path, text: str, line: str) -> None:
    (tmp_path / "job.yaml").write_text(text)
    res = run_cli("render", "job.yaml", cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == "", res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("ti-slurm: error: "), res.stderr
    assert line in res.stderr and "(see docs/" in res.stderr and "README" not in res.stderr, res.stderr


@pytest.mark.parametrize("text,line", CASES, ids=[c[1][:40] for c in CASES])
def test_the_schema_refuses_each_mistake_too(text: str, line: str) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(yaml.load(text, Loader=_Loader), spec_schema())


def test_the_schema_takes_every_starter_spec_and_example() -> None:
    from tests.docs import ROOT
    from ti_slurm.help.starter import starter

    texts = [starter(m, p) for m in ("ddp", "mpi", "horovod", "mindspore", "ps-worker", "ray") for p in ("ti", "modelarts")]
    texts += [p.read_text() for p in sorted(ROOT.glob("examples/*/job.yaml"))]
    for text in texts:
        jsonschema.validate(yaml.load(text, Loader=_Loader), spec_schema())


INDENTATION = [  # (what the user wrote, what the one line must say)
    ("mode: ddp\nnodes: 2\n  gpus_per_node: 8\ncommand: x\n", "at line 3: mapping values are not allowed here ('gpus_per_node: 8' is indented differently"),
    ("mode: ddp\ncommand: x\nrestart:\n  max: 3\n    on: [failure]\n", "at line 5: mapping values are not allowed here ('on: [failure]' is indented differently"),
    ("mode: ddp\ncommand: x\nrestart:\n    max: 3\n  on: [failure]\n", "at line 5: expected <block end>, but found '<block mapping start>' ('on: [failure]' is indented"),
    ("mode: ddp\nnodes: 2\ncommand: echo a: b\n", "at line 3: mapping values are not allowed here (a value holding ': ' or ' #', or starting with a quote"),
]


@pytest.mark.parametrize("text,line", INDENTATION, ids=[c[1][:30] for c in INDENTATION])
def test_a_yaml_indentation_error_says_so_with_an_example(tmp_path: Path, text: str, line: str) -> None:
    (tmp_path / "job.yaml").write_text(text)
    res = run_cli("render", "job.yaml", cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stderr
    assert line in res.stderr, res.stderr
    if "indented" in line:
        assert "e.g. 'restart:' then '  max: 3' and '  on: [failure]'" in res.stderr


def test_a_python_that_is_not_here_is_one_line_at_submit(tmp_path: Path) -> None:
    """``python: ~/venv/bin/python`` (no shell expands ``~`` for the job) or a mistyped path: one line at
    submit, nothing submitted; a path with ``~`` that exists is taken, expanded."""
    (tmp_path / "job.yaml").write_text("mode: ddp\nnodes: 1\npython: ~/no-such-venv/bin/python\ncommand: 'true'\n")
    res = run_cli("submit", "--local", "job.yaml", cwd=tmp_path, env={"XDG_STATE_HOME": str(tmp_path / "st")})
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("ti-slurm: error: python: '~/no-such-venv/bin/python': no such file (")
    assert not (tmp_path / "ti-slurm-jobs").exists()
    home = tmp_path / "home"
    (home / "venv" / "bin").mkdir(parents=True)
    (home / "venv" / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "job.yaml").write_text("mode: ddp\nnodes: 1\npython: ~/venv/bin/python\ncommand: 'true'\n")
    res = run_cli("render", "job.yaml", cwd=tmp_path, env={"HOME": str(home)})
    assert res.returncode == 0 and f"{home}/venv/bin/python" in res.stdout, res.stderr
