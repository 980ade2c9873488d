"""The job spec: documents that must be accepted, and a bad-input table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from ti_slurm.core.errors import ConfigError, SpecError
from ti_slurm.submitting.planning import make_plan
from ti_slurm.submitting.spec import load_spec, parse_spec

DDP = """\
# ddp / mpi / horovod: one group of identical nodes
name: demo
mode: ddp            # ddp | mpi | horovod | ps-worker | ray
command: python train.py --epochs 1
nodes: 2
gpus_per_node: 8
cpus_per_node: 4
partition: debug     # optional
env: {FOO: bar}      # optional
"""
PS = """\
mode: ps-worker
command: python train.py
ps: {nodes: 2, cpus_per_node: 2}
worker: {nodes: 2, gpus_per_node: 1}
"""
RAY = """\
mode: ray
command: python job.py
head: {cpus_per_node: 2}
worker_groups:        # 0 to 5 groups, each its own resources and count
  - {nodes: 1, cpus_per_node: 2}
  - {nodes: 1, cpus_per_node: 2, gpus_per_node: 1}
"""


def test_issue_documents_are_accepted_as_written(write_spec) -> None:
    ddp = load_spec(write_spec(DDP))
    assert (ddp.name, ddp.mode, ddp.nodes, ddp.gpus_per_node, ddp.partition, ddp.env) == (
        "demo",
        "ddp",
        2,
        8,
        "debug",
        {"FOO": "bar"},
    )
    ps = make_plan(load_spec(write_spec(PS)))
    assert [(c.name, c.nodes, c.cpus_per_node, c.gpus_per_node) for c in ps.components] == [
        ("ps", 2, 2, 0),
        ("worker", 2, 1, 1),
    ]
    ray = make_plan(load_spec(write_spec(RAY)))
    assert [(c.name, c.nodes, c.gpus_per_node) for c in ray.components] == [
        ("head", 1, 0),
        ("worker1", 1, 0),
        ("worker2", 1, 1),
    ]


def test_json_specs_load_too(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"mode": "mpi", "command": "hostname", "nodes": 3}))
    assert load_spec(path).nodes == 3


def test_top_level_resources_are_defaults_for_roles() -> None:
    plan = make_plan(
        parse_spec(
            {
                "mode": "ps-worker",
                "command": "x",
                "gpus_per_node": 2,
                "ps": {"nodes": 1, "gpus_per_node": 0},
                "worker": {},
            }
        )
    )
    assert [c.gpus_per_node for c in plan.components] == [0, 2]


def test_modelarts_ps_worker_tasks_get_their_task_name() -> None:
    doc = {"mode": "ps-worker", "command": "python train.py --lr 0.1", "ps": {}, "worker": {"nodes": 2}}
    modelarts = make_plan(parse_spec({**doc, "platform": "modelarts"}))
    assert [modelarts.command_of(g) for g in range(2)] == [
        "python train.py --lr 0.1 --task_name=ps",
        "python train.py --lr 0.1 --task_name=worker",
    ]
    ti = make_plan(parse_spec(doc))  # the TI platform passes the command as written
    assert [ti.command_of(g) for g in range(2)] == ["python train.py --lr 0.1"] * 2
    ddp = make_plan(parse_spec(base(platform="modelarts")))  # ModelArts adds nothing to DDP
    assert ddp.command_of(0) == "python train.py"


def base(**extra: object) -> dict[str, object]:
    return {"mode": "ddp", "command": "python train.py", "nodes": 2, **extra}


# (document, field named in the error)
BAD_SPECS: list[tuple[object, str]] = [
    ([1, 2], ""),
    ({"command": "x", "nodes": 1}, "mode"),
    (base(mode="dp"), "mode"),
    (base(mode="PS-Worker"), "mode"),
    ({"mode": "ddp", "nodes": 1}, "command"),
    (base(command=""), "command"),
    (base(command="   "), "command"),
    (base(command="echo a\x00b"), "command"),
    (base(nodes=0), "nodes"),
    (base(nodes=-1), "nodes"),
    (base(nodes="two"), "nodes"),
    (base(nodes=1.5), "nodes"),
    ({"mode": "ddp", "command": "x"}, "nodes"),
    (base(gpus_per_node=-1), "gpus_per_node"),
    (base(cpus_per_node=2.5), "cpus_per_node"),
    (base(nodse=2), "nodse"),
    (base(name="a b"), "name"),
    (base(name="x\ny"), "name"),
    (base(name="$(reboot)"), "name"),
    (base(name="-rf"), "name"),
    (base(partition="debug\n#SBATCH --uid=0"), "partition"),
    (base(partition="a;b"), "partition"),
    (base(account="x y"), "account"),
    (base(qos='"q"'), "qos"),
    (base(time="forever"), "time"),
    (base(mem="lots"), "mem"),
    (base(output_dir="/tmp/out\nx"), "output_dir"),
    (base(output_dir=""), "output_dir"),
    (base(workdir="/tmp/\rwd"), "workdir"),
    (base(env={"A B": "x"}), "env"),
    (base(env={"1X": "x"}), "env"),
    (base(env={"X": "a\x00b"}), "env"),
    (base(env=["X=1"]), "env"),
    (base(sbatch={"--nodes": 3}), "sbatch"),
    (base(sbatch={"nodes": 3}), "sbatch"),
    (base(sbatch={"output": "/etc/passwd"}), "sbatch"),
    (base(sbatch={"constraint": "a\n#SBATCH --x"}), "sbatch"),
    (base(rdma="yes"), "rdma"),
    (base(platform="sagemaker"), "platform"),
    (base(master_port=80), "master_port"),
    (base(master_port=70000), "master_port"),
    (base(rendezvous_timeout=0), "rendezvous_timeout"),
    (base(ps={"nodes": 1}), "ps"),
    ({"mode": "ps-worker", "command": "x", "worker": {"nodes": 1}}, "ps"),
    ({"mode": "ps-worker", "command": "x", "nodes": 2, "ps": {}, "worker": {}}, "nodes"),
    ({"mode": "ps-worker", "command": "x", "ps": {"nodes": 0}, "worker": {}}, "ps.nodes"),
    ({"mode": "ray", "command": "x", "head": {"cpus_per_node": 0.7}}, "head.cpus_per_node"),
    ({"mode": "ray", "command": "x", "cpus_per_node": 1.5}, "cpus_per_node"),
    ({"mode": "ray", "command": "x", "worker_groups": [{"cpus_per_node": 2.5}]}, "worker_groups.0.cpus_per_node"),
    ({"mode": "ray", "command": "x", "worker_groups": [{"nodes": 1}] * 6}, "worker_groups"),
    ({"mode": "ray", "command": "x", "head": {"nodes": 2}}, "head.nodes"),
    ({"mode": "ray", "command": "x", "head": {"gpus": 1}}, "head.gpus"),
    ({"mode": "ray", "command": "x", "worker_groups": [{"partition": "a b"}]}, "worker_groups.0.partition"),
    (base(container={}), "container.image"),
    (base(container={"image": ""}), "container.image"),
    (base(container={"image": "a.sqsh\nb"}), "container.image"),
    (base(container={"image": "a.sqsh", "runtime": "docker"}), "container.runtime"),
    (base(container={"image": "a.sqsh", "mounts": ["/data"]}), "container.mounts"),
    (base(container={"image": "a.sqsh", "mounts": ["/data:data"]}), "container.mounts"),
    (base(container={"image": "a.sqsh", "mounts": ["/data:/data:rx"]}), "container.mounts"),
    (base(container={"image": "a.sqsh", "mounts": ["/my data:/data"]}), "container.mounts"),
    (base(container={"image": "a.sqsh", "mounts": "/data:/data"}), "container.mounts"),
    (base(container={"image": "a.sqsh", "workdir": "code"}), "container.workdir"),
    (base(container={"image": "a.sqsh", "shm": "1G"}), "container.shm"),
    (
        {"mode": "ps-worker", "command": "x", "ps": {"container": {"image": "p", "mounts": ["x"]}}, "worker": {}},
        "ps.container",
    ),
]


@pytest.mark.parametrize("doc,field", BAD_SPECS, ids=[f"{i}-{f}" for i, (_, f) in enumerate(BAD_SPECS)])
def test_bad_specs_name_the_field(doc: object, field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(doc)
    assert err.value.field.startswith(field), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "text,needle",
    [
        ("mode: ddp\ncommand: x\nnodes: 2\nnodes: [", "invalid YAML"),
        ("- just a list", "mapping"),
        ("mode: ddp\ncommand: x\nnodes: 2\ngpus_per_node: lots\n", "gpus_per_node"),
        ("mode: ray\ncommand: x\nhead: {cpus_per_node: 0.7}\n", "Ray schedules whole CPUs"),
        # sbatch takes unambiguous prefixes of its long options: each of these would override ti-slurm's own
        ("mode: ddp\ncommand: x\nnodes: 2\nsbatch: {partit: big}\n", "sbatch reads as --partition"),
        ("mode: ddp\ncommand: x\nnodes: 2\nsbatch: {outp: /tmp/x}\n", "sbatch reads as --output"),
        ("mode: ddp\ncommand: x\nnodes: 2\nsbatch: {arr: 1-1000}\n", "sbatch reads as --array"),
        ("mode: ddp\ncommand: x\nnodes: 2\nsbatch: {jo: x}\n", "sbatch reads as --job-name"),
        ("mode: ddp\ncommand: x\nnodes: 2\ntime: '٥'\n", "time: '٥': expected a Slurm time limit"),  # an Arabic 5
        ("mode: ddp\ncommand: x\nnodes: 2\nmem: ٥G\n", "mem: '٥G': expected a Slurm memory size"),
        ("mode: ddp\ncommand: x\nnodes: true\n", "nodes: True: expected a number, not true/false"),
        ("mode: ddp\ncommand: x\nnodes: 2\ngpus_per_node: false\n", "gpus_per_node: False: expected a number"),
        ("mode: ddp\ncommand: x\nnodes: 2\nenv: {RANK: '3'}\n", "env.RANK: '3': RANK is set by mode ddp on every node"),
        ("mode: ddp\ncommand: x\nnodes: 2\nenv: {SLURM_JOB_ID: '3'}\n", "SLURM_* variables are set by Slurm"),
        ("mode: ddp\ncommand: x\nnodes: 2\nsbatch: {exclude: 'node[3-1]'}\n", "sbatch.exclude: 'node[3-1]': bad"),
    ],
)
def test_cli_prints_one_line_and_exits_2(write_spec, text: str, needle: str) -> None:
    res = run_cli("render", str(write_spec(text)))
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def test_cli_missing_file_is_one_line(tmp_path: Path) -> None:
    res = run_cli("render", str(tmp_path / "nope.yaml"))
    assert res.returncode == 2 and "cannot read" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_cli_usage_error_is_one_line() -> None:
    res = run_cli("submit")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1


def test_pyslurm_backend_refuses_with_the_reason_where_it_does_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    from ti_slurm.backends import get_backend

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)  # as where it is not installed
    with pytest.raises(ConfigError) as err:
        get_backend("pyslurm")
    assert str(err.value) == (
        "backend: 'pyslurm': pyslurm is not installed (pip install pyslurm==<the cluster's Slurm version>); "
        "use --backend slurm (the Slurm commands) instead"
    )


def test_an_output_dir_from_home_is_the_users_home(write_spec, tmp_path: Path) -> None:
    path = write_spec("mode: ddp\ncommand: x\nnodes: 1\noutput_dir: ~/jobs\n")
    res = run_cli("render", str(path), env={"HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    assert f'"output_dir":"{tmp_path}/jobs"' in res.stdout


def test_remote_paths_from_home_are_relative_to_the_logins_home(write_spec) -> None:
    from ti_slurm.submitting.planning import plan_job

    # a bare ~ is YAML's null: quoted, it is the home
    spec = load_spec(write_spec("mode: ddp\ncommand: x\nnodes: 1\noutput_dir: ~/jobs\nworkdir: '~'\n"))
    plan = plan_job(spec, remote=True)
    assert (plan.output_dir, plan.workdir) == ("jobs", ".")
    spec = load_spec(write_spec("mode: ddp\ncommand: x\nnodes: 1\nworkdir: code\nremote: {host: l, workdir: ~/p}\n"))
    plan = plan_job(spec, remote=True)
    assert (plan.output_dir, plan.workdir) == ("p/ti-slurm-jobs", "p/code")


def test_remote_code_is_a_path_on_the_login_node_taken_there(write_spec) -> None:
    from ti_slurm.submitting.planning import plan_job

    body = "mode: ddp\ncommand: x\nnodes: 1\ncode: proj\nworkdir: src\nremote: {host: l, workdir: /srv/me}\n"
    plan = plan_job(load_spec(write_spec(body)), remote=True)
    # the login node's code directory, not taken yet (no tree): the login node snapshots it at submit
    assert (plan.code_dir, plan.code_tree, plan.workdir) == ("/srv/me/proj", "", "/srv/me/proj/src")
    with pytest.raises(SpecError, match=r"^workdir: '\.\./x': is outside code \(proj\)"):
        plan_job(load_spec(write_spec(body.replace("workdir: src", "workdir: ../x"))), remote=True)


BIG = "x" * 140000
TOO_BIG = [  # values the kernel cannot pass to a node's command (E2BIG at exec): refused at submit
    ("env: {A: '" + BIG + "'}\n", "env.A", "A is over Linux's 131072-byte limit"),
    ("env: {" + ", ".join(f"A{i}: '{'x' * 100000}'" for i in range(30)) + "}\n", "env", "in all, over the 1048576"),
]


@pytest.mark.parametrize("text,field,needle", TOO_BIG, ids=["one variable", "thirty variables"])
def test_what_the_kernel_cannot_pass_is_refused_at_submit(write_spec, text: str, field: str, needle: str) -> None:
    path = write_spec("mode: ddp\ncommand: x\nnodes: 2\n" + text)
    res = run_cli("render", str(path))
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1
    assert res.stderr.startswith(f"ti-slurm: error: {field}: ") and needle in res.stderr, res.stderr[:300]


def test_a_command_longer_than_one_argument_may_be_is_refused(write_spec) -> None:
    res = run_cli("render", str(write_spec(f"mode: ddp\nnodes: 2\ncommand: '{BIG}'\n")))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "command: " in res.stderr and "longer than Linux's 131072-byte limit for one argument" in res.stderr


def test_time_zero_is_no_limit_as_sbatch_reads_it_so_restart_takes_it(write_spec) -> None:
    spec = load_spec(write_spec("mode: ddp\ncommand: x\nnodes: 1\ntime: '0'\nrestart: {max: 2}\n"))
    assert spec.time == "0" and spec.restart is not None


def test_a_spec_names_its_cluster_or_auto_and_nothing_else() -> None:
    assert parse_spec({"mode": "ddp", "nodes": 2, "command": "x", "cluster": "gpu-a"}).cluster == "gpu-a"
    assert parse_spec({"mode": "ddp", "nodes": 2, "command": "x", "cluster": "auto"}).cluster == "auto"
    said = r"^cluster: 'gpu a': expected `auto`, a \[\[cluster\]\] name of your user config or a Slurm cluster's"
    with pytest.raises(SpecError, match=said):
        parse_spec({"mode": "ddp", "nodes": 2, "command": "x", "cluster": "gpu a"})
