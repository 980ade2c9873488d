"""What ti-slurm says to Slurm and reads from it: one home each.

- :mod:`ti_slurm.slurm.request`: the options a plan asks Slurm for (pure), which the ``#SBATCH`` lines, pyslurm's
  job description and the refused ``sbatch:`` keys are all made from.

Modules here import the standard library and :mod:`ti_slurm.core` only, so the code inside a job may use them.
"""
