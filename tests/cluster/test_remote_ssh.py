"""Remote submission over SSH: a real sshd on loopback in front of the real test cluster."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("paramiko", reason="the ssh extra is not installed (pip install 'ti-slurm[ssh]')")

from tests.conftest import ROOT, SmallDisk, processes_matching, run_cli, slurm_partitions
from tests.sshd import LOGIN_PATH, Sshd, keygen, ssh_config, start_sshd
from ti_slurm.follow.files import LOG_CHUNK

pytestmark = pytest.mark.usefixtures("cluster")


def cli_env(tmp: Path) -> dict[str, str]:
    """The CLI's environment here: its own registry, no ssh agent, short timeouts."""
    return {"XDG_STATE_HOME": str(tmp / "state"), "SSH_AUTH_SOCK": "", "TI_SLURM_SSH_TIMEOUT": "3"}


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=cli_env(tmp))


def one_line_error(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


def test_remote_ddp_submit_wait_logs_status(tmp_path: Path, sshd: Sshd) -> None:
    config = ssh_config(tmp_path, sshd)
    remote = tmp_path / "remote"
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "mode: ddp\nnodes: 2\ngpus_per_node: 2\n"
        "command: torchrun --nproc_per_node $GPU_NUM_PER_NODE --nnodes $WORLD_SIZE --node_rank $RANK "
        "--master_addr $MASTER_ADDR --master_port $MASTER_PORT train.py --epochs 5\n"
        f"remote: {{host: login, workdir: {remote}}}\n"
    )
    res = cli(
        tmp_path, "submit", str(spec), "--ssh-config", str(config), "--sync", str(ROOT / "examples" / "ddp"), "--wait"
    )
    assert res.returncode == 0, res.stderr
    assert "synced" in res.stderr and (remote / "train.py").exists()
    job = res.stdout.split()[0]
    logs = cli(tmp_path, "logs", job, "--ssh-config", str(config)).stdout
    assert sorted(re.findall(r"rank (\d)/4 on node\d\d", logs)) == ["0", "1", "2", "3"]
    status = json.loads(cli(tmp_path, "status", job, "--json", "--ssh-config", str(config)).stdout)
    assert status["state"] == "COMPLETED" and str(remote) in status["job_dir"]
    again = cli(tmp_path, "submit", str(spec), "--ssh-config", str(config), "--sync", str(ROOT / "examples" / "ddp"))
    assert "synced 0 changed file(s)" in again.stderr  # only changed files travel
    cli(tmp_path, "cancel", again.stdout.split()[0], "--ssh-config", str(config))


def test_code_over_ssh_is_the_login_nodes_snapshot_of_what_sync_uploaded(tmp_path: Path, sshd: Sshd) -> None:
    config = ssh_config(tmp_path, sshd)
    here, remote = tmp_path / "proj", tmp_path / "remote"
    (here / "src").mkdir(parents=True)
    (here / "src" / "msg.txt").write_text("as submitted\n")
    (here / "notes.tmp").write_text("left out\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "mode: ddp\nnodes: 2\ncode: .\nworkdir: src\ncode_ignore: ['*.tmp']\nsbatch: {hold: true}\n"
        "command: 'cat msg.txt; ls $TI_SLURM_CODE_DIR; pwd'\n"
        f"remote: {{host: login, workdir: {remote}}}\n"
    )
    res = cli(tmp_path, "submit", str(spec), "--ssh-config", str(config), "--sync", str(here))
    assert res.returncode == 0, res.stderr
    job = res.stdout.split()[0]
    assert (remote / "src" / "msg.txt").exists()  # uploaded to the code directory on the login node
    (remote / "src" / "msg.txt").write_text("edited on the login node while the job was held\n")
    subprocess.run(["scontrol", "release", job], check=True)
    deadline = time.monotonic() + 180
    while True:
        status = json.loads(cli(tmp_path, "status", job, "--json", "--ssh-config", str(config)).stdout)
        if status["state"] in ("COMPLETED", "FAILED") or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert status["state"] == "COMPLETED", status
    logs = cli(tmp_path, "logs", job, "--ssh-config", str(config)).stdout
    assert logs.count("as submitted") == 2 and "edited" not in logs
    assert "notes.tmp" not in logs  # ls of the snapshot: code_ignore held
    snapshot = status["code"]["dir"]
    assert snapshot.startswith(str(remote / "ti-slurm-jobs" / ".ti-slurm-code")), status["code"]
    assert logs.count(f"{snapshot}/src") == 2  # every node ran in the snapshot's workdir
    missing = spec.read_text().replace("code: .", "code: gone")
    spec.write_text(missing)
    err = one_line_error(cli(tmp_path, "submit", str(spec), "--ssh-config", str(config)))
    assert err.startswith("ti-slurm: error: code: '/"), err
    assert err.endswith(f": no such directory on {socket.gethostname()} (upload it with --sync)"), err


