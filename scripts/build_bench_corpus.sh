#!/usr/bin/env bash
# Build the Spanish benchmark corpus: bash scripts/build_bench_corpus.sh OUT.txt
# Installs Debian packages that carry Spanish documentation (needs root and apt), then extracts their
# prose with scripts/build_bench_corpus.py (one paragraph per line). Used by docs/benchmarks.md.
set -euo pipefail
out=${1:?usage: build_bench_corpus.sh OUT.txt}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export DEBIAN_FRONTEND=noninteractive
apt-get -qq update >/dev/null
apt-get -qq install -y --no-install-recommends manpages-es fortunes-es groff-base bsdextrautils \
    debian-reference-es maint-guide-es gimp-help-es lilypond-doc-html-es libreoffice-help-es \
    >/dev/null
python3 "$here/build_bench_corpus.py" "$out"
