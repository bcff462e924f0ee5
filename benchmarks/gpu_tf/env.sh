# Sourced on the GPU machine after setup.sh: TensorFlow from /tmp/site, the CUDA 12 names first.
export PYTHONPATH=/tmp/site LD_LIBRARY_PATH=/tmp/cu12:/tmp/site/nvidia/cuda_runtime/lib:$(sort -u /tmp/cu12/dirs | tr '\n' ':')$LD_LIBRARY_PATH
export CUDA_CACHE_MAXSIZE=4294967296 TF_CPP_MIN_LOG_LEVEL=1
