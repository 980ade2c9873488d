"""SSH targets from ~/.ssh/config, including `Match exec`, which needs paramiko's (deferred) invoke."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ti_slurm.core.errors import ConfigError

pytest.importorskip("paramiko", reason="the ssh extra is not installed (pip install 'ti-slurm[ssh]')")
from ti_slurm.transports.ssh import parse_target


def test_host_block_and_match_exec_apply(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        'Match exec "test -e /"\n  User fromexec\n\n'
        "Host login\n  HostName 10.1.2.3\n  Port 2222\n  IdentityFile ~/.ssh/id_x\n  ProxyJump bastion\n"
    )
    probe = (  # in a process of its own, as the CLI: invoke forwards stdin, which pytest captures
        "from ti_slurm.transports.ssh import parse_target as p; "
        f"t = p('login', {str(config)!r}); print(t.host, t.port, t.user, t.proxy_jump, t.identity_files[0]); "
        f"print(p('me@login:2200', {str(config)!r}).user)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL
    ).stdout.split()
    assert out[:4] == ["10.1.2.3", "2222", "fromexec", "bastion"]
    assert out[4].endswith("/.ssh/id_x") and out[5] == "me"


def test_invoke_is_imported_only_when_an_ssh_config_needs_it(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host login\n  HostName 10.1.2.3\n")
    probe = (
        "import sys; from ti_slurm.transports.ssh import parse_target; "
        f"parse_target('login', {str(config)!r}); "
        "print(type(sys.modules['invoke']).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "Deferred"


@pytest.mark.parametrize("text", ["", "a b", "user@", "host:99999"])
def test_bad_target_is_one_clear_error(text: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="host"):
        parse_target(text, str(tmp_path / "none"))


def test_a_port_that_is_no_number_is_one_error(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host login\n  HostName 10.1.2.3\n  Port notanumber\n")
    with pytest.raises(ConfigError, match="port 'notanumber': expected 1-65535"):
        parse_target("login", str(config))


def test_proxy_jump_none_means_no_jump(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host login\n  ProxyJump none\n\nHost *\n  ProxyJump bastion\n")
    assert parse_target("login", str(config)).proxy_jump is None
    assert parse_target("other", str(config)).proxy_jump == "bastion"
