#!/usr/bin/env bash
# A call to the lent GPU machine carries the working tree with its carried paths, 64 MiB in
# all (docs/PROTOCOL.md, "On a GPU"): the own-model files (calc/data/models, about 120 MB)
# and the screenshots stay out of the tree during those calls. The catalogue steps measured
# there do not read them.
#   bash tools/gpu_tf/aside.sh out    # before the first call: moves them to $CALC_GPU_ASIDE
#   bash tools/gpu_tf/aside.sh back   # after the last call: puts them back
# CALC_GPU_ASIDE defaults to /tmp/calc-gpu-aside.
set -euo pipefail
cd "$(dirname "$0")/../.."
keep=${CALC_GPU_ASIDE:-/tmp/calc-gpu-aside}
paths=(calc/data/models docs/screenshots)
case "${1:-}" in
  out)
    if [ -e "$keep" ]; then echo "$keep exists: put its files back first (aside.sh back)" >&2; exit 1; fi
    for p in "${paths[@]}"; do
      mkdir -p "$keep/$(dirname "$p")"
      mv "$p" "$keep/$p"
    done
    left=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1 || true)
    echo "moved ${paths[*]} to $keep; the tracked files left in the tree: $((left / 1048576)) MiB"
    echo "git sees them deleted: commit nothing until aside.sh back"
    ;;
  back)
    for p in "${paths[@]}"; do
      if [ -e "$p" ]; then echo "$p is in the tree already: nothing moved back" >&2; exit 1; fi
    done
    for p in "${paths[@]}"; do mv "$keep/$p" "$p"; done
    rm -rf "$keep"
    echo "put ${paths[*]} back"
    ;;
  *)
    echo "usage: bash tools/gpu_tf/aside.sh out|back" >&2
    exit 2
    ;;
esac
