"""A real OpenSSH server on a loopback port, with throwaway host and user keys (for tests)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


@dataclass
class Sshd:
    dir: Path
    port: int
    host_pub: str
    user_key: Path
    proc: subprocess.Popen[bytes]

    def known_hosts_line(self) -> str:
        kind, key = self.host_pub.split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {key}\n"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def start_sshd(folder: Path, path_env: str, user_key: Path | None = None, second_factor: bool = False) -> Sshd:
    """Start sshd on 127.0.0.1; sessions get PATH=path_env (like a login node's profile).

    Sessions also get a home of their own (``folder/home``), so the machine's root dotfiles stay out:
    bash runs ``~/.bashrc`` for every command over SSH, and a CI machine's (pyenv's init, whose
    rehash waits 60 s on a stale lock) made every login wait past ti-slurm's timeouts.

    ``second_factor``: after the key, users also answer PAM's prompt (keyboard-interactive),
    as on login nodes with one-time codes.
    """
    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        raise RuntimeError("openssh-server is not installed")
    folder.mkdir(parents=True, exist_ok=True)
    host_pub = keygen(folder / "hostkey")
    if user_key is None:
        user_key = folder / "userkey"
        keygen(user_key)
    (folder / "authorized_keys").write_text(user_key.with_suffix(".pub").read_text())
    port = free_port()
    (folder / "home").mkdir(exist_ok=True)
    # the login talks to the test cluster this process talks to (two may be up: ci/slurm-cluster/env)
    cluster_env = "".join(f" {k}={os.environ[k]}" for k in ("SLURM_CONF", "TI_SLURM_CONFIG") if k in os.environ)
    (folder / "sshd_config").write_text(
        f"""Port {port}
ListenAddress 127.0.0.1
HostKey {folder / "hostkey"}
PidFile {folder / "sshd.pid"}
AuthorizedKeysFile {folder / "authorized_keys"}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication {"yes" if second_factor else "no"}
UsePAM {"yes" if second_factor else "no"}
AuthenticationMethods {"publickey,keyboard-interactive" if second_factor else "publickey"}
StrictModes no
AllowAgentForwarding no
AllowTcpForwarding yes
SetEnv PATH={path_env} HOME={folder / "home"}{cluster_env}
Subsystem sftp internal-sftp
"""
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    with open(folder / "sshd.log", "wb") as log:
        proc = subprocess.Popen(
            ["/usr/sbin/sshd", "-D", "-e", "-f", str(folder / "sshd_config")], stdout=subprocess.DEVNULL, stderr=log
        )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return Sshd(folder, port, host_pub, user_key, proc)


# a login node's PATH: this Python's scripts, the Slurm commands this process uses (the test cluster's:
# ci/slurm-cluster/env), then the system's
_SLURM_BIN = Path(shutil.which("sbatch") or "/usr/bin/sbatch").parent
_SYSTEM_PATH = ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"]
LOGIN_PATH = ":".join(dict.fromkeys([str(Path(sys.executable).parent), str(_SLURM_BIN), *_SYSTEM_PATH]))


def ssh_config(tmp: Path, server: Sshd, known_hosts: str | None = None, extra: str = "") -> Path:
    """An ssh_config in ``tmp`` naming ``server`` as ``login`` (and as ``viajump``, through ``login``), its
    host key known (or ``known_hosts`` as given), and ``extra`` lines after."""
    known = tmp / "known_hosts"
    known.write_text(server.known_hosts_line() if known_hosts is None else known_hosts)
    config = tmp / "ssh_config"
    config.write_text(
        f"""Host login
  HostName 127.0.0.1
  Port {server.port}
  User root
  IdentityFile {server.user_key}
  UserKnownHostsFile {known}

Host viajump
  HostName 127.0.0.1
  Port {server.port}
  User root
  IdentityFile {server.user_key}
  UserKnownHostsFile {known}
  ProxyJump login
{extra}"""
    )
    return config