def test_invalid_spec_submits_nothing_though_the_remote_side_started_early(tmp_path: Path, sshd: Sshd) -> None:
    config = ssh_config(tmp_path, sshd)
    out, name = tmp_path / "out", f"never-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: {name}\nmode: mpi\nnodes: 1\ncommand: 'true'\ntime: soon\noutput_dir: {out}\n")
    err = one_line_error(cli(tmp_path, "submit", str(spec), "--host", "login", "--ssh-config", str(config)))
    assert err.startswith("ti-slurm: error: time: 'soon'")
    assert not out.exists()
    assert name not in subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("door", ["sbatch here", "over ssh"])
def test_a_full_output_dir_is_refused_and_nothing_is_submitted(
    tmp_path: Path, sshd: Sshd, small_disk: SmallDisk, door: str
) -> None:
    """Submitted, the job could not write its records and would end UNKNOWN: refused at submit instead."""
    disk, name = small_disk("256k", full=True), f"full-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: {name}\nmode: mpi\nnodes: 1\ncommand: 'true'\noutput_dir: {disk / 'jobs'}\n")
    remote = ["--host", "login", "--ssh-config", str(ssh_config(tmp_path, sshd))] if door == "over ssh" else []
    res = cli(tmp_path, "submit", str(spec), *remote)
    assert res.returncode == 2, res.stderr
    err = one_line_error(res)
    assert err.startswith("ti-slurm: error: output_dir: '") and ": its filesystem has 0 KiB free" in err, err
    assert "nothing was submitted" in err
    assert name not in subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True, check=True).stdout


def test_a_job_python_without_ti_slurm_on_the_login_is_refused_before_submitting(tmp_path: Path, sshd: Sshd) -> None:
    config = ssh_config(tmp_path, sshd)
    out, name = tmp_path / "out", f"never-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "job.yaml"
    for python, says in [
        ("/usr/bin/python3", "cannot import ti-slurm (ModuleNotFoundError: No module named 'ti_slurm')"),
        ("/nonexistent/python3", "cannot import ti-slurm (sh: 1: /nonexistent/python3: not found)"),
    ]:
        spec.write_text(f"name: {name}\nmode: mpi\nnodes: 1\ncommand: 'true'\npython: {python}\noutput_dir: {out}\n")
        err = one_line_error(cli(tmp_path, "submit", str(spec), "--host", "login", "--ssh-config", str(config)))
        assert err.startswith(f"ti-slurm: error: python: '{python}': the job's Python on login {says}"), err
        assert "set the spec's python:" in err and err.endswith("(nothing was submitted)")
    assert not out.exists()
    assert name not in subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True, check=True).stdout


