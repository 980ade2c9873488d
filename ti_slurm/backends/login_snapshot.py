"""The login node's half of an SSH submit with ``code:``: take the snapshot of what ``--sync`` uploaded,
render the script from the plan it completes, and hand it to ``sbatch`` (one round trip, as any submit).

``python -m ti_slurm.backends.login_snapshot sbatch ARGS...`` reads a request (:func:`request`) on its
input. A code directory it cannot take (missing, too big) is refused with one marked line on stderr,
which the submitting side turns back into the spec's error (:func:`refusal`); nothing is submitted.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from ti_slurm.core.errors import SpecError
from ti_slurm.core.plan import JobPlan

REFUSED = "ti-slurm-code-refused "  # the marker of a refusal on stderr, then JSON: field, value, why


def request(plan: JobPlan, code_ignore: tuple[str, ...]) -> str:
    """The input for :func:`main`: the plan and what of its code to leave out, one line of JSON."""
    return json.dumps({"plan": plan.to_json(), "ignore": list(code_ignore)})


def refusal(stderr: str) -> SpecError | None:
    """The spec's error a login node's refusal stands for, if ``stderr`` holds one."""
    for line in stderr.splitlines():
        if line.startswith(REFUSED):
            found = json.loads(line.removeprefix(REFUSED))
            return SpecError(found["field"], found["value"], found["why"])
    return None


def refuse(exc: SpecError) -> int:
    print(REFUSED + json.dumps({"field": exc.field, "value": exc.value, "why": exc.why}, default=str), file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    from ti_slurm.submitting.packager import snapshot_plan
    from ti_slurm.submitting.script import render

    asked = json.loads(sys.stdin.read())
    plan = JobPlan.from_json(asked["plan"])
    try:
        if not os.path.isdir(plan.code_dir):
            raise SpecError(
                "code", plan.code_dir, f"no such directory on {socket.gethostname()} (upload it with --sync)"
            )
        plan = snapshot_plan(plan, plan.code_dir, tuple(asked["ignore"]))
    except OSError as exc:  # a store it cannot write, a full disk: refused the same way
        return refuse(SpecError("code", plan.code_dir, f"cannot snapshot it on {socket.gethostname()}: {exc}"))
    except SpecError as exc:
        return refuse(exc)
    return subprocess.run(argv, input=render(plan), text=True, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
