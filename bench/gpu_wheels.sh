#!/usr/bin/env bash
# The packages the lent GPU machine lacks, as wheels built here, for `bash bench/gpu_suite.sh` to install there
# offline (that machine reaches no package registry; its image has torch, transformers and peft).
#
#   bash bench/gpu_wheels.sh [DIR]          # default DIR: .gpu-wheels (ignored by git); then carry DIR to the device
#   GPU_PYTHONS="3.11 3.12" bash bench/gpu_wheels.sh   # the device's Python versions (default 3.10 to 3.13)
#
# DeepSpeed is built with DS_BUILD_OPS=0: pure Python, its CUDA kernels compiled just in time on the device when
# a feature needs one (ZeRO-2 with torch's own AdamW needs none). Its dependencies the image lacks come as wheels:
# the pure ones once, the compiled ones (msgpack, pydantic-core) for each Python in GPU_PYTHONS, manylinux x86_64.
# bench/gpu_suite.sh installs from DIR (pip --no-index --find-links) when DeepSpeed is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/../.gpu-wheels}"
py="${PYTHON:-$here/../.venv/bin/python}"
[ -x "$py" ] || py="$(command -v python3)"
mkdir -p "$out"
version="$("$py" -c 'import importlib.metadata as m; print(m.version("deepspeed"))' 2>/dev/null || echo "")"
spec="deepspeed${version:+==$version}"  # the version the CPU tests ran, when installed here
# setup.py imports torch: the build sees this environment's (CPU) torch, and no op is compiled
DS_BUILD_OPS=0 "$py" -m pip wheel -q --no-deps --no-build-isolation -w "$out" "$spec"
installed() { "$py" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || echo ""; }
pydantic="$(installed pydantic)" core="$(installed pydantic-core)"  # a matching pair: pydantic pins its core
pure=(hjson py-cpuinfo einops ninja annotated-types typing-inspection typing-extensions "pydantic${pydantic:+==$pydantic}")
"$py" -m pip download -q --no-deps --only-binary=:all: -d "$out" "${pure[@]}"
for v in ${GPU_PYTHONS:-3.10 3.11 3.12 3.13}; do
    "$py" -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
        --python-version "$v" -d "$out" msgpack "pydantic-core${core:+==$core}"
done
du -sh "$out" | awk '{print "[gpu_wheels] " $1 " in " $2}'
ls "$out"
