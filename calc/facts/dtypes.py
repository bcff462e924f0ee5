"""Bytes per element of the dtypes a training step holds."""

FLOAT32 = 4  # variables, optimizer slots and their gradients under every precision
HALF = 2  # float16 and bfloat16, the compute dtype under mixed precision
LABEL_BYTES = 8  # numpy integer labels arrive as int64
