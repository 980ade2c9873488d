"""``code:``: the nodes run the code as it was at submit, whatever happens to it afterwards (the CLI as a
process, a YAML spec on disk, the local runner's real processes; tests/cluster shows Slurm)."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

from tests.conftest import SmallDisk, run_cli


def wait_status(job_id: str, env: dict[str, str]) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = json.loads(run_cli("status", job_id, "--json", env=env).stdout)
        if status["state"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            return status
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not end")


def test_the_nodes_run_the_code_as_submitted_and_status_names_it(tmp_path: Path) -> None:
    code = tmp_path / "proj"
    (code / "src").mkdir(parents=True)
    (code / "src" / "msg.txt").write_text("as submitted\n")
    (tmp_path / "job.yaml").write_text(
        "mode: ddp\nnodes: 2\ncode: proj\nworkdir: src\noutput_dir: out\n"
        'command: sleep 2; cat msg.txt; echo "code=$TI_SLURM_CODE_DIR"; pwd\n'
    )
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    res = run_cli("submit", "--local", "job.yaml", cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    (code / "src" / "msg.txt").write_text("edited after submit\n")  # while the job's commands wait
    job_id = res.stdout.split()[0]
    status = wait_status(job_id, env)
    assert status["state"] == "COMPLETED"
    shot = status["code"]
    assert isinstance(shot, dict) and len(str(shot["tree"])) == 64 and str(shot["dir"]).endswith("/proj")
    for n in (0, 1):
        lines = (tmp_path / "out" / job_id / "logs" / f"ddp-{n}.log").read_text().splitlines()
        assert lines == ["as submitted", f"code={shot['dir']}", f"{shot['dir']}/src"]
    text = run_cli("status", job_id, env=env).stdout
    assert f"  code: snapshot {str(shot['tree'])[:12]} in {shot['dir']}\n" in text


def test_a_workdir_outside_the_code_is_one_line_and_nothing_runs(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "job.yaml").write_text("mode: ddp\nnodes: 1\ncode: proj\nworkdir: ..\noutput_dir: out\ncommand: true\n")
    res = run_cli("submit", "--local", "job.yaml", cwd=tmp_path, env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == "ti-slurm: error: workdir: '..': is outside code (proj): the command runs in its snapshot\n"
    assert not (tmp_path / "out").exists()


def test_input_channels_staging_and_outputs_reach_every_node(tmp_path: Path) -> None:
    data, stage = tmp_path / "datasets", tmp_path / "local-disk"
    (data / "train").mkdir(parents=True)
    (data / "train" / "part-0").write_text("train data\n")
    (data / "val").mkdir()
    (data / "val" / "v-0").write_text("val data\n")
    stage.mkdir()
    (tmp_path / "site.toml").write_text(f'stage_dir = "{stage}"\n')
    command = (
        'echo "train=$TI_SLURM_INPUT_TRAIN val=$TI_SLURM_INPUT_VAL"; cat "$TI_SLURM_INPUT_VAL/v-0"; '
        'echo "model of $INDEX" > "$TI_SLURM_MODEL_DIR/m-$INDEX"; test -d "$TI_SLURM_OUTPUT_DIR"'
    )
    (tmp_path / "job.yaml").write_text(
        f"mode: ddp\nnodes: 2\noutput_dir: out\noutputs: runs\ncommand: '{command}'\n"
        f"inputs:\n  train: {data / 'train'}\n  val: {{path: {data / 'val'}, stage: local}}\n"
    )
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "TI_SLURM_CONFIG": str(tmp_path / "site.toml")}
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.split()[0]
    for n in (0, 1):  # each node step its own copy (two steps on one machine here)
        staged = stage / f"ti-slurm-{os.getuid()}" / job_id / f"ddp-{n}" / "val"
        lines = (tmp_path / "out" / job_id / "logs" / f"ddp-{n}.log").read_text().splitlines()
        assert lines == [f"train={data / 'train'} val={staged}", "val data"]
        assert (tmp_path / "runs" / job_id / "model" / f"m-{n}").read_text() == f"model of {n}\n"
    assert not (stage / f"ti-slurm-{os.getuid()}" / job_id).exists()  # the staged copies are gone


def test_a_failure_file_is_the_jobs_reason(tmp_path: Path) -> None:
    command = 'if [ $INDEX = 1 ]; then echo "CUDA out of memory at step 12" > $TI_SLURM_OUTPUT_DIR/failure; exit 1; fi'
    (tmp_path / "job.yaml").write_text(f"mode: ddp\nnodes: 2\noutput_dir: out\ncommand: '{command}'\n")
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path, env=env)
    assert res.returncode == 1
    reason = "CUDA out of memory at step 12 (ddp node localhost (index 1) exited 1)"
    assert f"FAILED: {reason}" in res.stderr, res.stderr
    status = json.loads(run_cli("status", res.stdout.split()[0], "--json", env=env).stdout)
    assert status["reason"] == reason


def test_a_node_whose_local_disk_is_full_fails_naming_the_node_and_the_path(
    tmp_path: Path, small_disk: SmallDisk
) -> None:
    data, disk = tmp_path / "datasets" / "val", small_disk("1m", "local-disk")
    data.mkdir(parents=True)
    (data / "v-0").write_bytes(b"\0" * (3 << 20))
    (tmp_path / "site.toml").write_text(f'stage_dir = "{disk}"\n')
    inputs = f"inputs: {{val: {{path: {data}, stage: local}}}}\n"
    (tmp_path / "job.yaml").write_text(f"mode: ddp\nnodes: 1\noutput_dir: out\n{inputs}command: echo ran\n")
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "TI_SLURM_CONFIG": str(tmp_path / "site.toml")}
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path, env=env)
    assert res.returncode == 1
    line = f"ddp node localhost (index 0) failed staging on localhost: cannot copy input val ({data}) to"
    assert line in res.stderr and "No space left on device" in res.stderr, res.stderr
    assert "ran" not in "".join(p.read_text() for p in (tmp_path / "out").rglob("*.log"))
    assert list(disk.rglob("v-0*")) == []  # the partial copy is gone too


def test_a_job_cancelled_while_staging_leaves_no_copy_behind(tmp_path: Path) -> None:
    """A copy stuck on a stalled source (a FIFO no one writes) when the job is cancelled: every node's partial
    copy is removed, as after a copy that failed."""
    data, disk = tmp_path / "datasets" / "stuck", tmp_path / "disk"
    data.mkdir(parents=True)
    (data / "shard-0").write_bytes(b"\1" * (1 << 20))
    os.mkfifo(data / "shard-1")
    disk.mkdir()
    (tmp_path / "site.toml").write_text(f'stage_dir = "{disk}"\n')
    inputs = f"inputs: {{stuck: {{path: {data}, stage: local}}}}\n"
    (tmp_path / "job.yaml").write_text(f"mode: ddp\nnodes: 2\noutput_dir: out\n{inputs}command: 'true'\n")
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "TI_SLURM_CONFIG": str(tmp_path / "site.toml")}
    job = run_cli("submit", "--local", "job.yaml", cwd=tmp_path, env=env).stdout.split()[0]
    deadline = time.monotonic() + 30
    while len(list(disk.rglob("stuck.part"))) < 2 and time.monotonic() < deadline:  # both nodes are copying
        time.sleep(0.2)
    assert len(list(disk.rglob("stuck.part"))) == 2
    assert run_cli("cancel", job, env=env).returncode == 0
    status = run_cli("wait", job, "--timeout", "30", env=env)
    assert "CANCELLED" in status.stderr, status.stderr
    assert [p for p in disk.rglob("*") if not p.is_dir()] == []  # no partial copy on any node


def test_wait_shows_how_far_each_nodes_staging_copy_is(tmp_path: Path) -> None:
    """A slow source (a FIFO that gives its data only after 8 s, as a stalled shared filesystem would): while
    the nodes copy, ``--wait`` says how many nodes are staging and how far they are; once done, nothing."""
    data = tmp_path / "datasets" / "slow"
    data.mkdir(parents=True)
    (data / "shard-0").write_bytes(b"\1" * (3 << 20))
    os.mkfifo(data / "shard-1")
    (tmp_path / "disk").mkdir()
    (tmp_path / "site.toml").write_text(f'stage_dir = "{tmp_path / "disk"}"\n')
    inputs = f"inputs: {{slow: {{path: {data}, stage: local}}}}\n"
    (tmp_path / "job.yaml").write_text(
        f"mode: ddp\nnodes: 2\noutput_dir: out\n{inputs}command: ls $TI_SLURM_INPUT_SLOW\n"
    )
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "TI_SLURM_CONFIG": str(tmp_path / "site.toml")}

    def feed() -> None:  # both nodes' copies wait in open() until a writer comes
        time.sleep(8)
        with open(data / "shard-1", "wb") as fifo:
            fifo.write(b"\2" * 4096)

    writer = threading.Thread(target=feed)
    writer.start()
    res = run_cli("submit", "--local", "--wait", "job.yaml", cwd=tmp_path, env=env)
    writer.join()
    assert res.returncode == 0, res.stderr
    seen = re.findall(r"staging inputs on (\d) node\(s\): (\d+) of (\d+) MiB", res.stderr)
    assert seen and all(total == "6" and int(done) <= 6 for _, done, total in seen), res.stderr  # 3 MiB each
    assert any(nodes == "2" for nodes, _, _ in seen), res.stderr
    job_id = res.stdout.split()[0]
    status = json.loads(run_cli("status", job_id, "--json", env=env).stdout)
    assert status["state"] == "COMPLETED" and status["staging"] == {}
    logs = (tmp_path / "out" / job_id / "logs" / "ddp-0.log").read_text()
    assert logs.split() == ["shard-0", "shard-1"]
