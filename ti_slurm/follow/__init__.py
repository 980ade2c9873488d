"""Following jobs: the registry of submitted jobs, the shared queue, a job's status and usage read back."""
