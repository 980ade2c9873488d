"""Prolog/Epilog hooks run for real (as root), against hostile input."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SmallDisk, fake_sysfs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the hooks run as root, like slurmd runs them")
BIN = Path(sys.executable).parent


def run_hook(
    name: str, tmp_path: Path, env: dict[str, str], extra_config: str = ""
) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "config.toml"
    config.write_text(f'job_dir_base = "{tmp_path / "jobs"}"\nlog_file = "{tmp_path / "hooks.log"}"\n{extra_config}')
    full = {"PATH": "/usr/bin:/bin", "TI_SLURM_CONFIG": str(config), "SLURM_JOB_USER": "nobody", **env}
    return subprocess.run([str(BIN / f"ti-slurm-{name}")], env=full, capture_output=True, text=True, check=False)


def test_prolog_makes_a_private_dir_owned_by_the_job_user_and_epilog_removes_it(tmp_path: Path) -> None:
    assert run_hook("prolog", tmp_path, {"SLURM_JOB_ID": "4242"}).returncode == 0
    info = os.lstat(tmp_path / "jobs" / "4242")
    assert (info.st_uid, oct(info.st_mode & 0o777)) == (pwd.getpwnam("nobody").pw_uid, "0o700")
    assert run_hook("epilog", tmp_path, {"SLURM_JOB_ID": "4242"}).returncode == 0
    assert not (tmp_path / "jobs" / "4242").exists()


def test_epilog_removes_what_a_killed_step_staged_on_the_node(tmp_path: Path) -> None:
    stage = tmp_path / "local-disk"
    uid = pwd.getpwnam("nobody").pw_uid
    staged = stage / f"ti-slurm-{uid}" / "4444" / "ddp-0" / "eval"
    staged.mkdir(parents=True)
    os.chown(stage / f"ti-slurm-{uid}", uid, -1)  # the user's folder, as the job's steps make it
    (staged / "part-0").write_text("a copy its step did not live to remove")
    other = stage / f"ti-slurm-{uid}" / "4445"  # another job's
    other.mkdir()
    assert run_hook("epilog", tmp_path, {"SLURM_JOB_ID": "4444"}, f'stage_dir = "{stage}"\n').returncode == 0
    assert not (stage / f"ti-slurm-{uid}" / "4444").exists() and other.is_dir()


def test_the_prologs_of_one_job_on_a_shared_base_all_succeed_and_keep_one_directory(tmp_path: Path) -> None:
    """Each node's Prolog of a job meets the directory another node's made on a shared job_dir_base (the
    test cluster's nodes share one filesystem): a race that made a Prolog fail before its RDMA check."""
    run_hook("prolog", tmp_path, {"SLURM_JOB_ID": "4343"})  # the first node's: the config and the dir
    (tmp_path / "jobs" / "4343" / "kept").write_text("the job's")
    config = tmp_path / "config.toml"
    full = {"PATH": "/usr/bin:/bin", "TI_SLURM_CONFIG": str(config), "SLURM_JOB_USER": "nobody", "SLURM_JOB_ID": "4343"}
    others = [
        subprocess.Popen([str(BIN / "ti-slurm-prolog")], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    assert [proc.wait() for proc in others] == [0] * 4
    assert (tmp_path / "jobs" / "4343" / "kept").read_text() == "the job's"  # not removed by a later Prolog
    assert "Errno" not in (tmp_path / "hooks.log").read_text()


@pytest.mark.parametrize("job_id", ["../victim", "", "9" * 40, "12/../../victim", "-1", "1 2", "0x10"])
def test_hostile_job_ids_change_nothing(tmp_path: Path, job_id: str) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    for hook in ("prolog", "epilog"):
        res = run_hook(hook, tmp_path, {"SLURM_JOB_ID": job_id})
        assert res.returncode == 0 and res.stderr == ""  # non-fatal: never drain a node over it
    assert (victim / "keep").read_text() == "precious"
    assert not (tmp_path / "jobs").exists() or list((tmp_path / "jobs").iterdir()) == []
    assert "refusing SLURM_JOB_ID" in (tmp_path / "hooks.log").read_text()


@pytest.mark.parametrize("user", ["../root", "", "no such user", "root;id"])
def test_hostile_users_are_refused(tmp_path: Path, user: str) -> None:
    res = run_hook("prolog", tmp_path, {"SLURM_JOB_ID": "77", "SLURM_JOB_USER": user})
    assert res.returncode == 0
    assert not (tmp_path / "jobs" / "77").exists()
    assert "SLURM_JOB_USER" in (tmp_path / "hooks.log").read_text()


def test_planted_symlink_is_replaced_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir(mode=0o755)
    (target / "keep").write_text("precious")
    (tmp_path / "jobs").mkdir(mode=0o755)
    (tmp_path / "jobs" / "555").symlink_to(target)
    assert run_hook("prolog", tmp_path, {"SLURM_JOB_ID": "555"}).returncode == 0
    job_dir = tmp_path / "jobs" / "555"
    assert job_dir.is_dir() and not job_dir.is_symlink()
    assert os.lstat(target).st_uid == 0 and oct(os.lstat(target).st_mode & 0o777) == "0o755"
    (tmp_path / "jobs" / "555").rmdir()
    (tmp_path / "jobs" / "555").symlink_to(target)
    assert run_hook("epilog", tmp_path, {"SLURM_JOB_ID": "555"}).returncode == 0
    assert not (tmp_path / "jobs" / "555").exists()
    assert (target / "keep").read_text() == "precious"


def test_unsafe_base_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir(mode=0o777)
    (tmp_path / "jobs").chmod(0o777)
    assert run_hook("prolog", tmp_path, {"SLURM_JOB_ID": "9"}).returncode == 0
    assert not (tmp_path / "jobs" / "9").exists()
    assert "writable by root only" in (tmp_path / "hooks.log").read_text()


def test_rdma_port_down_is_logged_by_default_and_drains_when_asked(tmp_path: Path) -> None:
    fake_sysfs(tmp_path / "sys" / "n1", {"mlx5_bond_0": "1: DOWN", "mlx5_bond_1": "4: ACTIVE"})
    extra = (
        'rdma_partitions = ["rdma"]\nrdma_devices = ["mlx5_bond_0", "mlx5_bond_1"]\n'
        f'sysfs_root = "{tmp_path}/sys/{{node}}"\n'
    )
    env = {"SLURM_JOB_ID": "31", "SLURM_JOB_PARTITION": "rdma", "SLURMD_NODENAME": "n1"}
    assert run_hook("prolog", tmp_path, env, extra).returncode == 0  # rdma_check defaults to "log"
    assert "RDMA mlx5_bond_0 port 1 DOWN" in (tmp_path / "hooks.log").read_text()
    assert (
        run_hook(
            "prolog", tmp_path, {**env, "SLURM_JOB_PARTITION": "debug"}, extra + 'rdma_check = "drain"\n'
        ).returncode
        == 0
    )
    # (on a real node the drain also calls scontrol; here no slurmctld knows node "n1", so only the exit code shows)
    assert run_hook("prolog", tmp_path, env, extra + 'rdma_check = "drain"\n').returncode == 1


def doctor_with(tmp_path: Path, site_toml: str) -> subprocess.CompletedProcess[str]:
    """``ti-slurm doctor`` with this site config."""
    config = tmp_path / "site.toml"
    config.write_text(site_toml)
    return subprocess.run(
        [str(BIN / "ti-slurm"), "doctor"],
        env={"PATH": os.environ["PATH"], "TI_SLURM_CONFIG": str(config)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_bad_site_config_is_one_line(tmp_path: Path) -> None:
    res = doctor_with(tmp_path, 'rdma_check = "maybe"\n')
    assert 'rdma_check: \'maybe\': expected "log" or "drain"' in res.stdout
    assert res.returncode == 1


@pytest.mark.parametrize(
    "toml,shown",
    [
        (
            'rdma_partitions = ["ib"]\nrdma_min_gpus_per_node = 4\n',
            "rdma partitions: ib (jobs of >= 2 nodes with >= 4 GPUs each)",
        ),
        ("rdma_min_nodes = 0\n", "rdma_min_nodes: 0"),
        ('rest_url = "http://127.0.0.1:6820"\n', "tokens go over plain TCP to whoever holds that port"),
        ('rest_url = "unix:/run/slurmrestd/slurmrestd.socket"\n', "tokens go to slurmrestd only"),
    ],
)
def test_doctor_shows_the_sites_rdma_rule(tmp_path: Path, toml: str, shown: str) -> None:
    res = doctor_with(tmp_path, toml)
    assert shown in res.stdout, res.stdout


def test_a_fifo_as_log_file_does_not_block_the_hook(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    os.mkfifo(tmp_path / "fifo.log")  # nobody reads it: opening it for writing would block
    config.write_text(f'job_dir_base = "{tmp_path / "jobs"}"\nlog_file = "{tmp_path / "fifo.log"}"\n')
    env = {"PATH": "/usr/bin:/bin", "TI_SLURM_CONFIG": str(config), "SLURM_JOB_USER": "nobody", "SLURM_JOB_ID": "66"}
    res = subprocess.run([str(BIN / "ti-slurm-prolog")], env=env, capture_output=True, text=True, timeout=10)
    assert res.returncode == 0 and (tmp_path / "jobs" / "66").is_dir()


def test_epilog_kills_only_the_job_users_leftovers(tmp_path: Path) -> None:
    marker = f"sleep 5{os.getpid() % 1000:03d}"
    env = {**os.environ, "SLURM_JOB_ID": "8181"}
    mine = subprocess.Popen(["runuser", "-u", "nobody", "--", "sh", "-c", f"exec {marker}"], env=env)
    other = subprocess.Popen(["sh", "-c", f"exec {marker}1"], env=env)  # root's, naming the same job id
    try:
        import time

        time.sleep(0.3)
        assert run_hook("epilog", tmp_path, {"SLURM_JOB_ID": "8181"}).returncode == 0
        assert mine.wait(timeout=10) == 128 + 9  # runuser (root) reports its child, the job user's leftover, killed
        assert other.poll() is None  # another user's process is not the job's
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait()


def test_epilog_leaves_the_jobs_processes_on_another_node_sharing_the_process_table(tmp_path: Path) -> None:
    # several slurmd on one host (the test cluster, --enable-multiple-slurmd): node02's Epilog runs while the
    # job's step on node01 still ends (its container runtime's cleanup); it must not kill that step
    marker = f"sleep 6{os.getpid() % 1000:03d}"
    job = {**os.environ, "SLURM_JOB_ID": "8282"}
    procs = {
        node: subprocess.Popen(
            ["runuser", "-u", "nobody", "--", "sh", "-c", f"exec {marker}"],
            env={**job, "SLURMD_NODENAME": node} if node else job,
        )
        for node in ("node01", "node02", "")
    }
    try:
        import time

        time.sleep(0.3)
        assert run_hook("epilog", tmp_path, {"SLURM_JOB_ID": "8282", "SLURMD_NODENAME": "node02"}).returncode == 0
        assert procs["node02"].wait(timeout=10) == 128 + 9
        assert procs[""].wait(timeout=10) == 128 + 9  # naming no node: it escaped a step of this node's
        assert procs["node01"].poll() is None
        assert "killed 2 leftover process(es)" in (tmp_path / "hooks.log").read_text()
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def fake_proc(root: Path, chain: list[tuple[int, str]]) -> None:
    """``root/<pid>/{exe,stat}`` for a chain of processes, each the parent of the one before it."""
    for (pid, exe), parent in zip(chain, [p for p, _ in chain[1:]] + [1], strict=True):
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "exe").symlink_to(exe)
        (root / str(pid) / "stat").write_text(f"{pid} (x y) S {parent} 1 1 0\n")


def test_the_hooks_use_the_scontrol_beside_the_slurm_daemon_that_runs_them(tmp_path: Path) -> None:
    from ti_slurm.admin.hooks import SCONTROL, scontrol_path

    slurm = tmp_path / "opt" / "slurm-25.11"
    (slurm / "bin").mkdir(parents=True)
    (slurm / "bin" / "scontrol").write_text("#!/bin/sh\n")
    (slurm / "bin" / "scontrol").chmod(0o755)
    # prolog <- sh <- slurmd of /opt/slurm-25.11: that Slurm's scontrol, whatever PATH says
    fake_proc(tmp_path / "proc", [(40, "/bin/sh"), (30, str(slurm / "sbin" / "slurmd"))])
    assert scontrol_path(40, str(tmp_path / "proc")) == str(slurm / "bin" / "scontrol")
    # no Slurm daemon above (an admin runs the hook by hand): Debian's
    fake_proc(tmp_path / "proc2", [(50, "/bin/bash"), (20, "/usr/bin/sshd")])
    assert scontrol_path(50, str(tmp_path / "proc2")) == SCONTROL


def test_a_full_filesystem_under_the_log_file_neither_fails_nor_drains(tmp_path: Path, small_disk: SmallDisk) -> None:
    full = small_disk("16k", "varlog", full=True)  # /var/log is full
    config = f'log_file = "{full / "hooks.log"}"\n'
    for hook in ("prolog", "epilog"):
        res = run_hook(hook, tmp_path, {"SLURM_JOB_ID": "4243"}, extra_config=config)
        assert (res.returncode, res.stderr) == (0, ""), res.stderr  # exit 1 would drain the node


def test_a_site_config_that_is_a_fifo_does_not_hang_the_hooks(tmp_path: Path) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    env = {"PATH": "/usr/bin:/bin", "TI_SLURM_CONFIG": str(fifo), "SLURM_JOB_USER": "nobody", "SLURM_JOB_ID": "4244"}
    for hook in ("prolog", "epilog"):
        res = subprocess.run([str(BIN / f"ti-slurm-{hook}")], env=env, capture_output=True, text=True, timeout=20)
        assert (res.returncode, res.stderr) == (0, "")
