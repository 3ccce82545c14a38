#!/usr/bin/env bash
# The README's first command: set up (idempotent) and run Aura's main job on the embedded data:
# prepare the embedded Spanish corpus, train its tokenizer and a tiny model, then print a sample.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AURA_EXTRAS="${AURA_EXTRAS:-}" source "$root/scripts/setup_env.sh"
cd "$root"
# runs/demo is the demo's own scratch directory: each run starts it over.
exec aura pretrain --output-dir "${AURA_DEMO_DIR:-runs/demo}" --overwrite "$@"
