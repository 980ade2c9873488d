"""SSH backend: the Slurm backend over the SSH transport (:mod:`ti_slurm.transports.ssh`), with a submit in
one round trip: the remote half starts first and waits for its input while the spec is planned here."""

from __future__ import annotations

import contextlib
import subprocess
from typing import Any

from ti_slurm.backends.base import MIN_FREE_KIB, JobInfo, full_output_dir
from ti_slurm.backends.slurm import SBATCH_ARGV, SlurmBackend, checked_stdout, refuse_unfit
from ti_slurm.core.environ import KEPT, LEAKING_PREFIXES
from ti_slurm.core.errors import BackendError, SpecError, SubmissionError
from ti_slurm.core.plan import JobPlan
from ti_slurm.slurm.request import submission_comment
from ti_slurm.slurm.text import PARTITIONS_FORMAT, parse_job_id
from ti_slurm.transports.ssh import SSHSession

FULL_MARK = "ti-slurm-output-dir-full"  # the remote half's word that the output directory has no room
SINFO_END = "--ti-slurm-sinfo-end--"  # the remote submit's marker after the partitions
PYTHON_END = "--ti-slurm-python-end--"  # ... and after what the job's Python said of ti-slurm
# run by the job's Python on the login node before anything is submitted: the plan version of its
# ti-slurm (which must import; before 0.2 the plan lived in ti_slurm.job.plan)
PYTHON_PROBE = (
    "import importlib, importlib.util as u; print('ti-slurm-plan', importlib.import_module("
    "'ti_slurm.core.plan' if u.find_spec('ti_slurm.core') else 'ti_slurm.job.plan').PLAN_VERSION)"
)
LEAKING = "|".join(LEAKING_PREFIXES)  # job_environment's rule, as the remote shell's grep patterns
KEPT_HERE = "|".join(sorted(KEPT))


