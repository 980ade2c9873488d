#!/bin/bash
# ModelArts' torchrun start script (custom image): everything from ModelArts' own variables.
# PORT: this job's master port (ModelArts' examples fix one, 6060; a shared Slurm node may not have it free).
MASTER_ADDR="${VC_WORKER_HOSTS%%,*}"
torchrun --nnodes="$MA_NUM_HOSTS" --node_rank="$VC_TASK_INDEX" --nproc_per_node="$MA_NUM_GPUS" \
  --master_addr="$MASTER_ADDR" --master_port="${PORT:-6060}" "$MA_JOB_DIR/code/main.py" "$@"
