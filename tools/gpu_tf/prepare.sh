#!/usr/bin/env bash
# Packs TensorFlow 2.21 for a lent GPU machine (tools/measure_gpu_tf.py; docs/PROTOCOL.md,
# "On a GPU"). Those machines hold PyTorch and JAX with CUDA 13 and no TensorFlow, can
# fetch nothing, and take 64 MiB per call, so the wheel travels as xz chunks under .gpu/ (ignored):
#   .gpu/ppartNN/partNN  one chunk each: carry one per call, then `mkdir -p /tmp/tfw && mv .gpu/p*/part* /tmp/tfw/`
#   .gpu/w               the small wheels (keras, protobuf, ...), cudart 12 and the two scripts beside this one
# On the machine, once every chunk is there: `bash .gpu/w/setup.sh; source .gpu/w/env.sh`, then
# `python3 tools/measure_gpu_tf.py measure $OUT/gpu_tf_h100.json [--xla] ...` (carry .gpu/w each call).
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gpu/' .git/info/exclude || echo '/.gpu/' >> .git/info/exclude
work=$(mktemp -d)
pip_dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$@"; }
pip_dl "$work" tensorflow==2.21.0
mkdir -p .gpu/w
pip_dl .gpu/w keras==3.15.1 namex==0.1.0 optree==0.20.0 gast==0.7.0 astunparse==1.6.3 google-pasta==0.2.0 \
  termcolor==3.3.0 protobuf==7.36.2 ml_dtypes==0.6.0 wrapt==2.1.2 nvidia-cuda-runtime-cu12==12.9.79
cp tools/gpu_tf/setup.sh tools/gpu_tf/env.sh .gpu/w/
(cd "$work" && mkdir stage && cd stage && unzip -q ../tensorflow-*.whl && rm -rf tensorflow/include \
  && tar cf - tensorflow tensorflow-2.21.0.dist-info | xz -6 -T0 > ../tf.tar.xz)
(cd "$work" && split -b 53M -d -a 2 tf.tar.xz part)
for p in "$work"/part*; do n=$(basename "$p"); mkdir -p ".gpu/p$n" && mv "$p" ".gpu/p$n/"; done
rm -rf "$work"
ls -la .gpu/*
