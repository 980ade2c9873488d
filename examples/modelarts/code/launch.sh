#!/bin/bash
# ModelArts' torch.distributed.launch start script (custom image): everything from ModelArts' own variables.
MASTER_ADDR="${VC_WORKER_HOSTS%%,*}"
MASTER_PORT="${PORT:-6060}"
exec python -m torch.distributed.launch --nnodes="$MA_NUM_HOSTS" --node_rank="$VC_TASK_INDEX" \
  --nproc_per_node="$MA_NUM_GPUS" --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" \
  "$MA_JOB_DIR/code/main.py" "$@"
