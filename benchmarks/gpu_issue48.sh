#!/usr/bin/env bash
# Issue 48's GPU figures in one call of the GPU machine (../shared/gpu/README.md): the operator count,
# training throughput eager and compiled (ours against nn.Transformer), and the full recipe's training
# time with --compile. Each step has its own timeout; together they stay under 560 s.
#
# Before, on the CPU, in the checkout (both folders are git-ignored, and carried):
#   .venv/bin/python -m transformer_lib.cli.train --task multi30k --prepare-only --out runs/gpu/data
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d runs/gpu/whl sacremoses jiwer rapidfuzz
# Then: run(command="bash benchmarks/gpu_issue48.sh", carry=["runs/gpu"], timeout_s=590)
# Try it on the CPU first: QUICK=1 bash benchmarks/gpu_issue48.sh (numbers meaningless).
# Results: $OUT/*.json and *.log; commit the JSON under benchmarks/results/.
set -u
OUT=${OUT:-runs/gpu-issue48}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
PY=${PY:-python}
DATA=runs/gpu/data/data.pt
if [ -d runs/gpu/whl ]; then
  $PY -m pip install --quiet --no-index --no-deps --target /tmp/site runs/gpu/whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
fi
$PY -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA")'
if [ -n "${QUICK:-}" ]; then
  QUICK_BENCH="--quick --device cpu --compile-mode backend=aot_eager"; QUICK_OPS="--preset tiny --batch-size 8"
  QUICK_TRAIN="--profile fast --max-steps 20"; DATA_ARGS=""  # no --compile: inductor on a CPU needs a C++ compiler; [ -f "$DATA" ] && DATA_ARGS="--data $DATA"
else
  QUICK_BENCH=""; QUICK_OPS=""; QUICK_TRAIN="--profile full --compile"; DATA_ARGS="--data $DATA"
fi

step() {  # step NAME SECONDS COMMAND...: run it, keep its log, say how it ended
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name: exit $? after $((SECONDS - start)) s (limit $limit s)"
}

step ops 60 $PY benchmarks/bench_ops.py $QUICK_OPS --json "$OUT/ops_per_update.json"
step eager 120 $PY benchmarks/bench_gpu_training.py $DATA_ARGS $QUICK_BENCH --json "$OUT/gpu_training_eager.json"
if [ -n "${QUICK:-}" ]; then
  step compiled 200 $PY benchmarks/bench_gpu_training.py $DATA_ARGS $QUICK_BENCH --compile --json "$OUT/gpu_training_compiled.json"
else
  step compiled 200 $PY benchmarks/bench_gpu_training.py $DATA_ARGS --compile --compile-mode reduce-overhead \
    --json "$OUT/gpu_training_compiled.json"
fi
step recipe 170 $PY -m transformer_lib.cli.train --task multi30k $QUICK_TRAIN $DATA_ARGS --out "$OUT/recipe"

echo; echo "| what | result |"; echo "|---|---|"
$PY - "$OUT" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def read(name):
    path = out / name
    return json.loads(path.read_text()) if path.is_file() else None
ops = read("ops_per_update.json")
if ops:
    print(f"| operators per update, ours / nn.Transformer | {ops['operators']['ours']:,} / {ops['operators']['nn.Transformer']:,} "
          f"= {ops['ratio_ours_over_torch']:.2f}x |")
for name in ("gpu_training_eager.json", "gpu_training_compiled.json"):
    r = read(name)
    if r:
        m = r["models"]
        print(f"| {name} ({r['device_name']}, compile={r['compile']}, {r['batch_shapes']} shapes, warm-up {r['warmup_s']:.0f} s) | "
              f"ours {m['ours']['tokens_per_s']:,.0f} tok/s, nn.Transformer {m['nn.Transformer']['tokens_per_s']:,.0f}: "
              f"{r['ratio_ours_over_torch']:.2f}x |")
log = out / "recipe.log"
if log.is_file():
    print("| recipe (last lines) | " + " / ".join(log.read_text().strip().splitlines()[-3:]) + " |")
EOF