def test_a_job_that_fails_before_its_record_shows_why_over_ssh(tmp_path: Path, sshd: Sshd) -> None:
    config = ssh_config(tmp_path, sshd)
    python = tmp_path / "python3"  # fine on the login node; in the job, a module system that is not loaded
    python.write_text(
        '#!/bin/sh\nif [ -n "$SLURM_JOB_ID" ]; then\n'
        '  echo "module: python/3.11 is not loaded on this node" >&2; exit 1\nfi\n'
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    spec = tmp_path / "job.yaml"
    spec.write_text(f"mode: mpi\nnodes: 1\ncommand: 'true'\npython: {python}\noutput_dir: {tmp_path / 'out'}\n")
    res = cli(tmp_path, "submit", str(spec), "--host", "login", "--ssh-config", str(config), "--wait")
    assert res.returncode == 1, res.stderr
    job = res.stdout.split()[0]
    assert f"its batch output: {tmp_path / 'out'}/slurm-{job}.out" in res.stderr
    assert "  | module: python/3.11 is not loaded on this node\n" in res.stderr, res.stderr
    shown = cli(tmp_path, "status", job, "--ssh-config", str(config))
    assert shown.returncode == 0 and "  | module: python/3.11 is not loaded on this node" in shown.stdout


def test_sync_skips_what_is_not_a_regular_file_and_a_remote_refusal_is_one_line(tmp_path: Path, sshd: Sshd) -> None:
    config = ssh_config(tmp_path, sshd)
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    (code / ".#train.py").symlink_to("root@host.1234:1700000000")  # an editor's lock: a link to nowhere
    os.mkfifo(code / "pipe")  # reading it would hang
    remote = tmp_path / "remote"
    spec = tmp_path / "job.yaml"
    spec.write_text(f"mode: mpi\nnodes: 1\ncommand: 'true'\nremote: {{host: login, workdir: {remote}}}\n")
    res = cli(tmp_path, "submit", str(spec), "--ssh-config", str(config), "--sync", str(code), "--wait")
    assert res.returncode == 0, res.stderr
    assert "--sync skipped what is not a readable regular file: " in res.stderr and ".#train.py" in res.stderr
    assert sorted(p.name for p in remote.iterdir() if p.is_file()) == ["train.py"]
    frozen = tmp_path / "frozen"  # a remote workdir that cannot be written: a file where a directory goes
    frozen.write_text("")
    spec.write_text(f"mode: mpi\nnodes: 1\ncommand: 'true'\nremote: {{host: login, workdir: {frozen}/sub}}\n")
    err = one_line_error(cli(tmp_path, "submit", str(spec), "--ssh-config", str(config), "--sync", str(code)))
    assert "--sync: cannot write" in err and str(frozen) in err, err


def test_remote_cancel_leaves_nothing(tmp_path: Path, sshd: Sshd) -> None:
    config = ssh_config(tmp_path, sshd)
    marker = f"sleep 7{uuid.uuid4().int % 1000:03d}"
    spec = tmp_path / "job.yaml"
    spec.write_text(f"mode: mpi\nnodes: 2\ncommand: {marker}\noutput_dir: {tmp_path / 'out'}\n")
    res = cli(tmp_path, "submit", str(spec), "--host", "login", "--ssh-config", str(config))
    job = res.stdout.split()[0]
    deadline = time.monotonic() + 60
    while len(processes_matching(marker)) < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert cli(tmp_path, "cancel", job, "--ssh-config", str(config)).returncode == 0
    deadline = time.monotonic() + 60
    while processes_matching(marker) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert processes_matching(marker) == []
    deadline = time.monotonic() + 30  # the job's final record lands once Slurm has signalled the batch script
    listing = cli(tmp_path, "list", "--ssh-config", str(config)).stdout
    while not re.search(rf"^{job}\s+ti-slurm\s+(CANCELLED|FAILED)", listing, re.M) and time.monotonic() < deadline:
        time.sleep(0.5)
        listing = cli(tmp_path, "list", "--ssh-config", str(config)).stdout
    assert re.search(rf"^{job}\s+ti-slurm\s+CANCELLED", listing, re.M), listing


def test_unknown_host_key_is_refused_and_accept_new_records_it(tmp_path: Path, sshd: Sshd) -> None:
    config = ssh_config(tmp_path, sshd, known_hosts="")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"mode: mpi\nnodes: 1\ncommand: 'true'\noutput_dir: {tmp_path / 'out'}\n")
    err = one_line_error(cli(tmp_path, "submit", str(spec), "--host", "login", "--ssh-config", str(config)))
    assert "not in known_hosts" in err and "--accept-new-host-key" in err
    ok = cli(tmp_path, "submit", str(spec), "--host", "login", "--ssh-config", str(config), "--accept-new-host-key")
    assert ok.returncode == 0, ok.stderr
    assert sshd.host_pub.split()[1] in (tmp_path / "known_hosts").read_text()


