"""The supervisor: launch every component's nodes, apply the mode's rule, record the job's events.

It runs inside the batch script (``python -m ti_slurm.job supervise JOB_DIR``: :func:`supervise`), or
detached on this machine for a local job (``local-run``: :func:`run_local`). Its parts:

- :mod:`.launchers`: what starts and stops the processes serving a component's nodes (``srun`` per
  component under Slurm, a process per node locally): each a :class:`~.launchers.Launch`;
- :mod:`.judge`: the mode's rule as a pure function of the launches and one :class:`~.judge.Snapshot`
  of the nodes' exit records (:mod:`.records` reads each record once);
- :mod:`.attempts`: interruptions and requeues, pure decisions over the job's events and Slurm's view
  of the job, and the small port to Slurm (:class:`~.attempts.Control`);
- :mod:`.liveness`: lost, frozen and hung nodes, from their records, liveness files and UDP beats;
- :mod:`.steps` (one attempt's launches and their exits), :mod:`.history` (the record across
  attempts), and :mod:`.loop`: the :class:`~.loop.Supervisor`, the only part with state.

Events go to ``<job dir>/status.jsonl`` (:mod:`ti_slurm.core.events`).
"""

from __future__ import annotations

import os


def supervise(job_dir: str, started: float = 0.0) -> int:
    """Entry point inside the batch script: supervise the job whose plan is in ``job_dir``; ``started``: when
    this process started (the batch script's own start comes in ``TI_SLURM_BATCH_STARTED``)."""
    from ti_slurm.core.paths import JobPaths
    from ti_slurm.core.plan import JobPlan
    from ti_slurm.job.supervisor.launchers import SlurmLauncher
    from ti_slurm.job.supervisor.loop import Supervisor

    with open(JobPaths(job_dir).plan, encoding="utf-8") as fh:
        plan = JobPlan.from_json(fh.read())
    if plan.points:  # a sweep's array task: the plan of its point, for every node's step to read
        from ti_slurm.core.files import write_atomic

        plan = plan.at_point(int(os.environ["SLURM_ARRAY_TASK_ID"]))
        write_atomic(JobPaths(job_dir).plan, plan.to_json() + "\n")
    batch = os.environ.pop("TI_SLURM_BATCH_STARTED", "")  # not handed on to the job's steps
    missing = find_slurm_commands(os.environ)
    if missing:
        import sys

        print(f"ti-slurm: {missing}", file=sys.stderr, flush=True)
        return 1
    timeline = {"batch": seconds(batch), "supervisor": round(started, 3)}
    return Supervisor(plan, job_dir, SlurmLauncher(job_dir), timeline=timeline).run().exit_code


USUAL_SLURM_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin")


def find_slurm_commands(environ: dict[str, str] | os._Environ[str]) -> str:
    """Make Slurm's own commands findable on this node, whatever the submitting host's PATH (a job submitted
    through slurmrestd from a host without Slurm brings that host's PATH): ``srun`` on PATH as it is, else in
    the site config's ``slurm_bin_dir``, else in the usual folders; that folder is put first on PATH (the
    nodes' steps get it too). The line to say when none has it ("" when found)."""
    import shutil

    if shutil.which("srun", path=environ.get("PATH")):
        return ""
    from ti_slurm.core.site import load_site_config

    try:
        named = load_site_config().slurm_bin_dir
    except Exception:  # the site config's own error is said by whoever reads it for more
        named = None
    tried = [named] if named else []
    for folder in [*tried, *USUAL_SLURM_DIRS]:
        if shutil.which("srun", path=folder):
            environ["PATH"] = os.pathsep.join(filter(None, [folder, environ.get("PATH", "")]))
            return ""
    where = ", ".join([*tried, *USUAL_SLURM_DIRS])
    return (f"srun is not on this node's PATH ({environ.get('PATH', '')!r}, the submitting host's) nor in {where}:"
            " set slurm_bin_dir in the site config to the folder of Slurm's commands on the nodes")


def seconds(epoch: str) -> float:
    """bash's ``$EPOCHREALTIME`` (its decimal point the locale's) as a number; 0 when there is none."""
    try:
        return round(float(epoch.replace(",", ".")), 3)
    except ValueError:
        return 0.0


def run_local(job_dir: str, job_id: int, started: float = 0.0) -> int:
    """The detached supervisor process of a local job (the local backend starts it)."""
    from ti_slurm.core.paths import JobPaths
    from ti_slurm.core.plan import JobPlan
    from ti_slurm.job.process import become_subreaper
    from ti_slurm.job.supervisor.launchers import LocalLauncher
    from ti_slurm.job.supervisor.loop import Supervisor

    with open(JobPaths(job_dir).plan, encoding="utf-8") as fh:
        plan = JobPlan.from_json(fh.read())
    become_subreaper()  # a node step killed or frozen leaves its command to this process: stopped with the node
    timeline = {"supervisor": round(started, 3)}
    return Supervisor(plan, job_dir, LocalLauncher(plan, job_dir, job_id), timeline=timeline).run().exit_code
