#!/usr/bin/env bash
# The README's second command: set up (idempotent, with the test extras) and run the test suite.
#   bash scripts/test.sh              every test (what CI runs)
#   bash scripts/test.sh --quick      without the tests marked `slow` (long training runs, DeepSpeed, the
#                                     README workflow run for real...) or `dist` (torchrun, several
#                                     processes): for a quick check while editing
#   bash scripts/test.sh ARGS         ARGS go to pytest (a file, -k NAME, -x ...)
# The tests run in one pytest-xdist worker per core, whole files per worker (each file's fixtures are
# built once; up to 8 workers); AURA_TEST_WORKERS=N sets the number, 1 runs them in this process.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AURA_EXTRAS="${AURA_EXTRAS:-test}" source "$root/scripts/setup_env.sh"
cd "$root"
args=()
if [ "${1:-}" = "--quick" ]; then
    shift
    args+=(-m "not slow and not dist")
fi
workers="${AURA_TEST_WORKERS:-$(( $(nproc) < 8 ? $(nproc) : 8 ))}"
if [ "$workers" -gt 1 ] && python -c "import xdist" 2>/dev/null; then
    args+=(-n "$workers" --dist loadfile)
fi
exec python -m pytest ${args[@]+"${args[@]}"} "$@"
