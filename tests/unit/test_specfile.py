"""Spec files mean what their authors typed: YAML 1.2 words, text kept as written, every field."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from tests.conftest import run_cli
from ti_slurm.core.errors import SpecError
from ti_slurm.submitting.planning import make_plan
from ti_slurm.submitting.spec import InputSpec, JobSpec, NodeRange, load_spec

# Every field of the spec, in three documents (roles differ by mode). The values are those YAML 1.1
# reads as something else: on/off/yes/no (booleans), 1:30:00 (a number), 1.10 (1.1), 0777 (octal),
# 2026-12-01 (a date), ~/x beside ~ (null).
PS_WORKER = """\
name: 2026.10
mode: ps-worker
command: 1.10
gpus_per_node: 0
cpus_per_node: 2
mem: 4096
ps:
  nodes: 1
  gpus_per_node: 0
  cpus_per_node: 1
  mem: 1024
  partition: on
  container: {image: 1.0, runtime: oci, mounts: ["/data:/data:ro"], workdir: /w}
worker: {nodes: {min: 2, max: 04}}
partition: off
account: no
qos: yes
time: 1:30:00
sbatch: {exclusive: true, nice: 10, constraint: on}
output_dir: 0777
workdir: 2026-12-01
env: {OMP_NUM_THREADS: 4, VER: 1.10, FLAG: yes, OFF: off, OCT: 0777, DAY: 2026-12-01, NIL: '', Q: "on"}
python: /usr/bin/python3
rdma: off
platform: modelarts
rendezvous_timeout: 60
preflight: off
restart: {max: 2, on: [preempt, timeout, node_fail, failure, hang], in_place: 1}
spare_nodes: 1
signal: {name: USR1, before: 60}
watchdog: {silence: 900, progress: on, straggler: 600}
checkpoint_dir: ~/ckpt
container: {image: "docker://ubuntu:22.04"}
remote: {host: login1, workdir: 1.10}
cluster: off
"""
RAY = """\
mode: ray
command: python job.py
head: {cpus_per_node: 2}
worker_groups:
  - {nodes: 1, cpus_per_node: 2}
  - {nodes: 1, gpus_per_node: 1, npus_per_node: 08}
