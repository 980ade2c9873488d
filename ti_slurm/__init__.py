"""ti-slurm: run TI-platform / ModelArts distributed training jobs on Slurm.

Kept import-light on purpose: job steps import submodules directly.
"""

__version__ = "0.1.0"
