#!/usr/bin/env bash
# The README's first command: set up (idempotent) and run the whole of Aura on the embedded data, as the
# shipped pipeline `demo-cpu`: tokenizer -> prepared data -> pretraining -> SFT -> DPO -> GRPO -> eval -> GGUF -> report card.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AURA_EXTRAS="${AURA_EXTRAS:-}" source "$root/scripts/setup_env.sh"
cd "$root"
# runs/demo-cpu is the pipeline's folder: running the demo again skips the stages already finished (and
# resumes one that was interrupted); delete the folder to start over.
exec aura pipeline run demo-cpu --output-dir "${AURA_DEMO_DIR:-runs/demo-cpu}" "$@"
