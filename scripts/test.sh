#!/usr/bin/env bash
# The README's second command: set up (idempotent, with the test extras) and run the whole suite.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AURA_EXTRAS="${AURA_EXTRAS:-test}" source "$root/scripts/setup_env.sh"
cd "$root"
exec python -m pytest "$@"
