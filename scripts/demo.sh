#!/usr/bin/env bash
# The README's first command: set up (idempotent) and run the whole of Aura on the embedded data, as the
# shipped pipeline `demo-cpu`: tokenizer -> prepared data -> pretraining -> SFT -> DPO -> GRPO -> eval -> GGUF -> report card.
set -euo pipefail
here=$PWD
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AURA_EXTRAS="${AURA_EXTRAS:-}" source "$root/scripts/setup_env.sh"
cd "$root"
# runs/demo-cpu is the pipeline's folder: running the demo again skips the stages already finished (and
# resumes one that was interrupted); delete the folder to start over.
status=0
aura pipeline run demo-cpu --output-dir "${AURA_DEMO_DIR:-runs/demo-cpu}" "$@" || status=$?
# The demo ran in its own shell: the user's terminal does not have the environment yet. Its last line says so,
# with the path as seen from where the demo was started.
activate="$venv/bin/activate"
case "$activate" in "$here"/*) activate="${activate#"$here"/}" ;; esac
aura_say "Para usar aura en esta terminal, activa antes su entorno: source $activate" \
         "To use aura in this terminal, activate its environment first: source $activate"
exit "$status"
