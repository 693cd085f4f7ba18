#!/usr/bin/env bash
# The GPU validation (issues #28, #40) in independent stages, each with its own budget, store and log under OUT:
#   bash benchmarks/gpu/validate.sh [--pack DIR] STAGE [OUT]  STAGE: a b llama c d e, merge, or all (then merge)
#   bash benchmarks/gpu/validate.sh --rehearse [OUT]          every stage and the merge on this CPU, into a new or
#                                                             empty OUT: the fake backend on a fake GPU at NVML's
#                                                             boundary (wiring only: no timing, no band)
# DLBENCH_GPU_REHEARSAL=1 rehearses any stage the same way (the offline node's exact command, rehearsed in CI).
# OUT defaults to ./gpu-validation. A stage whose OUT/stage-X/result.json exists is skipped (its results came back
# and were committed); a stage cut off before its end left none and runs again, its earlier try kept beside it as
# OUT/stage-X.earlier-<time> (as one --force reruns). Nothing a call did not create is deleted or replaced.
# --pack DIR: as each stage (and the merge) ends, its folder is packed into DIR/stage-X.tgz (DIR/merge.tgz),
# written then renamed, so that a command cut at its limit leaves whole archives only.
# Each check reads only the run its own step created (check_run.py) and FAILs when the step exited non-zero,
# created no run, or stored points of another model or device. Exit 1 when any check failed.
# Budgets on one H200 (worker start, cuDNN autotuning, compilation and the measured steps; cut off at the budget):
#   a      155 s  dlbench env; ResNet-50 amp channels-last b256 and BERT-base amp b64 under DLPerf's method (MFU)
#   b       85 s  ResNet-50 fp32 vs tf32 batch 128 (math modes recorded); the OOM point (fp32, batch 2048)
#   llama  140 s  llama3_1b bf16 b2 at 8192 tokens (MFU against the dense bf16 peak); fp8 --compile (torchao)
#   c      240 s  one fairness round each: torch amp channels-last b256, torch tf32 b128; judged 0.95-1.05
#   d      180 s  max-batch search, BERT-base amp, 256..2048 (maxbatch.yaml), then the largest batch measured
#   e      240 s  JAX ResNet-50 bf16 batch 256, and its fairness round (skipped, saying so, without JAX on a GPU)
#   merge   40 s  every stage's store into OUT/store.db, OUT/summary.json, OUT/report.html
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
STAGES="a b llama c d e"
FORCE=0 REHEARSE=0 NEW=0 STAGE="" PACK=""
[ -z "${DLBENCH_GPU_REHEARSAL:-}" ] || REHEARSE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --force) FORCE=1; shift ;;
    --rehearse) REHEARSE=1; NEW=1; STAGE=all; shift ;;
    --pack) [ $# -ge 2 ] || { echo "validate.sh: --pack needs a folder" >&2; exit 2; }; PACK=$2; shift 2 ;;
    a|b|llama|c|d|e|merge|all) STAGE=$1; shift ;;
    -*) echo "validate.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ -n "$STAGE" ] || { echo "usage: validate.sh [--pack DIR] STAGE [OUT] (a b llama c d e merge all) | --rehearse [OUT]" >&2; exit 2; }
OUT=${1:-gpu-validation}
if [ "$NEW" = 1 ] && [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
  echo "validate.sh: --rehearse writes into a new or empty folder; $OUT is not empty (nothing was changed)" >&2
  exit 2
fi
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
if [ -n "$PACK" ]; then mkdir -p "$PACK" && PACK=$(cd "$PACK" && pwd) || exit 2; fi

# What runs: torch and JAX on a GPU; in the rehearsal the fake backend (1 ms steps, out of memory above batch 300)
# on a fake H100 (benchmarks/gpu/rehearsal/pynvml.py), a few steps, the fairness loops' fake, no band judged.
# HEAD: stage a under DLPerf's published method (docs/protocol.md: 20 warm-up and 100 measured steps, 7 repeats,
# their median); LLM: the Llama points' short window (the figure is a first read of the decoder, n=3).
FW=torch JAX=jax BAND=0.95,1.05 LLAMA_BATCH=2
HEAD=(--preset dlperf) STEPS=(--warmup 10 --steps 50 --repeats 3) LLM=(--warmup 5 --steps 10 --repeats 3)
FAIR=(--steps 30 --warmup 10)
if [ "$REHEARSE" = 1 ]; then
  FW=fake JAX=fake BAND=0,1e9
  HEAD=(--preset dlperf --warmup 1 --steps 2 --repeats 1) STEPS=(--preset caict --warmup 1 --steps 2 --repeats 1)
  LLM=("${STEPS[@]}") FAIR=(--steps 2 --warmup 1)
  export PYTHONPATH="$HERE/rehearsal${PYTHONPATH:+:$PYTHONPATH}" DLBENCH_FAKE=${DLBENCH_FAKE:-oom_above:300}
  export DLBENCH_FAKE_COMPILES=1  # the fake accepts --compile (the Llama stage's fp8 point), compiling nothing
  export DLBENCH_HOME=${DLBENCH_HOME:-$OUT/home}
fi
PROTO=("${STEPS[@]}")
budget() { case "$1" in a) echo 155 ;; b) echo 85 ;; llama) echo 140 ;; c) echo 240 ;; d) echo 180 ;; e) echo 240 ;; esac; }