class SSHBackend(SlurmBackend):
    """The Slurm backend with every command sent over one SSH session."""

    name = "ssh"

    def __init__(self, session: SSHSession) -> None:
        super().__init__(session)
        self.session = session

    def submit(self, plan: JobPlan, script: str, check_fit: bool = True) -> JobInfo:
        """Create the output directory and sbatch the script from stdin: one round trip."""
        return self.finish_submit(self.begin_submit(plan.submission, plan.python), plan, script, check_fit)

    def submit_argv(self, python: str) -> list[str]:
        """The remote half of a submit: a shell that tells the partitions and what the job's Python
        says of ti-slurm, then waits for its input.

        It prints ``sinfo``'s partitions, a marker line, the last lines of ``python``
        running :data:`PYTHON_PROBE` and another marker at once (they arrive while the
        spec is planned here). The input is the output directory on one line, then
        ``script`` or ``snapshot`` on one line, then the script, or the plan and the code
        to take (:mod:`ti_slurm.backends.login_snapshot`): the shell makes the directory
        and hands the rest of its input to ``sbatch``, or to the job's Python, which
        takes the snapshot, renders the script and hands it to ``sbatch``. Closed
        without input (an invalid spec, a job that can never start, a Python without
        ti-slurm), it submits nothing.
        """
        script = (
            # the login's own SLURM_*, SBATCH_*... would reach the job through sbatch (SLURM_CONF stays)
            f"for v in $( (env | cut -d= -f1 | grep -E '^({LEAKING})' | grep -vxE '{KEPT_HERE}') 2>/dev/null);"
            ' do unset "$v"; done; '
            'sinfo ${1:+"$1"} -h -o "$2" 2>/dev/null; echo "$3"; "$4" -c "$5" 2>&1; echo "$6"; py=$4; shift 6; '
            'IFS= read -r dir && mkdir -p -- "$dir" && '
            # a full filesystem: said (FULL_MARK and the KiB free) and nothing submitted
            # df's 4th field, read by the shell alone: a login without awk (or df) still submits
            f'free=$(df -Pk -- "$dir" 2>/dev/null | {{ read -r _; read -r _ _ _ free _; echo "$free"; }}) && '
            f"free=${{free:-{MIN_FREE_KIB}}} && "
            f'{{ [ "$free" -ge {MIN_FREE_KIB} ] || {{ echo "{FULL_MARK} $free" >&2; exit 1; }}; }} && '
            "IFS= read -r how && "
            'if [ "$how" = snapshot ]; then exec "$py" -m ti_slurm.backends.login_snapshot "$@"; else exec "$@"; fi'
        )
        if self.fresh_partitions() is not None:  # another submit asked lately: no need to ask again
            script = script.replace('sinfo ${1:+"$1"} -h -o "$2" 2>/dev/null; ', "")
        clusters = self.command("sinfo")[1:] or [""]  # --clusters=<name>, or nothing
        head = [*clusters, PARTITIONS_FORMAT, SINFO_END, python, PYTHON_PROBE, PYTHON_END]
        return ["sh", "-c", script, "sh", *head, *self.command(*SBATCH_ARGV)]

    def answer_key(self, what: str) -> str:
        return f"{what}-{self.name}-{self.session.target.alias}{self.queue_key}"

    def begin_submit(self, submission: str, python: str) -> Any:
        """Start the remote half of a submit before the script is ready (see :meth:`finish_submit`);
        ``python`` is the job's Python, whose ti-slurm it checks."""
        return self.session.start(self.submit_argv(python))

    def close(self) -> None:
        """End the SSH session (a kept backend's, when the console stops)."""
        self.session.close()

    def upload(self, local: str, remote: str) -> int:
        from ti_slurm.transports.sync import sync_tree

        return sync_tree(self.session, local, remote)

    def abort_submit(self, channel: Any) -> None:
        """End a started submit without input: its shell exits by itself and submits nothing."""
        with contextlib.suppress(BackendError):
            self.session.finish(channel, self.submit_argv(""), None)
        self.session.close()

    def finish_submit(
        self, channel: Any, plan: JobPlan, script: str, check_fit: bool = True, code_ignore: tuple[str, ...] = ()
    ) -> JobInfo:
        """Check the job fits its partitions, send the output directory and the script (or, for code still to
        be taken, the plan: the login node snapshots it and renders the script); return the job.

        If the connection drops after sbatch may have accepted the job, look the
        job up by its submission tag before trying again, so it is never submitted twice.
        """
        if "\n" in plan.output_dir:
            raise SpecError("output_dir", plan.output_dir, "holds a newline")
        asked = self.session.read_until(channel, SINFO_END)  # empty when a fresh answer was shared
        try:
            self.check_python(plan.python, self.session.read_until(channel, PYTHON_END))
        except SpecError:
            self.abort_submit(channel)
            raise
        if check_fit:
            shared = None if asked.strip() else self.fresh_partitions()
            try:
                refuse_unfit(plan, shared, lambda: asked if asked.strip() else self.sinfo(), self.partitions_key())
            except SubmissionError:
                self.abort_submit(channel)
                raise
        argv = self.submit_argv(plan.python)
        stdin = f"{plan.output_dir}\n{submit_input(plan, script, code_ignore)}"
        try:
            answer = refused_code(self.session.finish(channel, argv, stdin), plan.output_dir)
            job_id = parse_job_id(checked_stdout(answer, "sbatch", SubmissionError))
        except BackendError as exc:
            if "dropped" not in str(exc) or not plan.submission:
                raise
            self.session.close()
            self.session.connect()
            found = self.find_by_comment(submission_comment(plan.submission))
            job_id = found or self.sbatch(argv, stdin)
        info = self._info(job_id, plan)
        info.host = self.session.target.alias
        return info

    def check_python(self, python: str, said: str) -> None:
        """Refuse a job whose Python (on the login node) cannot import ti-slurm, or a ti-slurm of another plan
        version: its batch script would fail before it could record anything."""
        from ti_slurm.core.plan import PLAN_VERSION

        lines = said.strip().splitlines()
        if lines and lines[-1] == f"ti-slurm-plan {PLAN_VERSION}":
            return
        host = self.session.target.alias
        fix = "install ti-slurm for it there, or set the spec's python: to a Python on the cluster that has it"
        if lines and lines[-1].startswith("ti-slurm-plan "):
            found = lines[-1].removeprefix("ti-slurm-plan ")
            why = f"its ti-slurm on {host} reads plan version {found}, this one writes {PLAN_VERSION}: upgrade one"
        else:
            why = f"the job's Python on {host} cannot import ti-slurm ({lines[-1] if lines else 'no answer'}); {fix}"
        raise SpecError("python", python, why + " (nothing was submitted)")


def submit_input(plan: JobPlan, script: str, code_ignore: tuple[str, ...]) -> str:
    """What the remote half reads after the output directory: the script, or the plan whose code it takes."""
    if plan.code_dir and not plan.code_tree:
        from ti_slurm.backends.login_snapshot import request

        return f"snapshot\n{request(plan, code_ignore)}"
    return f"script\n{script}"


def refused_code(res: subprocess.CompletedProcess[str], output_dir: str) -> subprocess.CompletedProcess[str]:
    """The login node's answer, unless it refused the code to take or found ``output_dir`` full: then that
    refusal, as the spec's error."""
    from ti_slurm.backends.login_snapshot import refusal

    found = refusal(res.stderr)
    if found is not None:
        raise found
    for line in res.stderr.splitlines():
        mark, _, free = line.partition(" ")
        full = full_output_dir(output_dir, int(free)) if mark == FULL_MARK and free.isdigit() else None
        if full is not None:
            raise full
    return res
