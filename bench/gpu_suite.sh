#!/usr/bin/env bash
# Every CUDA path of Aura, with MFU and memory figures, in one command: see bench/gpu_suite.py.
#   bash bench/gpu_suite.sh            # on a GPU: appends the table to docs/benchmarks.md
#   bash bench/gpu_suite.sh --cpu      # tiny shapes on the CPU (CI runs this so the script never rots)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-$(command -v python || command -v python3)}"
if [ -x "$here/../.venv/bin/python" ] && [ -z "${PYTHON:-}" ]; then py="$here/../.venv/bin/python"; fi
exec "$py" "$here/gpu_suite.py" "$@"
