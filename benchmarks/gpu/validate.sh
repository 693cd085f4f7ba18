#!/usr/bin/env bash
# The GPU validation (issue #28) in independent stages, each with its own budget, store and log under OUT:
#   bash benchmarks/gpu/validate.sh STAGE [OUT]     STAGE: a b c d e, merge, or all (a..e then merge)
#   bash benchmarks/gpu/validate.sh --rehearse [OUT] every stage and the merge on this CPU: the fake backend on a
#                                                    fake GPU at NVML's boundary (wiring only: no timing, no band)
# OUT defaults to ./gpu-validation. A stage whose OUT/stage-X/result.json exists is skipped (its results came back
# and were committed); a stage cut off before its end leaves none and runs again from scratch. --force reruns one.
# Each check reads only the run its own step created (check_run.py) and FAILs when the step exited non-zero,
# created no run, or stored points of another model or device. Exit 1 when any check failed.
# Budgets on one H100 (worker start, cuDNN autotuning and the measured steps; cut off at the budget):
#   a  240 s  dlbench env; torch ResNet-50 amp channels-last batch 256; BERT-base amp batch 64 (MFU on both)
#   b  200 s  ResNet-50 fp32 vs tf32 batch 128 (math modes recorded); the OOM point (fp32, batch 2048)
#   c  240 s  one fairness round each: torch amp channels-last b256, torch tf32 b128; judged 0.95-1.05
#   d  180 s  max-batch search, BERT-base amp, 256..2048 (maxbatch.yaml), then the largest batch measured
#   e  240 s  JAX ResNet-50 bf16 batch 256, and its fairness round (skipped, saying so, without JAX on a GPU)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
FORCE=0 REHEARSE=0 STAGE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --force) FORCE=1; shift ;;
    --rehearse) REHEARSE=1; STAGE=all; shift ;;
    a|b|c|d|e|merge|all) STAGE=$1; shift ;;
    -*) echo "validate.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ -n "$STAGE" ] || { echo "usage: validate.sh STAGE [OUT] (a b c d e merge all) | --rehearse [OUT]" >&2; exit 2; }
OUT=${1:-gpu-validation}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)

# What runs: torch and JAX on a GPU; in the rehearsal the fake backend (1 ms steps, out of memory above batch 300)
# on a fake H100 (benchmarks/gpu/rehearsal/pynvml.py), a few steps, the fairness loops' fake, no band judged.
FW=torch JAX=jax STEPS=(--warmup 10 --steps 50 --repeats 3) FAIR=(--steps 30 --warmup 10) BAND=0.95,1.05
if [ "$REHEARSE" = 1 ]; then
  FW=fake JAX=fake STEPS=(--preset caict --warmup 1 --steps 2 --repeats 1) FAIR=(--steps 2 --warmup 1) BAND=0,1e9
  export PYTHONPATH="$HERE/rehearsal${PYTHONPATH:+:$PYTHONPATH}" DLBENCH_FAKE=${DLBENCH_FAKE:-oom_above:300}
  export DLBENCH_HOME=${DLBENCH_HOME:-$OUT/home}
fi
budget() { case "$1" in a) echo 240 ;; b) echo 200 ;; c) echo 240 ;; d) echo 180 ;; e) echo 240 ;; esac; }

left() { echo $(( DEADLINE - $(date +%s) )); }
# step CMD...: run one step within what is left of the stage's budget; its exit status in $rc
step() {
  local t; t=$(left)
  if [ "$t" -le 5 ]; then echo "out of budget: not run: $*"; rc=124; return; fi
  "$PY" "$HERE/check_run.py" ids "$STORE" > "$DIR/before"
  timeout "$t" "$@"; rc=$?
}
db() { "$PY" -m dlbench "$@" --store "$STORE"; }
run() { step "$PY" -m dlbench run --device cuda "${STEPS[@]}" --store "$STORE" "$@"; }
# check LABEL MODEL WIRING [GPU]: WIRING over the step's own points always; GPU (speed, MFU range, math modes:
# what a fake backend cannot show) only on a GPU. OK_RC: the step's exit statuses that count as finishing.
check() {
  local expr=$3
  if [ "$REHEARSE" = 0 ] && [ -n "${4:-}" ]; then expr="($3) and ($4)"; fi
  "$PY" "$HERE/check_run.py" check "$STORE" "$1" "$expr" --rc "$rc" --before "$DIR/before" --model "$2" \
    --device cuda ${KIND:+--kind "$KIND"} --ok-rc "${OK_RC:-0}" || fails=$((fails + 1))
}
fair() {  # one round of the harness against the bare loop, judged against the band
  step "$PY" "$HERE/../fairness.py" --device cuda --rounds 1 --band "$BAND" "${FAIR[@]}" "$@"
  if [ "$rc" = 0 ]; then echo "PASS: fairness $*"; else echo "FAIL: fairness $* (exit $rc)"; fails=$((fails + 1)); fi
}
ok='all(p["status"] == "ok" for p in pts)'
speed='{p["math_mode"]: p["throughput"] for p in pts}'
tf32_faster="$speed[\"tf32\"] > $speed[\"fp32\"]"
peak_known='all(p["peak_tflops"] for p in pts)'
mfu_range='all(p["mfu"] is not None and 0 < p["mfu"] <= 1 for p in pts)'

