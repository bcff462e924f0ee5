"""TensorFlow's BFC allocator and its reported peak: the constants the engine counts with.

``tensorflow/tsl/framework/bfc_allocator.cc`` (kMinAllocationSize,
kMaxInternalFragmentation, the region growth) and the CPU build's small-size allocator;
``calc.engine.allocator`` simulates the allocator with them.
"""

# The allocator hands out multiples of 256 bytes (kMinAllocationSize; docs/notes/allocator.md).
ALLOCATION_GRANULE = 256
# With oneDNN on (the default x86-64 build), TensorFlow's CPU allocator serves
# requests below 256 KiB from a separate small-size allocator whose bytes the
# reported peak does not include (measured: tensors of 65,536 and 200,000 bytes
# leave ``current`` unchanged, 262,144 bytes add 262,144; mkl_cpu_allocator.h
# kSmallAllocationsThreshold). On a GPU the BFC allocator serves and counts every request.
UNTRACKED_BELOW = 262_144
# The BFC allocator hands out a free chunk unsplit unless it is at least twice the
# request or the remainder is at least 128 MiB (kMaxInternalFragmentation), so a tensor
# often occupies more than its size. Measured on stacks of one layer type
# (archive/probes/probe_layers.py): each added feature map raised the peak by 1.08x its size.
FRAGMENTATION = 0.08
SPLIT_ALWAYS_ABOVE = 128 << 20
# Free chunks are kept in 21 bins by size class: bin b holds [256 * 2^b, 256 * 2^(b+1)).
NUM_BINS = 21
# With allow_growth the pool grows by regions of 2 MiB at first, doubling.
INITIAL_REGION = 2 << 20
