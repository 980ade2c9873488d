"""The launch agent reads ssh command lines as OpenSSH does."""

from __future__ import annotations

import pytest

from ti_slurm.core.errors import AgentError
from ti_slurm.job.agent import parse_ssh_args


@pytest.mark.parametrize(
    "argv,host,words",
    [
        (["node02", "hostname"], "node02", ["hostname"]),
        (["-oStrictHostKeyChecking=no", "-p", "12345", "10.0.0.2", "orted", "-x"], "10.0.0.2", ["orted", "-x"]),
        # horovodrun's own line puts -p and -i after the host
        (["10.0.0.2", "-p", "22", "-i", "/root/.ssh/id", "cd /x && python t.py"], "10.0.0.2", ["cd /x && python t.py"]),
        (["-q", "me@node01", "-tt", "-oBatchMode=yes", "true"], "node01", ["true"]),
        (["-p22", "node03", "-l", "me", "--", "-weird", "arg"], "node03", ["-weird", "arg"]),
        (["node04"], "node04", []),
    ],
)
def test_options_before_and_after_the_host(argv: list[str], host: str, words: list[str]) -> None:
    assert parse_ssh_args(argv) == (host, words)


def test_no_host_is_one_line() -> None:
    with pytest.raises(AgentError, match="no host given"):
        parse_ssh_args(["-p", "22"])
