#!/usr/bin/env bash
# Runs fmest's GPU ground-truth scripts in one device call of <= 600 s (benchmarks/gpu/README.md).
#   bash benchmarks/gpu/run.sh                 # on the device; outputs under ${OUT:-/tmp/fmest_gpu_out}
#   MB_BUDGET=150 HO_BUDGET=40 MP_BUDGET=320 bash benchmarks/gpu/run.sh
#   FMEST_GPU_ARGS="--device cpu --tiny" bash benchmarks/gpu/run.sh   # CPU smoke run
# Each script gets its budget (enforced inside, by skipping the remaining cases) and a hard
# `timeout` of budget + margin; a script that fails or is killed does not stop the others.
# Exit status: 0 when every script exited 0, else 1 (the outputs written so far stay).
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-/tmp/fmest_gpu_out}"
export OUT
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
MB_BUDGET="${MB_BUDGET:-100}"
HO_BUDGET="${HO_BUDGET:-75}"
MP_BUDGET="${MP_BUDGET:-325}"
MARGIN="${MARGIN:-25}"
EXTRA="${FMEST_GPU_ARGS:-}"
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1

echo "== fmest gpu run: $(date -u +%FT%TZ) out=$OUT microbench ${MB_BUDGET}s host_overhead ${HO_BUDGET}s memory_probe ${MP_BUDGET}s"
# printed only: the device returns at most 8 files (3 scripts x csv/json + one run.log + a
# snapshot = 8)
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1 || true

rc_all=0
run_one() {  # name budget
  local name="$1" budget="$2" start rc
  start=$(date +%s)
  echo "== $name: budget ${budget}s (hard limit $((${budget%.*} + MARGIN))s)"
  # shellcheck disable=SC2086
  timeout --signal=TERM --kill-after=10 "$(( ${budget%.*} + MARGIN ))" \
    "$PY" "$HERE/$name.py" --budget-s "$budget" --out "$OUT" $EXTRA 2>&1 | tee -a "$OUT/run.log"
  rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc after $(( $(date +%s) - start ))s"
  if [ "$rc" -ne 0 ]; then rc_all=1; fi
}
run_one microbench "$MB_BUDGET"
run_one host_overhead "$HO_BUDGET"
run_one memory_probe "$MP_BUDGET"
echo "== done: $(ls "$OUT" | tr '\n' ' ')"
exit "$rc_all"
