#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, once every chunk of TensorFlow is in
# /tmp/tfw (tools/gpu_tf/prepare.sh): measures the planned GPU holdout of
# validation/planned.json (tools/sample_holdout.py --gpu, committed before this runs).
#   bash tools/gpu_tf/measure_holdout.sh OUT_DIR [DEADLINE_S] [SEED]
# Writes OUT_DIR/gpu_xla.json (XLA's step, jit_compile=True, set gpu_xla) and
# OUT_DIR/gpu_graph.json (the graph executor, set gpu), with their logs. XLA's step is what
# Keras runs on a GPU by default, so it gets most of the 16 cores; the graph executor runs
# beside it at a lower priority: 15 processes, each with a 4 GiB allocator region and its own
# CUDA context, on an 80 GB card. Runs still going DEADLINE_S seconds (default 420) after
# the start are stopped and lost; what finished is saved as it finished. With SEED, only the
# holdout drawn with that seed (sample_holdout.py --seed), not those measured before.
set -uo pipefail
out=${1:?OUT_DIR}
deadline=${2:-420}
seed=(); [ -n "${3:-}" ] && seed=(--seed "$3")
mkdir -p "$out"
bash .gpu/w/setup.sh > "$out/setup.log" 2>&1 || { tail -20 "$out/setup.log"; exit 1; }
source .gpu/w/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export PYTHONUNBUFFERED=1
stop="timeout -k 5 $((deadline + 20))"
$stop nice -n 10 python3 tools/measure_gpu_tf.py measure "$out/gpu_graph.json" --planned ${seed[@]+"${seed[@]}"} --jobs 3 \
  --limit-mib 4096 --repeats 1 --deadline-s "$deadline" > "$out/graph.log" 2>&1 &
graph=$!
$stop python3 tools/measure_gpu_tf.py measure "$out/gpu_xla.json" --planned ${seed[@]+"${seed[@]}"} --xla --jobs 12 \
  --limit-mib 4096 --repeats 1 --deadline-s "$deadline" 2>&1 | tee "$out/xla.log"
wait $graph
echo "graph executor:"; cat "$out/graph.log"
