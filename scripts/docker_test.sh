#!/usr/bin/env bash
# Docker nodes for real: build Aura's CPU image, run it as one node and as two nodes, end to end.
#
#   scripts/docker_test.sh            (needs Docker Engine with BuildKit and Compose v2; no GPU)
#   scripts/docker_test.sh --check    (only validate the variables below and print the settings)
#
# Variables (all optional), so the same script runs on any machine, also behind a corporate mirror:
#   AURA_BASE_IMAGE      base image with Python >= 3.10 (default: docker-compose.cpu.yml's python:3.12-slim-bookworm)
#   AURA_DOCKER_NETWORK  Docker network for the two nodes (default aura-nodes, created and removed here);
#                        `host`: build and run everything on the host's network (MASTER_ADDR=127.0.0.1)
#   AURA_PIP_CERT        CA bundle file for pip (build secret pip_cert: never stored in a layer; checked below)
#   AURA_PIP_INDEX_URL   pip index (mirror) used by the build
#   AURA_WHEELHOUSE      folder of wheels (e.g. a CPU torch) offered to pip; staged into .wheelhouse/ for the build
#   AURA_DOCKER_OUT      host folder for data, runs and logs (default: a new temporary folder, kept)
#   AURA_HOST_PYTHON     host Python with transformers, to load the final model (default python3)
# Steps: 1 build (docker compose, CPU override) and image size; 2 the CA secret is in no layer (docker history and
# every layer of `docker save`); 3 `aura doctor`; 4 tokenizer + data prepared into the host folder; 5 single node:
# pretrain, `docker compose stop` (or `docker stop`, the same SIGTERM, for Compose versions that leave `run`
# containers alone) -> interrupt checkpoint -> resume in a new container, losses equal to an
# uninterrupted run, outputs owned by the host user; 6 two containers as two nodes: `aura launch check-dist`,
# `aura launch pretrain` (Sync=OK), node 1 killed mid-run, both nodes restarted with --resume-from latest;
# 7 the final model loads on the host with transformers. Last line: `docker nodes: N passed, M failed`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE=${AURA_BASE_IMAGE:-}
NET=${AURA_DOCKER_NETWORK:-aura-nodes}
CERT=${AURA_PIP_CERT:-}
INDEX=${AURA_PIP_INDEX_URL:-}
WHEELS=${AURA_WHEELHOUSE:-}
OUT=${AURA_DOCKER_OUT:-}
HOST_PY=${AURA_HOST_PYTHON:-python3}
P=aura-docker-test

die() { echo "docker_test: $*" >&2; exit 2; }

# --- variable checks (no Docker needed) ------------------------------------------------------------------------
if [[ -n "$CERT" && ! ( -f "$CERT" && -r "$CERT" ) ]]; then
  die "AURA_PIP_CERT=$CERT is not a readable file (expected the CA bundle of your mirror, PEM)"
fi
if [[ -n "$CERT" ]] && ! grep -q -- "-----BEGIN CERTIFICATE-----" "$CERT"; then
  die "AURA_PIP_CERT=$CERT holds no PEM certificate (no '-----BEGIN CERTIFICATE-----' line)"
fi
if [[ -n "$WHEELS" ]]; then
  [[ -d "$WHEELS" ]] || die "AURA_WHEELHOUSE=$WHEELS is not a folder (expected a folder of .whl files)"
  compgen -G "$WHEELS/*.whl" >/dev/null || die "AURA_WHEELHOUSE=$WHEELS holds no .whl file"
