"""``ti-slurm ui``: a web console for the calling user's jobs (the job list, a job's page with its nodes,
live logs, events and usage charts, cancel), served on the loopback address with a secret token.

It reads what the CLI reads, through the same API (:mod:`ti_slurm.client`): no service on the cluster.
Optional (``pip install ti-slurm[ui]``: Starlette and uvicorn); nothing else in ti-slurm imports this package.
"""