preflight: {allreduce: yes}
"""
DDP = """\
mode: ddp
command: python train.py
nodes: 010
master_port: 62000
rdma: on
preflight: true
npus_per_node: 010
processes: per-npu
code: 1.10
code_ignore: [on, "*.ckpt"]
inputs: {train: /data/0777, on: {path: 1.10, stage: local}}
outputs: 2026-12-01
after: {jobs: [5631001, 5_7, 5_*], when: any}
notify: {url: http://10.0.0.1:8080/hook, on: [failed, hung], format: feishu}
"""


def test_every_field_reads_as_typed(write_spec) -> None:
    ps = load_spec(write_spec(PS_WORKER))
    assert (ps.name, ps.command, ps.mem, ps.partition, ps.account, ps.qos, ps.time) == (
        "2026.10",
        "1.10",
        "4096",
        "off",
        "no",
        "yes",
        "1:30:00",
    )
    assert ps.env == {
        "OMP_NUM_THREADS": "4",
        "VER": "1.10",
        "FLAG": "yes",
        "OFF": "off",
        "OCT": "0777",
        "DAY": "2026-12-01",
        "NIL": "",
        "Q": "on",
    }
    assert ps.ps is not None and ps.ps.container is not None
    assert (ps.ps.mem, ps.ps.partition, ps.ps.container.image, ps.ps.container.mounts) == (
        "1024",
        "on",
        "1.0",
        ["/data:/data:ro"],
    )
    assert ps.sbatch == {"exclusive": True, "nice": 10, "constraint": "on"}
    assert (ps.output_dir, ps.workdir, ps.checkpoint_dir) == ("0777", "2026-12-01", "~/ckpt")
    assert (ps.rdma, ps.platform, ps.preflight, ps.rendezvous_timeout) == ("off", "modelarts", "off", 60)
    assert ps.restart is not None and ps.restart.on == ["preempt", "timeout", "node_fail", "failure", "hang"]
    assert ps.restart.in_place == 1 and ps.spare_nodes == 1
    assert ps.worker is not None and ps.worker.nodes == NodeRange(min=2, max=4)  # 04: decimal in 1.2
    worker = make_plan(ps).components[1]
    assert (worker.min_nodes, worker.nodes, worker.spares, worker.node_request) == (2, 4, 1, "3-5")
    assert ps.signal is not None and (ps.signal.name, ps.signal.before) == ("USR1", 60)
    assert ps.remote is not None and (ps.remote.host, ps.remote.workdir) == ("login1", "1.10")
    assert ps.container is not None and ps.container.image == "docker://ubuntu:22.04"

    ray = load_spec(write_spec(RAY, "ray.yaml"))
    assert ray.worker_groups is not None and [g.gpus_per_node for g in ray.worker_groups] == [None, 1]
    assert [g.npus_per_node for g in ray.worker_groups] == [None, 8]  # 08: not an octal error
    assert make_plan(ray).preflight_allreduce is True
    ddp = load_spec(write_spec(DDP, "ddp.yaml"))
    assert (ddp.nodes, ddp.master_port, ddp.rdma, ddp.preflight) == (10, 62000, "on", True)  # 010: decimal in 1.2
    assert (ddp.npus_per_node, ddp.processes) == (10, "per-npu")
    assert (ddp.code, ddp.code_ignore) == ("1.10", ["on", "*.ckpt"])
    assert (ddp.inputs["train"].path, ddp.outputs) == ("/data/0777", "2026-12-01")
    assert ddp.inputs["on"] == InputSpec(path="1.10", stage="local")  # a key YAML 1.1 reads as true
    assert ddp.after is not None and ddp.after.dependency == "afterany:5631001:5_7:5_*"  # 5_7: not YAML 1.1's 57
    assert [n.as_plan() for n in ddp.notify] == [  # on: is a word, and one mapping is a list of one
        {"url": "http://10.0.0.1:8080/hook", "on": ["failed", "hung"], "format": "feishu"}
    ]


def _model_in(annotation: object) -> type[BaseModel] | None:
    """The spec model a field holds (inside ``| None`` and ``list[...]``), if any."""
    for arg in [annotation, *typing.get_args(annotation)]:
        for inner in [arg, *typing.get_args(arg)]:
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
    return None


def _fields(model: type[BaseModel], seen: set[tuple[str, str]]) -> None:
    for name, info in model.model_fields.items():
        if (model.__name__, name) not in seen:
            seen.add((model.__name__, name))
            inner = _model_in(info.annotation)
            if inner is not None:
                _fields(inner, seen)


def _written(node: object, model: type[BaseModel], seen: set[tuple[str, str]]) -> None:
    """The (model, field) pairs a composed YAML document writes (keys as text, whatever YAML 1.1 makes of them)."""
    import yaml

    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _written(item, model, seen)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            seen.add((model.__name__, key.value))
            annotation = model.model_fields[key.value].annotation
            inner = _model_in(annotation)
            if inner is None:
                continue
            if typing.get_origin(annotation) is dict and isinstance(value, yaml.MappingNode):
                for _, item in value.value:  # a mapping of names (input channels) to values of the model
                    if isinstance(item, yaml.MappingNode):
                        _written(item, inner, seen)
            else:
                _written(value, inner, seen)


def test_the_documents_above_cover_every_field_of_the_spec() -> None:
    import yaml

    fields: set[tuple[str, str]] = set()
    _fields(JobSpec, fields)
    written: set[tuple[str, str]] = set()
    for text in (PS_WORKER, RAY, DDP):
        _written(yaml.compose(text), JobSpec, written)
    assert fields - written == set(), "a spec field that no YAML test document writes"


@pytest.mark.parametrize(
    "text,field,needle",
    [
        ("env: {A: [1, 2]}\n", "env.A", "quote it: A: '[1, 2]'"),
        ("env: {A: {b: c}}\n", "env.A", "quote it: A: '{b: c}'"),
        ("env:\n  A:\n", "env.A", "for empty text write A: ''"),
        ("name: [a]\n", "name", "quote it"),
        ("nodes: 2\n", "nodes", "given twice (lines 3 and 4)"),
        ("env: {A: 1, A: 2}\n", "env.A", "given twice"),
        ("x: &a [1]\ny: [*a, *a]\n", "spec", "aliases (*a) are not taken"),
        ("env: {A: echo a: b}\n", "spec", "needs quotes"),
        ("time: !!python/name:os.system x\n", "time", ""),  # an explicit tag on text: still text, and refused
        ("gpus_per_node: !!python/name:os.system x\n", "spec", "invalid YAML"),
    ],
)
def test_what_cannot_be_read_as_written_is_one_line(write_spec, text: str, field: str, needle: str) -> None:
    path = write_spec("mode: ddp\ncommand: x\nnodes: 1\n" + text)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert err.value.field == field and needle in str(err.value), str(err.value)
    res = run_cli("render", str(path))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr


def test_an_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 10)]
    path = tmp_path / "bomb.yaml"
    path.write_text("mode: ddp\ncommand: x\nnodes: 1\n" + "\n".join(lines) + "\n")
    with pytest.raises(SpecError, match="aliases"):
        load_spec(path)


def test_the_issues_documents_render_through_the_cli(write_spec) -> None:
    path = write_spec(
        "mode: ddp\ncommand: train\nnodes: 2\nrdma: off\nenv: {OMP_NUM_THREADS: 4}\ntime: 60\n"
        "restart: {max: 3, on: [preempt, timeout, node_fail]}\n"
    )
    res = run_cli("render", str(path))
    assert res.returncode == 0, res.stderr
    assert '"rdma":"off"' in res.stdout and '"OMP_NUM_THREADS":"4"' in res.stdout
    assert '"restart_on":["preempt","timeout","node_fail"]' in res.stdout
    assert '#SBATCH --time="60"' in res.stdout


def test_every_spec_field_has_its_type_resolved() -> None:
    """A field whose annotation pydantic could not evaluate (say, its doc() failing as the class is made) is left
    a forward reference, and the reader would no longer know it holds text: `time: 60` would be refused."""
    from typing import ForwardRef

    from ti_slurm.help.reference import _sub_models
    from ti_slurm.submitting.spec import JobSpec

    for model in (JobSpec, *_sub_models()):
        unresolved = [name for name, f in model.model_fields.items() if isinstance(f.annotation, ForwardRef | str)]
        assert not unresolved, f"{model.__name__}: {unresolved}"
