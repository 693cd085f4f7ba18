#!/usr/bin/env bash
# The GPU validation run (issue #10): everything dlbench's GPU path must get right, on one NVIDIA GPU, in under
# 10 minutes. Usage: bash benchmarks/gpu/validate.sh [OUT_FOLDER]   (default: ./gpu-validation)
# Needs torch with CUDA in this Python (JAX with CUDA optional). Writes OUT/store.db, OUT/log.txt, OUT/report.html
# and OUT/summary.json; prints every figure it measured. Each check prints PASS or FAIL; exit 1 on any FAIL.
set -uo pipefail
OUT=${1:-gpu-validation}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
STORE="$OUT/store.db"
HERE=$(cd "$(dirname "$0")" && pwd)
exec > >(tee -a "$OUT/log.txt") 2>&1
fails=0
say() { echo; echo "=== $*"; }
db() { "$PY" -m dlbench "$@" --store "$STORE"; }
run() { db run --device cuda --warmup 10 --steps 50 --repeats 3 "$@"; }
check() {  # check LABEL PYTHON-EXPR-over-the-last-run's-points (list of dicts with status, throughput ...)
  "$PY" "$HERE/last_run.py" "$STORE" "$1" "$2" || fails=$((fails + 1))
}

say "1. the device dlbench sees"
"$PY" -m dlbench env --device cuda

say "2. torch ResNet-50 amp, batch 256, NCHW then channels_last"
run -m resnet50 -p amp -b 256
check "resnet50 amp NCHW ok" 'all(p["status"] == "ok" for p in pts)'
check "resnet50 amp has an MFU against the GPU's datasheet peak, between 0 and 1" \
  'all(p["mfu"] is not None and 0 < p["mfu"] <= 1 for p in pts)'
run -m resnet50 -p amp -b 256 --channels-last
check "resnet50 amp channels_last ok" 'all(p["status"] == "ok" for p in pts)'

say "3. torch BERT-base amp, batch 64"
run -m bert_base -p amp -b 64
check "bert_base amp ok" 'all(p["status"] == "ok" for p in pts)'

say "4. fp32 (IEEE) against tf32, ResNet-50 batch 128: the math mode is recorded and tf32 is faster"
run -m resnet50 -p fp32,tf32 -b 128
check "fp32 and tf32 record their math modes, tf32 faster" \
  'len(pts) == 2 and pts[0]["math_mode"] != pts[1]["math_mode"] and pts[1]["throughput"] > pts[0]["throughput"]'

say "5. the harness against a bare torch loop in the same run (ratio = dlbench / bare; 3 interleaved rounds)"
"$PY" "$HERE/../fairness.py" -f torch --device cuda --precision amp --batch-size 256 --steps 50 --warmup 10 --rounds 3
"$PY" "$HERE/../fairness.py" -f torch --device cuda --precision amp --batch-size 256 --steps 50 --warmup 10 --rounds 3 --channels-last
"$PY" "$HERE/../fairness.py" -f torch --device cuda --precision fp32 --batch-size 128 --steps 30 --warmup 5 --rounds 3
"$PY" "$HERE/../fairness.py" -f torch --device cuda --precision tf32 --batch-size 128 --steps 30 --warmup 5 --rounds 3

# 2048 images need about 200 GB for ResNet-50's fp32 activations (about 100 MB an image), more than an H100 (80 GB)
# or an H200 (141 GB) has, while its largest tensor (2048 x 64 x 112 x 112) stays under 2^31 elements: the point
# fails for memory alone (8192 made tensors of 6.6e9 elements, which may fail for another reason first).
OOM_BATCH=2048
say "6. an out-of-memory point must read oom (ResNet-50 fp32 at batch $OOM_BATCH)"
db run --device cuda -m resnet50 -p fp32 -b "$OOM_BATCH" --warmup 1 --steps 2 --repeats 1
check "batch $OOM_BATCH is oom" 'len(pts) == 1 and pts[0]["status"] == "oom"'

say "7. a max-batch search (BERT-base amp, 1..4096)"
"$PY" -m dlbench sweep "$HERE/maxbatch.yaml" --store "$STORE"
check "max batch found and measured" 'any(p["status"] == "ok" and p["batch_group"] == "max" for p in pts)'

say "8. JAX ResNet-50 bf16, batch 256 (where JAX with CUDA is installed)"
if "$PY" -c "import jax, sys; sys.exit(0 if jax.default_backend() == 'gpu' else 1)" 2>/dev/null; then
  run -f jax -m resnet50 -p bf16 -b 256
  check "jax resnet50 bf16 ok" 'all(p["status"] == "ok" for p in pts)'
  "$PY" "$HERE/../fairness.py" -f jax --device cuda --precision bf16 --batch-size 256 --steps 50 --warmup 10 --rounds 3
else
  echo "skipped: JAX with a CUDA backend is not installed in $PY"
fi

say "9. everything stored, and the report"
db results --last 20
db results --last 20 --format json > "$OUT/summary.json"
db report --all -o "$OUT/report.html" --title "dlbench GPU validation"

say "checks failed: $fails"
exit $(( fails > 0 ))
