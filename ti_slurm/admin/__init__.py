"""For cluster admins: the Prolog/Epilog hooks and `ti-slurm doctor`."""
