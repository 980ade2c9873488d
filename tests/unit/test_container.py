"""Training images: the spec's ``container:``, the plan's record of it, and how a node starts a command in it."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.factories import plan_from
from ti_slurm.core.errors import ConfigError
from ti_slurm.core.plan import Container, JobPlan
from ti_slurm.core.site import parse_site_config
from ti_slurm.job.container import ImageRun, image_env
from ti_slurm.job.relay import CLIENT, Relay, read_request
from ti_slurm.slurm.text import read_conf

PS_WORKER = {
    "mode": "ps-worker",
    "command": "python train.py",
    "container": {"image": "/images/train.sqsh", "mounts": ["/data:/data:ro"]},
    "ps": {"nodes": 1, "container": {"image": "/images/cpu.sqsh", "runtime": "oci"}},
    "worker": {"nodes": 2},
}


def test_each_role_gets_the_jobs_image_unless_it_names_its_own() -> None:
    ps, worker = plan_from(PS_WORKER).components
    assert ps.container == Container("/images/cpu.sqsh", "oci", (), "")
    assert worker.container == Container("/images/train.sqsh", "", ("/data:/data:ro",), "")


def test_the_container_travels_into_the_job_and_back() -> None:
    plan = plan_from(PS_WORKER)
    assert JobPlan.from_json(plan.to_json()) == plan
    bare = plan_from({"mode": "ddp", "command": "x", "nodes": 1})
    assert bare.components[0].container is None and JobPlan.from_json(bare.to_json()) == bare


def test_the_site_chooses_the_runtime_a_spec_leaves_open() -> None:
    assert parse_site_config({}).container_runtime == "pyxis"
    assert parse_site_config({"container_runtime": "oci"}).container_runtime == "oci"
    with pytest.raises(ConfigError) as err:
        parse_site_config({"container_runtime": "docker"}, "/etc/ti-slurm/config.toml")
    assert str(err.value) == '/etc/ti-slurm/config.toml: container_runtime: \'docker\': expected "pyxis" or "oci"'


def test_the_image_gets_the_nodes_variables_but_not_the_hosts_search_paths() -> None:
    env = {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/x", "PYTHONPATH": "/y", "RANK": "1", "HOME": "/root", "PWD": "/w"}
    assert image_env(env) == {"RANK": "1", "HOME": "/root"}


def node_env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "MASTER_ADDR": "10.0.0.1",
        "SECRET_TOKEN": "s3cr3t value",
        "TI_SLURM_CHECKPOINT_DIR": str(tmp_path / "job" / "checkpoint"),
        "SLURM_JOB_ID": "42",
        "SLURM_STEP_ID": "3",
        "SLURM_PROCID": "1",
    }


def test_enroot_gets_the_mounts_and_the_variable_names_never_their_values(tmp_path: Path) -> None:
    plan = plan_from(PS_WORKER, workdir=str(tmp_path / "code"))
    run = ImageRun(plan, 1, 0, "node02", str(tmp_path / "job"), node_env(tmp_path))
    argv = run.argv("python train.py")
    assert argv[:2] == ["enroot", "start"]
    mounts = [argv[i + 1] for i, word in enumerate(argv) if word == "--mount"]
    assert mounts == [
        f"{tmp_path}/job:{tmp_path}/job:none:x-create=auto,rbind,rw",  # the checkpoint dir is inside it
        f"{tmp_path}/code:{tmp_path}/code:none:x-create=auto,rbind,rw",  # the workdir, at its own path
        "/data:/data:none:x-create=auto,rbind,ro",
    ]
    names = [argv[i + 1] for i, word in enumerate(argv) if word == "--env"]
    assert "MASTER_ADDR" in names and "SECRET_TOKEN" in names and "PATH" not in names
    assert not any("s3cr3t" in word for word in argv)  # values stay in the environment
    assert argv[-4:-1] == ["/images/train.sqsh", "/bin/bash", "-c"]
    assert argv[-1].endswith(f"\ncd -- {tmp_path}/code || exit 1\npython train.py")


def test_the_images_first_shell_outlives_its_command(tmp_path: Path) -> None:
    """The container's first process holds the image's files (enroot's squashfuse goes with it): it ends only once
    the command has, and after a signal only once every other process of the container has (as torch's workers,
    in sessions of their own, outlive their launcher, which dies of the checkpoint signal)."""
    import subprocess

    from ti_slurm.job.process import process_tree

    doc = {"mode": "ddp", "command": "x", "nodes": 1, "container": {"image": "/i.sqsh"}, "signal": {"name": "USR2"}}
    run = ImageRun(plan_from(doc, workdir=str(tmp_path)), 0, 0, "n1", str(tmp_path), node_env(tmp_path))
    worker = f"trap 'sleep 1; echo saved > {tmp_path}/saved-$1; exit 0' USR2 TERM; sleep 30 & wait"
    launcher = f"setsid bash -c {shlex.quote(worker)} worker $1 & wait"  # the launcher itself dies of either signal
    for signum, code in ((signal.SIGUSR2, 128 + signal.SIGUSR2), (signal.SIGTERM, 143)):
        script = run.argv(f"bash -c {shlex.quote(launcher)} launcher {signum}")[-1]
        # a mount namespace of its own, as in a container: the processes of the host are not the image's
        argv = ["unshare", "--mount", "--propagation", "private", "/bin/bash", "-c", script]
        proc = subprocess.Popen(argv, start_new_session=True)
        time.sleep(1)
        for pid in process_tree(proc.pid):  # what the node's step does with the checkpoint signal
            os.kill(pid, signum)
        assert proc.wait(timeout=15) == code
        assert (tmp_path / f"saved-{signum}").read_text() == "saved\n"  # before its first shell ended


def test_a_relative_image_and_mount_are_taken_from_the_workdir(tmp_path: Path) -> None:
    doc = {"mode": "ddp", "command": "x", "nodes": 1, "container": {"image": "img.sqsh", "mounts": ["data:/data"]}}
    run = ImageRun(plan_from(doc, workdir="/code"), 0, 0, "n1", str(tmp_path / "job"), node_env(tmp_path))
    argv = run.argv("x")
    assert "/code/img.sqsh" in argv and "/code/data:/data:none:x-create=auto,rbind,rw" in argv


def test_oci_gets_a_bundle_of_its_own_made_as_slurm_makes_it(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    image_config = {
        "process": {"env": ["PATH=/usr/bin", "MASTER_ADDR=stale"], "args": ["sh"], "cwd": "/"},
        "root": {"path": "rootfs", "readonly": True},
        "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "user"}]},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
    }
    (bundle / "config.json").write_text(json.dumps(image_config))
    conf = tmp_path / "oci.conf"
    conf.write_text('# comment\nRunTimeRun="crun --root=/run/c/%u run --bundle %b %n.%u.%j.%s.%t"\nX=1\n')
    fake = tmp_path / "bin"  # the check looks for the runtime on PATH; the bundle is made without running it
    fake.mkdir()
    (fake / "crun").write_text("#!/bin/sh\nexit 0\n")
    (fake / "crun").chmod(0o755)
    env = node_env(tmp_path) | {"SLURM_CONF": str(tmp_path / "slurm.conf"), "USER": "alice"}
    env["PATH"] = f"{fake}:{env['PATH']}"
    doc = {"mode": "ddp", "command": "x", "nodes": 1, "container": {"image": str(bundle), "runtime": "oci"}}
    code = tmp_path / "code"
    code.mkdir()
    (tmp_path / "job").mkdir()
    run = ImageRun(plan_from(doc, workdir=str(code)), 0, 0, "node01", str(tmp_path / "job"), env)
    assert run.check() is None
    argv = run.argv("python train.py")
    step_bundle = tmp_path / "job" / "containers" / "ddp-0.1"
    assert argv == ["crun", "--root=/run/c/alice", "run", "--bundle", str(step_bundle), "node01.alice.42.3.1x1"]
    config = json.loads((step_bundle / "config.json").read_text())
    assert config["root"]["path"] == str(bundle / "rootfs")
    assert config["process"]["args"][:2] == ["/bin/bash", "-c"]
    assert config["process"]["args"][2].endswith(f"\ncd -- {code} || exit 1\npython train.py")
    assert "PATH=/usr/bin" in config["process"]["env"] and "MASTER_ADDR=10.0.0.1" in config["process"]["env"]
    assert "MASTER_ADDR=stale" not in config["process"]["env"]
    assert {"type": "pid"} not in config["linux"]["namespaces"]  # the host's processes: signals reach the command
    assert config["mounts"][0] == {"destination": "/proc", "type": "none", "source": "/proc", "options": ["rbind"]}
    assert {"destination": str(code), "type": "none", "source": str(code), "options": ["rbind", "rw"]} in config[
        "mounts"
    ]


def test_oci_conf_values_may_be_quoted(tmp_path: Path) -> None:
    conf = tmp_path / "oci.conf"
    conf.write_text('RunTimeRun="a b"\nRunTimeKill=c d\n#RunTimeDelete=x\n')
    assert read_conf(str(conf)) == {"RunTimeRun": "a b", "RunTimeKill": "c d"}
    assert read_conf(str(tmp_path / "absent")) == {}


@pytest.mark.parametrize(
    "container,problem",
    [
        ({"image": "/nonexistent/x.sqsh"}, "image /nonexistent/x.sqsh: no such file"),
        ({"image": "/nonexistent/b", "runtime": "oci"}, "runtime oci needs RunTimeRun in"),
        ({"image": "/etc/hostname", "mounts": ["/nonexistent:/data"]}, "mount /nonexistent: no such file or directory"),
    ],
)
def test_check_names_the_node_and_the_cause(tmp_path: Path, container: dict[str, object], problem: str) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "enroot").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "enroot").chmod(0o755)
    env = {"PATH": str(tmp_path / "bin"), "SLURM_CONF": str(tmp_path / "slurm.conf")}
    doc = {"mode": "ddp", "command": "x", "nodes": 1, "container": container}
    found = ImageRun(plan_from(doc, workdir="/"), 0, 0, "node07", str(tmp_path), env).check()
    assert found is not None and found.startswith("container on node07: ") and problem in found


def test_a_node_without_enroot_is_told_so(tmp_path: Path) -> None:
    doc = {"mode": "ddp", "command": "x", "nodes": 1, "container": {"image": "/"}}
    found = ImageRun(plan_from(doc), 0, 0, "node07", str(tmp_path), {"PATH": str(tmp_path)}).check()
    assert found == "container on node07: runtime pyxis needs enroot, which is not on this node's PATH"


def test_the_relay_runs_the_agent_for_callers_with_the_secret_only(tmp_path: Path) -> None:
    relay = Relay(["/bin/sh", "-c", 'echo "ran $*"; exit 3', "agent"], {"PATH": "/usr/bin:/bin"}, str(tmp_path), "n1")
    relay.start()
    addr, port, secret = relay.address.split(":")
    assert (tmp_path / "relay.n1").read_text().strip() == relay.address
    assert oct((tmp_path / "relay.n1").stat().st_mode & 0o777) == "0o600"

    def call(secret: str, ident: str, args: list[str]) -> bytes:
        with socket.create_connection((addr, int(port))) as conn:
            conn.sendall(f"{secret}\n{ident}\n{len(args)}\n".encode() + b"".join(a.encode() + b"\0" for a in args))
            return b"".join(iter(lambda: conn.recv(4096), b""))

    assert call("wrong", "x1", ["node02", "hostname"]) == b"" and not (tmp_path / "rc.x1").exists()
    assert call(secret, "x2", ["node02", "echo 'a b'"]) == b"ran node02 echo 'a b'\n"
    assert (tmp_path / "rc.x2").read_text() == "3\n"


def test_the_relays_client_needs_nothing_but_bash(tmp_path: Path) -> None:
    relay = Relay(["/bin/sh", "-c", 'echo "$# args: $*"; exit 5', "agent"], {}, str(tmp_path), "n1")
    relay.start()
    client = tmp_path / "ssh"
    client.write_text(CLIENT)
    client.chmod(0o755)
    import subprocess

    env = {"TI_SLURM_AGENT_RELAY": relay.address, "TI_SLURM_AGENT_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([str(client), "-p", "22", "node02", "orted", "--x y"], env=env, capture_output=True)
    assert done.returncode == 5 and done.stdout == b"5 args: -p 22 node02 orted --x y\n"
    env["TI_SLURM_AGENT_RELAY"] = ""
    done = subprocess.run([str(client), "node02", "true"], env=env, capture_output=True, text=True)
    assert done.returncode == 255 and "no launch agent relay" in done.stderr


def test_a_malformed_request_is_refused() -> None:
    import io

    assert read_request(io.BytesIO(b"s\nid\nmany\n")) is None
    assert read_request(io.BytesIO(b"s\n../x\n1\na\0")) is None
    assert read_request(io.BytesIO(b"s\nid\n2\na\0b c\0")) == ("s", "id", ["a", "b c"])


def test_the_relay_survives_a_caller_that_goes_away(tmp_path: Path) -> None:
    relay = Relay(["/bin/sh", "-c", "yes", "agent"], {"PATH": "/usr/bin:/bin"}, str(tmp_path), "n1")
    relay.start()
    addr, port, secret = relay.address.split(":")
    with socket.create_connection((addr, int(port))) as conn:
        conn.sendall(f"{secret}\ngone\n1\nx\0".encode())
        conn.recv(10)
    done = threading.Event()
    for _ in range(100):
        if (tmp_path / "rc.gone").exists():
            done.set()
            break
        threading.Event().wait(0.05)
    assert done.is_set()  # the agent was stopped when its caller left, and its end recorded
