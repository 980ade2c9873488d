"""The shared kernel: what both sides import, the client (CLI, API, backends) and the code inside jobs.

Standard library only (and :mod:`ti_slurm.core.errors`), checked by ``tests/unit/test_job_path.py``:
the plan and its JSON, job states, the job directory's layout, hostlists, frozen records, file
helpers and shell quoting. Nothing here imports :mod:`ti_slurm.job` or anything above it.
"""
