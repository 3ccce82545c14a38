#!/usr/bin/env bash
# Creates .venv (if missing) and installs Aura into it, idempotently: a second run does nothing
# unless pyproject.toml changed. Sourced by scripts/demo.sh and scripts/test.sh.
#   AURA_EXTRAS   extras to install (default: none for the demo, "test" for the tests)
#   AURA_TORCH    torch requirement used when torch is not installed yet (default "torch"; CI installs
#                 torch==2.13.0 first)
#   AURA_TORCH_BUILD  auto (default): the CUDA build from PyPI (~3 GB) when an NVIDIA GPU is found
#                 (nvidia-smi, /proc/driver/nvidia, lspci), else the CPU build (~200 MB) from
#                 AURA_TORCH_CPU_INDEX (default https://download.pytorch.org/whl/cpu); cpu or cuda force one
#   AURA_TORCH_DRY_RUN=1  only say which build and which pip command would be used, then stop
#   AURA_NVIDIA_PROC  where the NVIDIA driver lists its GPUs (default /proc/driver/nvidia; for tests)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="${AURA_VENV:-$root/.venv}"
extras="${AURA_EXTRAS:-}"

aura_say() {  # aura_say SPANISH ENGLISH: one line in the user's language (AURA_LANG, else LANG)
    case "${AURA_LANG:-${LANG:-}}" in es*) echo "[aura] $1" ;; *) echo "[aura] $2" ;; esac
}
nvidia_gpu() {  # prints how an NVIDIA GPU was found, or nothing (no pipes: pipefail and grep -q disagree)
    local out proc="${AURA_NVIDIA_PROC:-/proc/driver/nvidia}"
    if command -v nvidia-smi >/dev/null 2>&1; then
        out="$(nvidia-smi -L 2>/dev/null || true)"
        if grep -q '^GPU [0-9]' <<<"$out"; then echo nvidia-smi; return; fi
    fi
    if [ -n "$(ls -A "$proc/gpus" 2>/dev/null || true)" ]; then echo "$proc"; return; fi
    if command -v lspci >/dev/null 2>&1; then
        out="$(lspci 2>/dev/null || true)"
        if grep -qiE '(vga|3d controller|display).*nvidia' <<<"$out"; then echo lspci; return; fi
    fi
}
# Which PyTorch build, decided before anything is created.
torch_build="${AURA_TORCH_BUILD:-auto}"
found=""
if [ "$torch_build" = auto ]; then
    if [ "$(uname -s)" != Linux ]; then
        torch_build=pypi  # macOS and others: PyPI's wheel is the only build
    else
        found="$(nvidia_gpu)"
        if [ -n "$found" ]; then torch_build=cuda; else torch_build=cpu; fi
    fi
fi
read -r -a torch_args <<<"${AURA_TORCH:-torch}"
case "$torch_build" in
    cpu)
        cpu_index="${AURA_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
        torch_args+=(--index-url "$cpu_index")
        why_es="sin GPU de NVIDIA (nvidia-smi, /proc/driver/nvidia, lspci)" why_en="no NVIDIA GPU (nvidia-smi, /proc/driver/nvidia, lspci)"
        [ -n "${AURA_TORCH_BUILD:-}" ] && why_es="AURA_TORCH_BUILD=cpu" why_en="AURA_TORCH_BUILD=cpu"
        torch_note_es="$why_es: se instala PyTorch para CPU desde $cpu_index (unos 200 MB en vez de 3 GB). Para la versión con CUDA: AURA_TORCH_BUILD=cuda; para otra versión: AURA_TORCH=\"torch==X\"."
        torch_note_en="$why_en: installing the CPU build of PyTorch from $cpu_index (about 200 MB instead of 3 GB). For the CUDA build: AURA_TORCH_BUILD=cuda; for another version: AURA_TORCH=\"torch==X\"."
        ;;
    cuda)
        why_es="GPU de NVIDIA ($found)" why_en="NVIDIA GPU ($found)"
        [ -z "$found" ] && why_es="AURA_TORCH_BUILD=cuda" why_en="AURA_TORCH_BUILD=cuda"
        torch_note_es="$why_es: se instala PyTorch con CUDA desde PyPI (unos 3 GB). Para la versión para CPU: AURA_TORCH_BUILD=cpu; para otra versión: AURA_TORCH=\"torch==X\"."
        torch_note_en="$why_en: installing PyTorch with CUDA from PyPI (about 3 GB). For the CPU build: AURA_TORCH_BUILD=cpu; for another version: AURA_TORCH=\"torch==X\"."
        ;;
    pypi)
        torch_note_es="se instala PyTorch desde PyPI (la única versión para $(uname -s))."
        torch_note_en="installing PyTorch from PyPI (the only build for $(uname -s))."
        ;;
    *)
        aura_say "AURA_TORCH_BUILD=$torch_build no es válido: usa auto, cpu o cuda." \
                 "AURA_TORCH_BUILD=$torch_build is not valid: use auto, cpu or cuda." >&2
        return 2 2>/dev/null || exit 2
        ;;
esac
if [ "${AURA_TORCH_DRY_RUN:-}" = 1 ]; then
    aura_say "$torch_note_es" "$torch_note_en"
    echo "[aura] pip install ${torch_args[*]}"
    return 0 2>/dev/null || exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
    aura_say "creando el entorno virtual $venv" "creating virtual environment $venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
fi
py="$venv/bin/python"
if ! "$py" -c "import torch" >/dev/null 2>&1; then
    aura_say "$torch_note_es" "$torch_note_en"
    echo "[aura] pip install ${torch_args[*]}"
    if [ "$torch_build" = cpu ]; then
        # The CPU index may be unreachable (a corporate mirror, an offline index): then the index pip is
        # configured with, which on Linux serves the CUDA build.
        if ! "$py" -m pip install -q --timeout 20 --retries 1 "${torch_args[@]}"; then
            aura_say "No se pudo instalar desde $cpu_index: se instala ${AURA_TORCH:-torch} desde el índice que pip tiene configurado." \
                     "Could not install from $cpu_index: installing ${AURA_TORCH:-torch} from pip's configured index." >&2
            read -r -a torch_args <<<"${AURA_TORCH:-torch}"
            "$py" -m pip install -q "${torch_args[@]}"
        fi
    else
        "$py" -m pip install -q "${torch_args[@]}"
    fi
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
    aura_say "instalando Aura y sus dependencias ($spec)" "installing Aura and its dependencies ($spec)"
    # an old pip (a venv made by hand: Python 3.11 ships pip 23) resolves extras differently
    "$py" -m pip install -q --upgrade pip
    # llama-cpp-python compiles llama.cpp (measured 29 min on a busy 2-core machine, 16 CPU-minutes); pip
    # caches the built wheel, so a second venv installs it in seconds.
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
        "$py" -m pip install -q -e "$spec"
    printf '%s\n%s\n' "$hash" "$all" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
