#!/usr/bin/env bash
# Creates .venv (if missing) and installs Aura into it, idempotently: a second run does nothing
# unless pyproject.toml changed. Sourced by scripts/demo.sh and scripts/test.sh.
#   AURA_EXTRAS   extras to install (default: none for the demo, "test" for the tests)
#   AURA_TORCH    torch requirement used when torch is not installed yet (default "torch": on a
#                 GPU machine that is the normal CUDA build; CI installs torch==2.13.0 first)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="${AURA_VENV:-$root/.venv}"
extras="${AURA_EXTRAS:-}"
if [ ! -x "$venv/bin/python" ]; then
    echo "[aura] creating virtual environment $venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
fi
py="$venv/bin/python"
if ! "$py" -c "import torch" >/dev/null 2>&1; then
    echo "[aura] installing ${AURA_TORCH:-torch}"
    "$py" -m pip install -q "${AURA_TORCH:-torch}"
fi
stamp="$venv/.aura-setup-stamp"
hash="$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
# The stamp holds the pyproject hash and every extra installed with it: a run that asks for no more
# than what is there installs nothing (so demo.sh after test.sh, or the reverse, is instant).
have=""
[ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$hash" ] && have="$(sed -n 2p "$stamp")"
missing=""
for e in ${extras//,/ }; do
    case ",$have," in *",$e,"*) ;; *) missing="$missing $e" ;; esac
done
if [ ! -f "$stamp" ] || [ "$(head -n1 "$stamp")" != "$hash" ] || [ -n "$missing" ]; then
    all="$(echo "$have,$extras" | tr ',' '\n' | sed '/^$/d' | sort -u | paste -sd, -)"
    spec="$root"
    [ -n "$all" ] && spec="$root[$all]"
    echo "[aura] installing Aura and its dependencies ($spec)"
    # llama-cpp-python compiles llama.cpp (~3-4 min on 2 cores); pip caches the built wheel.
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
        "$py" -m pip install -q -e "$spec"
    printf '%s\n%s\n' "$hash" "$all" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
