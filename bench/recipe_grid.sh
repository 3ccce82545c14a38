#!/usr/bin/env bash
# The whole pretraining-recipe benchmark of docs/benchmarks.md in one command (several hours on a 2-core CPU;
# resumable: finished runs in OUT are kept and skipped when it is run again).
#   bash bench/recipe_grid.sh [OUT]        # default OUT: /tmp/recipe-bench
# The bench corpus, the sweep + 3 seeds at each recipe's best rate for `tiny` (80 steps) and `small` (50
# steps), the table and docs/recipe_curves.png, then the time per token of AdamW vs Muon steps at 4,096 tokens.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python}"
if [ -x "$here/../.venv/bin/python" ] && [ -z "${PYTHON:-}" ]; then py="$here/../.venv/bin/python"; fi
out="${1:-/tmp/recipe-bench}"
mkdir -p "$out"
corpus="$out/bench_es.txt"
[ -s "$corpus" ] || bash "$here/../scripts/build_bench_corpus.sh" "$corpus"
common=(--corpus "$corpus" --out "$out" --seq-length 64 --eval-batches 4 --jobs 2 --seeds 0 --seeds-at-best 1,2)
nice -n 10 "$py" "$here/bench_recipe.py" "${common[@]}" --sizes tiny --steps 80 --eval-every 10
nice -n 10 "$py" "$here/bench_recipe.py" "${common[@]}" --sizes small --steps 50 --eval-every 5
"$py" "$here/bench_recipe.py" --out "$out" --sizes tiny,small --summary-only --plot "$here/../docs/recipe_curves.png"
"$py" "$here/bench_recipe.py" --time-per-token --sizes tiny,small --tpt-precisions fp32,auto