left() { echo $(( DEADLINE - $(date +%s) )); }
# step CMD...: run one step within what is left of the stage's budget; its exit status in $rc
step() {
  local t; t=$(left)
  if [ "$t" -le 5 ]; then echo "out of budget: not run: $*"; rc=124; return; fi
  "$PY" "$HERE/check_run.py" ids "$STORE" > "$DIR/before"
  timeout "$t" "$@"; rc=$?
}
run() { step "$PY" -m dlbench run --device cuda "${PROTO[@]}" --store "$STORE" "$@"; }
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
# the published figure names its dlbench: a version and a commit (stamped in a tree copied without .git)
named='all(p["dlbench_version"] not in (None, "", "0.0.0+unknown") and p["git_commit"] for p in pts)'
dlperf='all(p["protocol"]["preset"] == "dlperf" for p in pts)'
dlperf_method='all([p["protocol"][k] for k in ("warmup", "steps", "repeats", "statistic")] == [20, 100, 7, "median"] for p in pts)'

stage_a() {
  PROTO=("${HEAD[@]}")
  step "$PY" -m dlbench env --device cuda --framework "$FW"
  [ "$rc" = 0 ] || { echo "FAIL: dlbench env --device cuda exited $rc"; fails=$((fails + 1)); }
  run -f "$FW" -m resnet50 -p amp -b 256 --channels-last
  check "resnet50 amp channels-last ok under DLPerf's method, with an MFU" resnet50 \
    "$ok and $peak_known and $named and $dlperf and all(p['channels_last'] for p in pts)" "$mfu_range and $dlperf_method"
  run -f "$FW" -m bert_base -p amp -b 64
  check "bert_base amp ok under DLPerf's method, with an MFU" bert_base "$ok and $peak_known and $named and $dlperf" \
    "$mfu_range and $dlperf_method"
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
# The Llama stage (#40): llama3_1b (Llama 3.2 1B's shape, 8192 tokens) at the stated batch 2, as llm-h100 runs it
# on one H100 (no max-batch search: its probes would not fit the window); fp8 compiled where torchao imports.
fp8_ready() {  # torchao imports here (the rehearsal: its wheel is unpacked, with no torch to import it against)
  if [ "$REHEARSE" = 1 ]; then
    "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('torchao') is None)" 2>/dev/null
  else
    "$PY" -c "import torchao" 2>/dev/null
  fi
}
stage_llama() {
  PROTO=("${LLM[@]}")
  run -f "$FW" -m llama3_1b -p bf16 -b "$LLAMA_BATCH"
  check "llama3_1b bf16 ok, with an MFU against the dense bf16 peak" llama3_1b "$ok and $peak_known and $named" \
    "$mfu_range"
  if fp8_ready; then
    run -f "$FW" -m llama3_1b -p fp8 -b "$LLAMA_BATCH" --compile
    check "llama3_1b fp8 compiled ok, with an MFU" llama3_1b "$ok and $peak_known and all(p['compiled'] for p in pts)" \
      "$mfu_range"
  else
    echo "skipped: llama3_1b fp8 (torchao does not import in $PY; its wheel is in benchmarks/gpu/wheels.txt)"
  fi
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
  # dlbench's JAX backend must load wherever JAX is installed (on the node: no Grain), in the rehearsal too
  if "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('jax') is None)" 2>/dev/null; then
    local answer
    if ! answer=$("$PY" -m dlbench.check cuda jax 2>&1); then
      echo "FAIL: dlbench's JAX backend does not load in $PY: $(printf '%s\n' "$answer" | tail -1)"; return
    fi
    if [ "$REHEARSE" = 0 ] && ! printf '%s\n' "$answer" | tail -1 | grep -q '"reason": null'; then
      echo "skipped: JAX sees no GPU here: $(printf '%s\n' "$answer" | tail -1)"; return
    fi
  elif [ "$JAX" = jax ]; then
    echo "skipped: JAX is not installed in $PY"; return
  fi
  run -f "$JAX" -m resnet50 -p bf16 -b 256
  check "jax resnet50 bf16 ok, with an MFU" resnet50 "$ok and $peak_known" "$mfu_range"
  fair -f "$JAX" --precision bf16 --batch-size 256
}

stamp() { date -u +%Y%m%dT%H%M%SZ; }
pack() {  # pack NAME PATH...: OUT's PATHs into PACK/NAME.tgz, written then renamed (nothing without --pack)
  [ -n "$PACK" ] || return 0
  tar czf "$PACK/.$1.tgz.part" -C "$OUT" "${@:2}" && mv -f "$PACK/.$1.tgz.part" "$PACK/$1.tgz"
}
run_stage() {  # run_stage X: one stage into OUT/stage-X, unless its result is there
  DIR="$OUT/stage-$1" STORE="$OUT/stage-$1/store.db"
  if [ -f "$DIR/result.json" ] && [ "$FORCE" = 0 ]; then
    echo "stage $1: done before ($DIR/result.json); --force runs it again"; pack "stage-$1" "stage-$1"; return 0
  fi
  if [ -e "$DIR" ]; then  # a try cut off before its end, or one --force reruns: kept beside, never deleted
    local earlier; earlier="$DIR.earlier-$(stamp)"
    mv "$DIR" "$earlier" || return 1
    echo "stage $1: the earlier try kept in $earlier"
  fi
  mkdir -p "$DIR"
  fails=0 KIND="" DEADLINE=$(( $(date +%s) + $(budget "$1") ))
  echo; echo "=== stage $1 (budget $(budget "$1") s) $(date -u +%FT%TZ)"
  "stage_$1" 2>&1 | tee "$DIR/log.txt"
  fails=$(grep -c '^FAIL' "$DIR/log.txt")
  local rehearsal=false; [ "$REHEARSE" = 0 ] || rehearsal=true
  printf '{"stage": "%s", "checks_failed": %d, "budget_s": %d, "used_s": %d, "rehearsal": %s}\n' "$1" "$fails" \
    "$(budget "$1")" $(( $(budget "$1") - $(left) )) "$rehearsal" > "$DIR/result.json"
  echo "stage $1: checks failed: $fails"
  pack "stage-$1" "stage-$1"
  [ "$fails" = 0 ]
}
merge() {  # every stage's store into a new store, summary.json and report, then moved into OUT (earlier ones kept)
  local s f stores=() total=0 tmp earlier=""  # stores: whether there is anything to merge
  for s in $STAGES; do [ -f "$OUT/stage-$s/store.db" ] && stores+=("$OUT/stage-$s/store.db"); done
  if [ ${#stores[@]} = 0 ]; then echo "merge: no stage has results in $OUT: nothing merged, nothing changed"; return 1; fi
  tmp=$(mktemp -d "$OUT/.merge-XXXXXX") || return 1
  # shellcheck disable=SC2086
  "$PY" "$HERE/check_run.py" gather "$OUT" "$tmp" $STAGES || total=1
  "$PY" -m dlbench report --all -o "$tmp/report.html" --title "dlbench GPU validation" --store "$tmp/store.db" \
    || total=1
  for f in store.db summary.json report.html; do
    [ -e "$OUT/$f" ] || continue
    [ -n "$earlier" ] || { earlier="$OUT/merge.earlier-$(stamp)"; mkdir -p "$earlier" || return 1; }
    mv "$OUT/$f" "$earlier/" || return 1
  done
  [ -z "$earlier" ] || echo "merge: the earlier merge's files kept in $earlier"
  if [ -s "$tmp/store.db-wal" ]; then echo "merge: the merged store was not closed ($tmp kept)"; return 1; fi
  for f in store.db summary.json report.html; do [ ! -e "$tmp/$f" ] || mv "$tmp/$f" "$OUT/$f"; done
  rm -rf "$tmp"  # this call's own scratch
  echo "merge: $OUT/store.db, $OUT/summary.json, $OUT/report.html"
  local made=(); for f in store.db summary.json report.html; do [ ! -e "$OUT/$f" ] || made+=("$f"); done
  pack merge "${made[@]}"
  if [ -n "$PACK" ] && [ -f "$OUT/summary.json" ]; then
    cp "$OUT/summary.json" "$PACK/.summary.json.part" && mv -f "$PACK/.summary.json.part" "$PACK/summary.json"
  fi
  return $total
}

status=0
case "$STAGE" in
  merge) merge || status=1 ;;
  all) for s in $STAGES; do run_stage "$s" || status=1; done; merge || status=1 ;;
  *) run_stage "$STAGE" || status=1 ;;
esac
exit $status
