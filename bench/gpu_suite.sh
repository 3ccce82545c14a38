#!/usr/bin/env bash
# Every CUDA path of Aura, with MFU and memory figures, in one command: see bench/gpu_suite.py.
#   bash bench/gpu_suite.sh            # on a GPU: appends the table to docs/benchmarks.md
#   bash bench/gpu_suite.sh --cpu      # tiny shapes on the CPU (CI runs this so the script never rots)
#   bash bench/gpu_wheels.sh           # first, here: DeepSpeed and its missing dependencies as wheels
#                                      # (.gpu-wheels, carried to the device; installed there below)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-$(command -v python || command -v python3)}"
if [ -x "$here/../.venv/bin/python" ] && [ -z "${PYTHON:-}" ]; then py="$here/../.venv/bin/python"; fi
# Packages the lent GPU machine lacks (it reaches no registry), built here by bench/gpu_wheels.sh and carried
# with the tree: installed from that folder, offline, when they are missing (AURA_GPU_WHEELS names another).
wheels="${AURA_GPU_WHEELS:-$here/../.gpu-wheels}"
if [ -d "$wheels" ] && ! "$py" -c "import deepspeed" 2>/dev/null; then
    "$py" -m pip install -q --no-index --find-links "$wheels" deepspeed \
        || echo "[gpu_suite] DeepSpeed did not install from $wheels: its check will say it is missing" >&2
fi
exec "$py" "$here/gpu_suite.py" "$@"
