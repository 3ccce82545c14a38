#!/usr/bin/env bash
# Re-runs every CPU figure of docs/benchmarks.md into a fresh table (figure, published, now, command).
#   bash bench/reproduce.sh [-o TABLE.md] [SECTION...]   # full: the published commands (hours in all)
#   bash bench/reproduce.sh --quick                      # each script's smallest setting (CI): runs, prints its figures
#   bash bench/reproduce.sh --list                       # the scripts, their commands and what they need
# How a bench script joins (its "# reproduce:" lines): bench/reproduce.py's docstring and docs/benchmarks.md.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-$(command -v python || command -v python3)}"
if [ -x "$here/../.venv/bin/python" ] && [ -z "${PYTHON:-}" ]; then py="$here/../.venv/bin/python"; fi
exec "$py" "$here/reproduce.py" "$@"
