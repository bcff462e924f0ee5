#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, once every chunk of TensorFlow is in
# /tmp/tfw (tools/gpu_tf/prepare.sh): measures TensorFlow's XLA step at the card's limit,
# the steps of set gpu_xla_limit in validation/planned.json (tools/near_limit.py, committed
# with the plan's predictions before this runs).
#   bash tools/gpu_tf/measure_limit.sh OUT_DIR DEADLINE_S SEED
# SEED names the card's draw (tools/near_limit.py: 3701 for an H100, 3702 for an H200).
# One step at a time, each in a fresh process whose allocator may take the whole card less
# LIMIT_SLACK_MIB (default 1024, for the CUDA context): XLA plans against 80 % of the card's
# memory whatever TensorFlow's allocator holds, and a step above the plan's largest batch is
# expected to fail with an out-of-memory error, which the log records as FAILED. Writes
# OUT_DIR/gpu_xla_limit.json, its failures (gpu_xla_limit_failed.json), XLA's compiled steps
# summed (xla_dumps_limit.json) and its log; runs still going DEADLINE_S seconds (default 480)
# after the start are stopped. Back here: python tools/near_limit.py --gpu h200 --report OUT_DIR.
set -uo pipefail
out=${1:?OUT_DIR}
deadline=${2:-480}
seed=${3:?SEED: 3701 on an H100, 3702 on an H200}
mkdir -p "$out"
bash .gpu/w/setup.sh > "$out/setup.log" 2>&1 || { tail -20 "$out/setup.log"; exit 1; }
source .gpu/w/env.sh
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/card.txt"
export PYTHONUNBUFFERED=1
dumps=$(mktemp -d)
timeout -k 5 $((deadline + 20)) python3 tools/measure_gpu_tf.py measure "$out/gpu_xla_limit.json" --planned \
  --set gpu_xla_limit --seed "$seed" --xla --jobs 1 --limit-mib $((total - ${LIMIT_SLACK_MIB:-1024})) --repeats 1 \
  --deadline-s "$deadline" --dump-root "$dumps" 2>&1 | tee "$out/limit.log"
python3 tools/gpu_tf/xla_dumps.py "$dumps" "$out/xla_dumps_limit.json"
rm -rf "$dumps"