fi
if [[ -n "$INDEX" && ! "$INDEX" =~ ^(https?|file)://[^[:space:]]+$ ]]; then
  die "AURA_PIP_INDEX_URL=$INDEX is not a URL (expected https://mirror.example/simple)"
fi
if [[ "$NET" != host && ! "$NET" =~ ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$ ]]; then
  die "AURA_DOCKER_NETWORK=$NET is not a Docker network name (letters, digits, _ . -) nor 'host'"
fi
if [[ -n "$BASE" && ! "$BASE" =~ ^[a-z0-9][a-z0-9._/:@-]*$ ]]; then
  die "AURA_BASE_IMAGE=$BASE is not an image reference (e.g. python:3.12-slim-bookworm)"
fi
if [[ -n "$OUT" && -e "$OUT" && ! -d "$OUT" ]]; then
  die "AURA_DOCKER_OUT=$OUT exists and is not a folder"
fi
TORCH_SPEC=${AURA_TORCH_SPEC:-}
torch_wheel=$( (compgen -G "${WHEELS:-/nonexistent}/torch-*.whl" || true) | sort -V | tail -1)
if [[ -z "$TORCH_SPEC" && -n "$torch_wheel" ]]; then  # a torch wheel in the folder: take exactly that one
  TORCH_SPEC="torch==$(basename "$torch_wheel" | cut -d- -f2)"
fi
if [[ "${1:-}" == --check ]]; then
  echo "base=${BASE:-<docker-compose.cpu.yml default>} network=$NET cert=${CERT:-<none>} index=${INDEX:-<pip default>}"
  echo "wheelhouse=${WHEELS:-<none>} torch=${TORCH_SPEC:-<default>} out=${OUT:-<new temporary folder>}"
  exit 0
fi
[[ $# -eq 0 ]] || die "unknown argument $1 (only --check)"
command -v docker >/dev/null || die "docker is not installed"
docker compose version >/dev/null 2>&1 || die "Docker Compose v2 (docker compose) is missing"

# --- setup -------------------------------------------------------------------------------------------------------
OUT=${OUT:-$(mktemp -d -t aura-docker-XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RUN_UID=$(id -u) RUN_GID=$(id -g)
if [[ "$RUN_UID" == 0 ]]; then RUN_UID=1000 RUN_GID=1000; fi  # root host: an unprivileged uid, folder given to it
mkdir -p "$OUT/data" "$OUT/runs" "$OUT/hf" "$OUT/logs"
[[ "$(id -u)" != 0 ]] || chown -R "$RUN_UID:$RUN_GID" "$OUT/data" "$OUT/runs" "$OUT/hf"
export COMPOSE_FILE="$ROOT/docker-compose.yml:$ROOT/docker-compose.cpu.yml" COMPOSE_PROJECT_NAME=$P
export AURA_LANG=en AURA_IMAGE=aura:cpu AURA_DATA="$OUT/data" AURA_RUNS="$OUT/runs" \
  AURA_HF_CACHE="$OUT/hf" AURA_PIP_INDEX_URL="$INDEX" AURA_PIP_CERT="${CERT:-/dev/null}" AURA_EXTRAS=""
[[ "$NET" != host ]] || export AURA_BUILD_NETWORK=host
[[ -z "$BASE" ]] || export AURA_BASE_IMAGE="$BASE"
[[ -z "$TORCH_SPEC" ]] || export AURA_TORCH_SPEC="$TORCH_SPEC"
staged=""
if [[ -n "$WHEELS" ]]; then  # BuildKit's built-in frontend reads local files only from the build context
  [[ ! -e "$ROOT/.wheelhouse" ]] || die "$ROOT/.wheelhouse already exists: remove it or unset AURA_WHEELHOUSE"
  mkdir "$ROOT/.wheelhouse" && staged="$ROOT/.wheelhouse"
  cp -l "$WHEELS"/*.whl "$staged/" 2>/dev/null || cp "$WHEELS"/*.whl "$staged/"
  export AURA_WHEELHOUSE=.wheelhouse AURA_TORCH_INDEX_URL=""
fi
net_created=""
cleanup() {
  docker rm -f "$P-single" "$P-node0" "$P-node1" >/dev/null 2>&1 || true
  [[ -z "$net_created" ]] || docker network rm "$NET" >/dev/null 2>&1 || true
  [[ -z "$staged" ]] || rm -rf "$staged"
}
trap cleanup EXIT
cleanup_before() { docker rm -f "$P-single" "$P-node0" "$P-node1" >/dev/null 2>&1 || true; }
cleanup_before

passed=0 failed=0
ok() { passed=$((passed + 1)); echo "PASS  $*"; }
bad() { failed=$((failed + 1)); echo "FAIL  $*"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
now() { date +%s; }
compose() { env UID="$RUN_UID" GID="$RUN_GID" docker compose "$@"; }  # UID is read-only in bash
# The step losses of a run, "step loss" per line (training_log.csv, rows of kind step).
losses() { awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i; next} $c["kind"]=="step"{print $c["step"], $c["train_loss"]}' "$1/training_log.csv"; }
logged_steps() { [[ -f "$1/training_log.csv" ]] && losses "$1" | wc -l || echo 0; }
wait_for() { local deadline=$(( $(now) + $1 )); shift; until "$@"; do (( $(now) < deadline )) || return 1; sleep 0.2; done; }
has_steps() { [[ "$(logged_steps "$1")" -ge "$2" ]]; }
TINY=(--model-preset manual --arch llama --embed-size 64 --num-layers 2 --num-heads 4 --num-kv-heads 2
      --seq-length 32 --intermediate-size 128 --batch-size 4 --log-interval 1 --sample-tokens 0 --precision fp32
      --learning-rate 3e-3 --warmup-steps 0 --min-lr 3e-3 --keep-last 0 --eval-interval 0 --backend gloo)
echo "docker_test: output in $OUT"

# 1. build -------------------------------------------------------------------------------------------------------
t0=$(now)
if compose build trainer >"$OUT/logs/build.log" 2>&1; then
  ok "build aura:cpu in $(( $(now) - t0 )) s, $(docker image inspect aura:cpu --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}')"
else
  bad "build (log: $OUT/logs/build.log)"; tail -20 "$OUT/logs/build.log"
  echo "docker nodes: $passed passed, $failed failed"; exit 1
fi

# 2. the CA bundle is in no layer -----------------------------------------------------------------------------
secret_absent() {
  [[ -n "$CERT" ]] || { echo "  (no AURA_PIP_CERT: nothing to look for)"; return 0; }
  local public="$OUT/logs/public.pem" private="$OUT/logs/private-lines"
  # lines of the bundle that the image holds anyway (Debian's and certifi's public CAs) prove nothing
  docker run --rm --entrypoint bash aura:cpu -c \
    'cat /etc/ssl/certs/ca-certificates.crt "$(python -c "import certifi; print(certifi.where())")" 2>/dev/null' \
    >"$public" || true
  grep -vxFf "$public" "$CERT" | grep -v -- ----- | awk 'length >= 40' >"$private" || true
  local n; n=$(wc -l <"$private")
  echo "  $n private line(s) of the CA bundle looked for in docker history and every layer of docker save"
  if docker history --no-trunc --format '{{.CreatedBy}}' aura:cpu | grep -qFf "$private"; then return 1; fi
  if [[ "$n" -gt 0 ]] && docker save aura:cpu | grep -aqFf "$private"; then return 1; fi
  rm -f "$private" "$public"
}
check "CA bundle not in any image layer (docker history, docker save)" secret_absent

# 3. aura doctor --------------------------------------------------------------------------------------------------
# in /runs, the host folder of the run (the repo mounted at /workspace may belong to another uid)
doctor() { compose run --rm -w /runs trainer doctor >"$OUT/logs/doctor.log" 2>&1 || { tail -20 "$OUT/logs/doctor.log"; return 1; }; }
check "aura doctor in the container" doctor

# 4. data, prepared in a container into the host folder -----------------------------------------------------
prepare() {
  compose run --rm -v "$ROOT/aura/resources/corpus_es:/corpus:ro" --entrypoint bash trainer -c \
    'aura tokenizer train /corpus/*.txt --vocab-size 400 --output-dir /data/tok --overwrite \
     && aura data prepare /corpus/*.txt --tokenizer /data/tok --output-dir /data/prepared --val-fraction 0.05 \
        --workers 1' >"$OUT/logs/prepare.log" 2>&1 || { tail -20 "$OUT/logs/prepare.log"; return 1; }
}
check "tokenizer and data prepared into the host folder" prepare

# 5. single node: SIGTERM -> checkpoint -> exact resume in a new container -------------------------------------
STEPS=150
single() { compose run --rm trainer pretrain --data /data/prepared "${TINY[@]}" --max-steps "$STEPS" --save-steps 1000 "$@"; }
R="$OUT/runs"
t0=$(now)
single -o /runs/reference >"$OUT/logs/reference.log" 2>&1 || bad "uninterrupted reference run"
echo "  reference run ($STEPS steps): $(( $(now) - t0 )) s"
compose run -d --name "$P-single" trainer pretrain --data /data/prepared -o /runs/single "${TINY[@]}" \
  --max-steps "$STEPS" --save-steps 1000 >/dev/null || true
wait_for 300 has_steps "$R/single" 3 || true
stopper="docker compose stop"
compose stop -t 120 trainer >/dev/null 2>&1 || true
if [[ "$(docker inspect -f '{{.State.Running}}' "$P-single" 2>/dev/null)" == true ]]; then
  stopper="docker stop"  # a Compose that leaves `run` containers alone: docker stop sends the same SIGTERM
  docker stop -t 120 "$P-single" >/dev/null 2>&1 || true
fi
rc=$(docker wait "$P-single" 2>/dev/null || echo none)
docker logs "$P-single" >"$OUT/logs/single.log" 2>&1 || true
docker rm "$P-single" >/dev/null 2>&1 || true
stopped_at=$(logged_steps "$R/single")
check "$stopper (SIGTERM) at step $stopped_at/$STEPS: exit 3 and an interrupt checkpoint" \
  test "$rc" == 3 -a "$stopped_at" -lt "$STEPS" -a -n "$(compgen -G "$R/single/interrupt-step-*" || true)"
single -o /runs/single --resume-from latest >"$OUT/logs/resume.log" 2>&1 || bad "resume run"
same_losses() { [[ "$(logged_steps "$1")" -eq "$STEPS" ]] && diff <(losses "$1" | sort -n) <(losses "$2" | sort -n) >/dev/null; }
check "resumed in a new container: the $STEPS step losses equal the uninterrupted run's" \
  same_losses "$R/single" "$R/reference"
owned() {
  local f; f=$(find "$R/single/final" -name '*.safetensors' | head -1)
  [[ -n "$f" && "$(stat -c %u:%g "$f")" == "$RUN_UID:$RUN_GID" && "$(stat -c %a "$f")" != 600 ]] \
    && echo "  $f: owner $(stat -c %u:%g "$f"), mode $(stat -c %a "$f")"
}
check "outputs on the host folder owned by uid $RUN_UID (not root), not 0600" owned

# 6. two containers as two nodes ----------------------------------------------------------------------------------
if [[ "$NET" == host ]]; then
  net_args=(--network host) MASTER=127.0.0.1 PORT=$(( 20000 + RANDOM % 20000 ))
else
  if ! docker network inspect "$NET" >/dev/null 2>&1; then docker network create "$NET" >/dev/null; net_created=1; fi
  net_args=(--network "$NET") MASTER=$P-node0 PORT=29500
fi
node() {  # node RANK aura-args...: one container = one PC of the guide, same variables
  local rank=$1; shift
  docker rm -f "$P-node$rank" >/dev/null 2>&1 || true
  docker run -d --name "$P-node$rank" --hostname "$P-node$rank" "${net_args[@]}" --shm-size 1g \
    --user "$RUN_UID:$RUN_GID" -e NNODES=2 -e NODE_RANK="$rank" -e MASTER_ADDR="$MASTER" -e MASTER_PORT="$PORT" \
    -e GPUS_PER_NODE=1 -e AURA_LANG=en -v "$OUT/data:/data:ro" -v "$OUT/runs:/runs" aura:cpu "$@" >/dev/null
}
both() {  # both aura-args...: start node 0 and node 1, wait, keep the logs; true when both exit 0
  node 0 "$@"; node 1 "$@"
  local r0 r1; r0=$(docker wait "$P-node0") r1=$(docker wait "$P-node1")
  docker logs "$P-node0" >"$OUT/logs/node0.log" 2>&1; docker logs "$P-node1" >"$OUT/logs/node1.log" 2>&1
  [[ "$r0" == 0 && "$r1" == 0 ]]
}
check "aura launch check-dist across two containers ($NET network)" \
  both launch check-dist --backend gloo --size-mb 1 --iters 3
grep -h "Communication OK" "$OUT/logs/node0.log" || true
NSTEPS=60
run2() { node "$1" launch pretrain --data /data/prepared -o /runs/nodes "${TINY[@]}" --max-steps "$NSTEPS" \
           --save-steps 10 "${@:2}"; }
t0=$(now)
run2 0; run2 1
saved_and_on() { [[ -d "$R/nodes/checkpoint-step-10" ]] && has_steps "$R/nodes" 12; }
wait_for 300 saved_and_on || true
killed_at=$(logged_steps "$R/nodes")
docker kill "$P-node1" >/dev/null 2>&1 || true
r0=$(timeout 300 docker wait "$P-node0" || echo timeout)
docker logs "$P-node0" >"$OUT/logs/nodes-killed.log" 2>&1 || true
check "node 1 killed at step $killed_at/$NSTEPS: node 0 stops too (exit $r0), checkpoint kept" \
  test "$killed_at" -lt "$NSTEPS" -a "$r0" != 0 -a -d "$R/nodes/checkpoint-step-10"
docker rm -f "$P-node0" "$P-node1" >/dev/null 2>&1 || true
resumed() {
  run2 0 --resume-from latest; run2 1 --resume-from latest
  local r0 r1; r0=$(docker wait "$P-node0") r1=$(docker wait "$P-node1")
  docker logs "$P-node0" >"$OUT/logs/nodes-resumed.log" 2>&1
  [[ "$r0" == 0 && "$r1" == 0 ]] && grep -q "Sync=OK" "$OUT/logs/nodes-resumed.log" \
    && [[ "$(logged_steps "$R/nodes")" -ge "$NSTEPS" && -d "$R/nodes/final" ]]
}
check "two nodes restarted with --resume-from latest: finished $NSTEPS steps, Sync=OK" resumed
echo "  two-node run with the kill and the resume: $(( $(now) - t0 )) s"
grep -h "Sync=OK" "$OUT/logs/nodes-resumed.log" | tail -1 || true

# 7. the final model loads on the host -----------------------------------------------------------------------
loads() {
  "$HOST_PY" - "$R/nodes/final" <<'PY'
import sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path = sys.argv[1]
model = AutoModelForCausalLM.from_pretrained(path)
tok = AutoTokenizer.from_pretrained(path)
ids = tok("Hola", return_tensors="pt").input_ids
with torch.no_grad():
    out = model.generate(ids, max_new_tokens=4, do_sample=False)
print(f"  {type(model).__name__}: {sum(p.numel() for p in model.parameters())} parameters, "
      f"generated {out.shape[1] - ids.shape[1]} tokens")
PY
}
check "final model of the two-node run loads on the host with transformers ($HOST_PY)" loads

echo "docker nodes: $passed passed, $failed failed"
[[ "$failed" == 0 ]]
