"""The launch agent inside a training image: ``ssh`` without ti-slurm in the image.

Open MPI's ``mpirun`` (and ``horovodrun``, and a plain ``ssh <ip> cmd``) inside
the image calls ``ssh``, first on ``PATH``. On a bare node that is ti-slurm's
launch agent (:mod:`ti_slurm.job.agent`), which needs ti-slurm's Python and
``srun``; neither is in the image. So in a container the agent directory holds
a bash script instead (:data:`CLIENT`) that hands its command line to this
node's step, outside the image, over a TCP connection on 127.0.0.1 (the image
shares the host's network), proven by a secret only the job's processes hold
(``TI_SLURM_AGENT_RELAY``, never on a command line). The step runs the real
agent with it, which runs the command on the target node inside that node's
image (``main.py in-image``), and streams its output back; the exit code goes
through the job directory, which both sides see at the same path.
"""

from __future__ import annotations

import os

from ti_slurm.core.files import write_atomic
from ti_slurm.job.process import exit_code

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    import socket
    from collections.abc import Mapping

# Run inside the image by mpirun & co. as `ssh ARGS...`: bash only (its /dev/tcp), nothing of ti-slurm.
CLIENT = r"""#!/bin/bash
# ti-slurm's launch agent inside a training image: this node's ti-slurm step (outside the image)
# runs the ssh command line on the job's node, in that node's image.
IFS=: read -r addr port secret <<< "${TI_SLURM_AGENT_RELAY:-}"
if [[ -z $secret ]] || ! exec 3<>"/dev/tcp/$addr/$port"; then
  echo "ti-slurm-ssh: no launch agent relay on this node (TI_SLURM_AGENT_RELAY)" >&2; exit 255
fi
id="$HOSTNAME.$$.$RANDOM$RANDOM"
{ printf '%s\n%s\n%s\n' "$secret" "$id" "$#"; printf '%s\0' "$@"; } >&3
cat <&3
# builtins only from here: the image's files may be gone once the command that called this has ended
read -r rc 2>/dev/null < "$TI_SLURM_AGENT_DIR/rc.$id" || rc=255
exit "$rc"
"""


class Relay:
    """This node's end: accepts the image's agent calls and runs ti-slurm's agent for each."""

    def __init__(self, agent_argv: list[str], env: Mapping[str, str], agent_dir: str, node: str) -> None:
        import secrets
        import socket

        self.agent_argv, self.agent_dir = agent_argv, agent_dir
        self.env = dict(env) | {"TI_SLURM_AGENT_IN_IMAGE": "1"}  # the agent runs the command in the target's image
        self.secret = secrets.token_hex(16)
        self.server = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}:{self.secret}"
        # for commands the agent starts on this node (Open MPI's daemons, which may start others: tree spawn)
        write_atomic(relay_file(agent_dir, node), self.address + "\n", 0o600)

    def start(self) -> None:
        import threading

        threading.Thread(target=self._serve, name="ti-slurm-agent-relay", daemon=True).start()

    def _serve(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        import subprocess

        with conn:
            request = read_request(conn.makefile("rb"))
            if request is None or request[0] != self.secret:
                return
            _, ident, args = request
            proc = subprocess.Popen(
                [*self.agent_argv, *args],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            out = proc.stdout
            assert out is not None
            try:
                for chunk in iter(lambda: os.read(out.fileno(), 65536), b""):
                    conn.sendall(chunk)
            except OSError:  # the caller went away: its command goes too
                proc.terminate()
            write_atomic(os.path.join(self.agent_dir, f"rc.{ident}"), f"{exit_code(proc.wait())}\n")


def relay_file(agent_dir: str, node: str) -> str:
    """Where node ``node``'s relay address (with its secret) is, in the job's private directory."""
    return os.path.join(agent_dir, f"relay.{node}")


def node_relay(agent_dir: str, node: str) -> str | None:
    """Node ``node``'s relay address, if its step runs one."""
    try:
        with open(relay_file(agent_dir, node)) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def read_request(stream: object) -> tuple[str, str, list[str]] | None:
    """(secret, call id, ssh arguments) as the client sends them; None when malformed."""
    readline = stream.readline  # type: ignore[attr-defined]
    secret, ident, count = (readline(4096).decode(errors="replace").strip() for _ in range(3))
    if not count.isdigit() or not ident or "/" in ident or int(count) > 4096:
        return None
    args = []
    for _ in range(int(count)):
        word = bytearray()
        while (ch := stream.read(1)) not in (b"\0", b""):  # type: ignore[attr-defined]
            word += ch
        args.append(word.decode(errors="surrogateescape"))
    return secret, ident, args