stage_a() {
  step "$PY" -m dlbench env --device cuda
  [ "$rc" = 0 ] || { echo "FAIL: dlbench env --device cuda exited $rc"; fails=$((fails + 1)); }
  run -f "$FW" -m resnet50 -p amp -b 256 --channels-last
  check "resnet50 amp channels-last ok, with an MFU" resnet50 \
    "$ok and $peak_known and all(p['channels_last'] for p in pts)" "$mfu_range"
  run -f "$FW" -m bert_base -p amp -b 64
  check "bert_base amp ok, with an MFU" bert_base "$ok and $peak_known" "$mfu_range"
}
stage_b() {
  run -f "$FW" -m resnet50 -p fp32,tf32 -b 128
  check "fp32 and tf32 record different math modes" resnet50 \
    "len(pts) == 2 and $ok and {p['precision'] for p in pts} == {'fp32', 'tf32'}" \
    "{p['math_mode'] for p in pts} == {'fp32', 'tf32'} and $tf32_faster"
  # 2048 images need about 200 GB of ResNet-50's fp32 activations, more than an H100 or H200 holds, with every
  # tensor under 2^31 elements: the point fails for memory alone.
  run -f "$FW" -m resnet50 -p fp32 -b 2048 --warmup 1 --steps 2 --repeats 1
  OK_RC=0,1 check "batch 2048 is oom" resnet50 'len(pts) == 1 and pts[0]["status"] == "oom"'
}
stage_c() {
  local f=$FW; [ "$f" = torch ] || f=fake
  fair -f "$f" --precision amp --batch-size 256 --channels-last
  fair -f "$f" --precision tf32 --batch-size 128
}
stage_d() {
  local y="$DIR/maxbatch.yaml"
  sed "s/framework: torch/framework: $FW/" "$HERE/maxbatch.yaml" > "$y"
  [ "$REHEARSE" = 0 ] || sed -i "s/preset: quick/preset: caict/" "$y"  # no 2-second minimum per repeat
  step "$PY" -m dlbench sweep "$y" --store "$STORE"
  KIND=sweep check "max batch found and measured" bert_base \
    'any(p["status"] == "ok" and p["batch_group"] == "max" for p in pts)'
}
stage_e() {
  if [ "$JAX" = jax ] && ! "$PY" -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')" 2>/dev/null; then
    echo "skipped: JAX with a CUDA backend is not installed in $PY"; return
  fi
  run -f "$JAX" -m resnet50 -p bf16 -b 256
  check "jax resnet50 bf16 ok, with an MFU" resnet50 "$ok and $peak_known" "$mfu_range"
  fair -f "$JAX" --precision bf16 --batch-size 256
}

run_stage() {  # run_stage X: one stage into OUT/stage-X, unless its result is there
  DIR="$OUT/stage-$1" STORE="$OUT/stage-$1/store.db"
  if [ -f "$DIR/result.json" ] && [ "$FORCE" = 0 ]; then
    echo "stage $1: done before ($DIR/result.json); --force runs it again"; return 0
  fi
  rm -rf "$DIR"; mkdir -p "$DIR"
  fails=0 KIND="" DEADLINE=$(( $(date +%s) + $(budget "$1") ))
  echo; echo "=== stage $1 (budget $(budget "$1") s) $(date -u +%FT%TZ)"
  "stage_$1" 2>&1 | tee "$DIR/log.txt"
  fails=$(grep -c '^FAIL' "$DIR/log.txt")
  local rehearsal=false; [ "$REHEARSE" = 0 ] || rehearsal=true
  printf '{"stage": "%s", "checks_failed": %d, "budget_s": %d, "used_s": %d, "rehearsal": %s}\n' "$1" "$fails" \
    "$(budget "$1")" $(( $(budget "$1") - $(left) )) "$rehearsal" > "$DIR/result.json"
  echo "stage $1: checks failed: $fails"
  [ "$fails" = 0 ]
}
merge() {  # every stage's store into OUT/store.db, then summary.json and the report
  local s total=0; rm -f "$OUT/store.db"
  for s in a b c d e; do
    [ -f "$OUT/stage-$s/store.db" ] || continue
    "$PY" -m dlbench store pull --all --from "$OUT/stage-$s/store.db" --store "$OUT/store.db" || total=1
  done
  [ -f "$OUT/store.db" ] || { echo "merge: no stage has results in $OUT"; return 1; }
  "$PY" "$HERE/check_run.py" summary "$OUT" > "$OUT/summary.json" || total=1
  "$PY" -m dlbench report --all -o "$OUT/report.html" --title "dlbench GPU validation" --store "$OUT/store.db" \
    || total=1
  echo "merge: $OUT/store.db, $OUT/summary.json, $OUT/report.html"
  return $total
}

status=0
case "$STAGE" in
  merge) merge || status=1 ;;
  all) for s in a b c d e; do run_stage "$s" || status=1; done; merge || status=1 ;;
  *) run_stage "$STAGE" || status=1 ;;
esac
exit $status
