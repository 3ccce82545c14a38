#!/usr/bin/env bash
# Start an Aura command on this node of a torchrun job (the original Docker guide's ddp_launch.sh).
#
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=192.168.50.20 MASTER_PORT=29500 GPUS_PER_NODE=1 \
#     scripts/ddp_launch.sh pretrain --data DIR --output-dir RUN
#
# With no arguments it runs `check-dist`. Works inside the Docker image and on a plain machine with
# Aura installed (or from a checkout, through `python -m aura`). Extra torchrun options for
# `aura launch` go in AURA_LAUNCH_ARGS, e.g. AURA_LAUNCH_ARGS="--max-restarts 3".
set -euo pipefail

export NNODES="${NNODES:-1}"
export NODE_RANK="${NODE_RANK:-0}"
export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
export MASTER_PORT="${MASTER_PORT:-29500}"
if [[ -n "${GPUS_PER_NODE:-}" ]]; then
  export GPUS_PER_NODE
fi

if [[ $# -eq 0 ]]; then
  set -- check-dist
fi

if command -v aura >/dev/null 2>&1; then
  aura_cmd=(aura)
else
  aura_cmd=("${PYTHON:-python3}" -m aura)
fi

read -r -a extra <<< "${AURA_LAUNCH_ARGS:-}"
exec "${aura_cmd[@]}" launch "${extra[@]}" "$@"
