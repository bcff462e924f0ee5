# Sourced on the GPU machine from the repository root after setup.sh: TensorFlow from /tmp/site and
# this checkout's calc (the project is not installed there), the CUDA 12 names first.
export PYTHONPATH=/tmp/site:$PWD LD_LIBRARY_PATH=/tmp/cu12:/tmp/site/nvidia/cuda_runtime/lib:$(sort -u /tmp/cu12/dirs | tr '\n' ':')$LD_LIBRARY_PATH
export CUDA_CACHE_MAXSIZE=4294967296 TF_CPP_MIN_LOG_LEVEL=1
