#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, once every chunk of TensorFlow is in
# /tmp/tfw (tools/gpu_tf/prepare.sh): measures TensorFlow's XLA step at a scaled limit, the
# steps of set gpu_xla_scaled in validation/planned.json (tools/near_limit.py --slop, committed
# with the plan's predictions before this runs).
#   bash tools/gpu_tf/measure_scaled.sh OUT_DIR DEADLINE_S SEED
# SEED names the card and the scale (tools/near_limit.py SCALED_TAGS: 3712 for an H200 at 8 %).
# The draw's own line says the scale and the region (--slop S --region-mib R):
# XLA plans against S % of its usual limit (XLA_FLAGS=--xla_gpu_memory_limit_slop_factor=S,
# as the plan was compiled), and each step runs in a fresh process with an allocator region of
# R MiB, so a step above the plan's largest batch is expected to fail out of memory (the log
# says FAILED). The steps are small, so they run side by side. XLA writes each compiled step
# with its buffer assignment (--dump-root); xla_dumps.py sums them into OUT_DIR/xla_dumps_scaled.json.
# Writes OUT_DIR/gpu_xla_scaled.json, its failures (gpu_xla_scaled_failed.json) and its log; runs
# still going DEADLINE_S seconds (default 480) after the start are stopped. Back here:
# python tools/near_limit.py --gpu h200 --slop 8 --report OUT_DIR.
set -uo pipefail
out=${1:?OUT_DIR}
deadline=${2:-480}
seed=${3:?SEED: 3712 on an H200 (tools/near_limit.py SCALED_TAGS)}
mkdir -p "$out"
read -r slop region count < <(python3 - "$seed" <<'EOF'
import json, re, sys
drawn = [c["drawn_by"] for c in json.load(open("validation/planned.json"))["cases"]
         if c["set"] == "gpu_xla_scaled" and f"--seed {sys.argv[1]}" in c["drawn_by"]]
if not drawn:
    sys.exit(f"no step of set gpu_xla_scaled was drawn with --seed {sys.argv[1]}")
slop = re.search(r"--slop (\d+)", drawn[0]).group(1)
region = re.search(r"--region-mib (\d+)", drawn[0]).group(1)
print(slop, region, len(drawn))
EOF
) || exit 1
bash .gpu/w/setup.sh > "$out/setup.log" 2>&1 || { tail -20 "$out/setup.log"; exit 1; }
source .gpu/w/env.sh
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/card.txt"
# As many at once as the card holds with 1 GiB each for its CUDA context, at most 10 (16 cores).
jobs=$(( total / (region + 1024) )); [ "$jobs" -gt 10 ] && jobs=10; [ "$jobs" -gt "$count" ] && jobs=$count
echo "$count steps, XLA's limit at $slop %, $region MiB each, $jobs at a time"
export PYTHONUNBUFFERED=1 XLA_FLAGS="--xla_gpu_memory_limit_slop_factor=$slop"
dumps=$(mktemp -d)
timeout -k 5 $((deadline + 20)) python3 tools/measure_gpu_tf.py measure "$out/gpu_xla_scaled.json" --planned \
  --set gpu_xla_scaled --seed "$seed" --xla --jobs "$jobs" --limit-mib "$region" --repeats 1 \
  --deadline-s "$deadline" --dump-root "$dumps" 2>&1 | tee "$out/scaled.log"
python3 tools/gpu_tf/xla_dumps.py "$dumps" "$out/xla_dumps_scaled.json"
rm -rf "$dumps"
