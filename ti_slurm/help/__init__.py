"""What ti-slurm tells its users: the starter spec, the spec's JSON schema, the reference pages made from the code."""
