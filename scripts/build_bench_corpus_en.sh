#!/usr/bin/env bash
# Build the English corpus of bench/bench_adapt.py: bash scripts/build_bench_corpus_en.sh OUT.txt
# Installs Debian packages with English prose (needs root and apt), then extracts it with
# scripts/build_bench_corpus_en.py (one paragraph per line).
set -euo pipefail
out=${1:?usage: build_bench_corpus_en.sh OUT.txt}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export DEBIAN_FRONTEND=noninteractive
apt-get -qq update >/dev/null
apt-get -qq install -y --no-install-recommends fortunes manpages groff-base bsdextrautils >/dev/null
python3 "$here/build_bench_corpus_en.py" "$out" --max-mb "${MAX_MB:-4}"