def test_changed_host_key_is_refused_even_with_accept_new(tmp_path: Path, sshd: Sshd) -> None:
    other = keygen(tmp_path / "otherkey").split()
    config = ssh_config(tmp_path, sshd, known_hosts=f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    err = one_line_error(
        cli(tmp_path, "status", "123", "--host", "login", "--ssh-config", str(config), "--accept-new-host-key")
    )
    assert "CHANGED" in err


def test_auth_failure_is_one_line(tmp_path: Path, sshd: Sshd) -> None:
    stranger = tmp_path / "stranger"
    keygen(stranger)
    config = ssh_config(tmp_path, sshd)
    config.write_text(config.read_text().replace(str(sshd.user_key), str(stranger)))
    err = one_line_error(cli(tmp_path, "status", "1", "--host", "login", "--ssh-config", str(config)))
    assert "authentication failed for root@127.0.0.1" in err


def test_unreachable_host_is_one_line(tmp_path: Path) -> None:
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    number = port.getsockname()[1]
    port.close()
    err = one_line_error(cli(tmp_path, "status", "1", "--host", f"root@127.0.0.1:{number}"))
    assert f"cannot reach root@127.0.0.1:{number}" in err


def test_server_that_never_sends_a_banner_times_out(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True).start()
    start = time.monotonic()
    err = one_line_error(cli(tmp_path, "status", "1", "--host", f"root@127.0.0.1:{listener.getsockname()[1]}"))
    assert time.monotonic() - start < 30
    assert "banner" in err.lower() or "timed out" in err
    listener.close()


def test_missing_sbatch_and_rejected_job_are_one_line(tmp_path: Path, sshd: Sshd) -> None:
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    for tool in ("sh", "mkdir", "cat", "python3"):  # a login node with ti-slurm's Python but no Slurm
        (bare / tool).symlink_to(subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip())
    no_slurm = start_sshd(tmp_path / "sshd2", str(bare), user_key=sshd.user_key)
    try:
        config = ssh_config(tmp_path, no_slurm)
        spec = tmp_path / "job.yaml"
        spec.write_text(f"mode: mpi\nnodes: 1\ncommand: 'true'\noutput_dir: {tmp_path / 'out'}\n")
        err = one_line_error(cli(tmp_path, "submit", str(spec), "--host", "login", "--ssh-config", str(config)))
        # the first Slurm command the remote half runs names what is missing (sinfo for the fit check, or sbatch)
        missing = r"ti-slurm: error: (sinfo|sbatch) is not installed on 127\.0\.0\.1 \(is it a Slurm login node\?\)"
        assert re.fullmatch(missing, err), err
    finally:
        no_slurm.stop()
    config = ssh_config(tmp_path, sshd)
    spec.write_text(f"mode: mpi\nnodes: 1\npartition: nosuch\ncommand: 'true'\noutput_dir: {tmp_path / 'out'}\n")
    err = one_line_error(cli(tmp_path, "submit", str(spec), "--host", "login", "--ssh-config", str(config)))
    assert err == (  # the partitions came from the waiting remote half: nothing was sent to sbatch
        "ti-slurm: error: the job can never start: partition 'nosuch' does not exist "
        f"(partitions: {slurm_partitions()}) (nothing was submitted)"
    )
    spec.write_text(f"mode: mpi\nnodes: 1\nsbatch: {{constraint: nosuch}}\ncommand: 'true'\noutput_dir: {tmp_path}\n")
    err = one_line_error(cli(tmp_path, "submit", str(spec), "--host", "login", "--ssh-config", str(config)))
    assert "sbatch failed" in err and "Invalid feature" in err


def test_proxy_jump_is_honoured(tmp_path: Path, sshd: Sshd) -> None:
    from ti_slurm.transports.ssh import SSHSession, parse_target

    config = ssh_config(tmp_path, sshd)
    with SSHSession(parse_target("viajump", str(config)), config_path=str(config)) as session:
        assert session._jump is not None
        assert session.run(["echo", "through the jump host"]).stdout == "through the jump host\n"


def test_large_outputs_do_not_deadlock(tmp_path: Path, sshd: Sshd) -> None:
    from ti_slurm.transports.ssh import SSHSession, parse_target

    config = ssh_config(tmp_path, sshd)
    with SSHSession(parse_target("login", str(config))) as session:
        res = session.run(["sh", "-c", "head -c 3000000 /dev/zero; head -c 3000000 /dev/zero >&2; exit 3"])
    assert (res.stdout.count("\0"), res.stderr.count("\0"), res.returncode) == (3000000, 3000000, 3)


def test_dropped_connection_after_sbatch_does_not_submit_twice(tmp_path: Path, sshd: Sshd) -> None:
    from ti_slurm.backends.ssh import SSHBackend
    from ti_slurm.core.errors import BackendError
    from ti_slurm.submitting.planning import make_plan
    from ti_slurm.submitting.script import render
    from ti_slurm.submitting.spec import parse_spec
    from ti_slurm.transports.ssh import SSHSession, parse_target

    class DropsAfterSbatch(SSHSession):
        dropped = False

        def finish(self, channel, argv, stdin):  # type: ignore[no-untyped-def]
            res = super().finish(channel, argv, stdin)
            if "sbatch" in argv and not self.dropped:
                self.dropped = True  # sbatch accepted the job, then the link went down
                raise BackendError(f"connection to {self.target} dropped: EOF")
            return res

    config = ssh_config(tmp_path, sshd)
    tag = uuid.uuid4().hex[:16]
    spec = parse_spec({"mode": "mpi", "nodes": 1, "command": "sleep 30", "output_dir": str(tmp_path / "out")})
    plan = make_plan(spec, python="python3", submission=tag)
    backend = SSHBackend(DropsAfterSbatch(parse_target("login", str(config))))
    info = backend.submit(plan, render(plan))
    queued = subprocess.run(["squeue", "-h", "-o", "%i %k"], capture_output=True, text=True, check=True).stdout
    mine = [line.split()[0] for line in queued.splitlines() if line.endswith(f"ti-slurm:{tag}")]
    assert mine == [info.job_id]
    subprocess.run(["scancel", info.job_id], check=True)


# -- login nodes that ask for a one-time code after the key --------------------
@pytest.fixture(scope="module")
def mfa_login(worker_id: str) -> Iterator[tuple[str, str, Sshd]]:
    """A user with a password, behind an sshd that wants the key *and* PAM's prompt. One user per xdist
    worker: each worker sets up this fixture for itself, and a shared user's password would be the last
    worker's, refusing the other's code."""
    user, secret = f"tismfa-{worker_id}", f"otp-{uuid.uuid4().hex[:12]}"
    if subprocess.run(["id", user], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--home-dir", "/tmp", "--shell", "/bin/sh", user], check=True)
    subprocess.run(["chpasswd"], input=f"{user}:{secret}\n", text=True, check=True)
    folder = Path(tempfile.mkdtemp(prefix="ti-slurm-mfa-"))  # readable by the user: sshd reads its keys as them
    folder.chmod(0o755)
    server = start_sshd(folder, LOGIN_PATH, second_factor=True)
    (folder / "authorized_keys").chmod(0o644)
    yield user, secret, server
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


def run_on_terminal(args: list[str], env: dict[str, str], answer: str) -> tuple[int, str, str, str]:
    """Run the CLI with a pseudo-terminal as its controlling terminal; type ``answer`` at the first prompt.

    Returns (exit code, stdout, stderr, what appeared on the terminal).
    """
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()

    def take_terminal() -> None:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        args,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        pass_fds=(slave,),
        preexec_fn=take_terminal,  # the child must own the pty for /dev/tty to reach it
    )
    os.close(slave)
    screen, answered = b"", False
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                screen += os.read(master, 4096)
            except OSError:
                break
        if not answered and b"Password:" in screen:
            os.write(master, answer.encode() + b"\n")
            answered = True
    out, err = proc.communicate(timeout=30)
    os.close(master)
    return proc.returncode, out, err, screen.decode(errors="replace")


def test_second_factor_is_asked_on_the_terminal_with_echo_off(tmp_path: Path, mfa_login) -> None:
    user, secret, server = mfa_login
    config = ssh_config(tmp_path, server)
    env = cli_env(tmp_path)
    argv = ["ti-slurm", "status", "999999", "--host", f"{user}@login", "--ssh-config", str(config)]
    code, out, err, screen = run_on_terminal(argv, env, secret)
    assert "not queued and no record of it" in err, err  # logged in: the remote squeue answered
    assert "Password:" in screen and secret not in screen  # asked on the terminal, typed without echo
    assert out == ""  # stdout stays the command's own output

    code, out, err, screen = run_on_terminal(argv, env, "wrong-code")
    assert code != 0 and "Traceback" not in err
    assert "accepted the key but refused the second factor" in err.strip().splitlines()[-1]


def test_second_factor_without_a_terminal_is_one_line(tmp_path: Path, mfa_login) -> None:
    user, _, server = mfa_login
    config = ssh_config(tmp_path, server)
    res = subprocess.run(
        ["ti-slurm", "status", "999999", "--host", f"{user}@login", "--ssh-config", str(config)],
        env={**os.environ, **cli_env(tmp_path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        start_new_session=True,  # no controlling terminal, as under cron or a CI runner
        timeout=60,
    )
    assert res.stdout == ""
    err = one_line_error(res)
    assert "asks for a second factor" in err and "no terminal" in err


def test_a_revoked_host_key_is_refused_even_when_listed(tmp_path: Path, sshd: Sshd) -> None:
    key_type, key = sshd.host_pub.split()[:2]
    config = ssh_config(tmp_path, sshd, known_hosts=sshd.known_hosts_line() + f"@revoked * {key_type} {key}\n")
    for extra in ((), ("--accept-new-host-key",)):
        err = one_line_error(cli(tmp_path, "status", "123", "--host", "login", "--ssh-config", str(config), *extra))
        assert "@revoked" in err


def test_cert_authority_lines_are_read_as_openssh_reads_them(tmp_path: Path, sshd: Sshd) -> None:
    ca_type, ca_key = keygen(tmp_path / "ca").split()[:2]
    ca_line = f"@cert-authority *.example.org {ca_type} {ca_key}\n"
    config = ssh_config(tmp_path, sshd, known_hosts=ca_line + sshd.known_hosts_line())
    res = cli(tmp_path, "status", "999999999", "--host", "login", "--ssh-config", str(config))
    assert res.returncode == 2 and "job 999999999: not queued" in res.stderr  # connected: squeue answered
    config = ssh_config(tmp_path, sshd, known_hosts=ca_line)  # only the CA: the host's own key is unknown
    err = one_line_error(cli(tmp_path, "status", "1", "--host", "login", "--ssh-config", str(config)))
    assert "@cert-authority" in err


def test_a_proxy_jump_loop_is_one_line(tmp_path: Path, sshd: Sshd) -> None:
    config = ssh_config(tmp_path, sshd, extra="\nHost *\n  ProxyJump viajump\n")
    err = one_line_error(cli(tmp_path, "status", "1", "--host", "login", "--ssh-config", str(config)))
    assert "ProxyJump loops" in err and "login -> viajump -> login" in err


def test_submit_with_a_relative_output_dir_and_workdir_runs(tmp_path: Path, sshd: Sshd) -> None:
    """The job directory is absolute in the script, though the command runs in another directory."""
    config = ssh_config(tmp_path, sshd)
    remote = tmp_path / "remote"
    (remote / "code").mkdir(parents=True)
    spec = tmp_path / "job.yaml"
    spec.write_text(f"mode: mpi\nnodes: 1\ncommand: pwd\nworkdir: code\nremote: {{host: login, workdir: {remote}}}\n")
    # the default output_dir is relative: ti-slurm-jobs below remote.workdir
    res = cli(tmp_path, "submit", str(spec), "--ssh-config", str(config), "--wait")
    assert res.returncode == 0, res.stderr
    job = res.stdout.split()[0]
    assert cli(tmp_path, "logs", job, "--node", "0", "--ssh-config", str(config)).stdout == f"{remote / 'code'}\n"
    assert oct((remote / "ti-slurm-jobs" / job).stat().st_mode & 0o777) == "0o700"


def test_following_logs_over_ssh_reads_only_what_was_appended(
    tmp_path: Path, sshd: Sshd, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ti_slurm

    config = ssh_config(tmp_path, sshd)
    (tmp_path / "writer.py").write_text(
        "import time\nfor i in range(6):\n"
        "    print((f'{i}' * 99 + chr(10)) * 5_000, end='', flush=True)\n    time.sleep(0.5)\n"
    )
    spec = {"mode": "ddp", "nodes": 1, "command": f"python3 {tmp_path / 'writer.py'}", "output_dir": str(tmp_path)}
    monkeypatch.setenv("SSH_AUTH_SOCK", "")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    job = ti_slurm.submit(spec, host="login", ssh_config=str(config))
    session = job.backend.session  # type: ignore[attr-defined]
    read: list[int] = []
    original = session.read_bytes

    def counting(path: str, offset: int = 0, size: int | None = None) -> bytes | None:
        data = original(path, offset, size)
        read.append(len(data or b""))
        return data

    session.read_bytes = counting
    lines = list(job.logs(node="0", follow=True))
    size = (tmp_path / job.id / "logs" / "ddp-0.log").stat().st_size
    assert size == 6 * 5_000 * 100 and len(lines) == 30_000
    assert len(read) > 2 and sum(read) <= size * 1.05 and max(read) <= LOG_CHUNK  # a chunk at a time


def test_a_sweep_over_ssh_runs_every_point_and_status_list_reach_it(tmp_path: Path, sshd: Sshd) -> None:
    config = ssh_config(tmp_path, sshd)
    remote = tmp_path / "remote"
    (remote / "marks").mkdir(parents=True)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: ssh-sweep\nmode: ddp\nnodes: 2\n"
        'command: echo {lr} "$TI_SLURM_PARAMS" > marks/$TI_SLURM_SWEEP_POINT-$RANK\n'
        f"remote: {{host: login, workdir: {remote}}}\n"
    )
    grid = ("--param", "lr=0.1,a b", "--param", "batch=32,64", "--max-parallel", "2")
    res = cli(tmp_path, "sweep", str(spec), *grid, "--ssh-config", str(config))
    assert res.returncode == 0 and "4 points as one job array" in res.stderr, res.stderr
    sweep = res.stdout.strip()
    waited = cli(tmp_path, "wait", sweep, "--ssh-config", str(config))  # from a later login, say
    assert waited.returncode == 0 and f"sweep {sweep}  ssh-sweep  4 points: 4 COMPLETED" in waited.stderr, waited
    marks = {p.name: p.read_text() for p in (remote / "marks").iterdir()}
    points = [("0.1", "32"), ("0.1", "64"), ("a b", "32"), ("a b", "64")]
    assert sorted(marks) == [f"{k}-{rank}" for k in range(4) for rank in "01"], marks
    for k, (lr, batch) in enumerate(points):
        assert marks[f"{k}-1"] == f'{lr} {{"batch":"{batch}","lr":"{lr}"}}\n'  # 'a b' stayed one word
    table = cli(tmp_path, "status", sweep, "--ssh-config", str(config)).stdout
    assert table.splitlines()[0] == f"sweep {sweep}  ssh-sweep  4 points: 4 COMPLETED", table
    listing = cli(tmp_path, "list", "--ssh-config", str(config)).stdout
    assert re.search(rf"^{sweep}\s+ssh-sweep\s+SWEEP\s+4 points: 4 COMPLETED$", listing, re.M), listing


def test_a_sweep_cancelled_over_ssh_stops_every_point(tmp_path: Path, sshd: Sshd) -> None:
    config = ssh_config(tmp_path, sshd)
    marker = f"sleep 6{uuid.uuid4().int % 1000:03d}"
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: ssh-sweep\nmode: ddp\nnodes: 1\ncommand: '{marker}  # {{lr}}'\n")
    res = cli(tmp_path, "sweep", str(spec), "--host", "login", "--ssh-config", str(config), "--param", "lr=1,2,3")
    assert res.returncode == 0, res.stderr
    sweep = res.stdout.strip()
    deadline = time.monotonic() + 90
    while not processes_matching(marker) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert cli(tmp_path, "cancel", sweep, "--ssh-config", str(config)).returncode == 0
    deadline = time.monotonic() + 90
    table = cli(tmp_path, "status", sweep, "--ssh-config", str(config)).stdout
    while "3 CANCELLED" not in table.splitlines()[0] and time.monotonic() < deadline:
        time.sleep(1)
        table = cli(tmp_path, "status", sweep, "--ssh-config", str(config)).stdout
    assert table.splitlines()[0] == f"sweep {sweep}  ssh-sweep  3 points: 3 CANCELLED", table
    assert processes_matching(marker) == []
