# Runs on the GPU machine (tools/gpu_tf/prepare.sh packs what it needs).
# Unpacks TensorFlow 2.21 (+ carried wheels) into /tmp/site and points TF's CUDA 12
# library names at the machine's CUDA 13 libraries (cudart 12 is carried).
set -e
if [ ! -e /tmp/site/tensorflow/__init__.py ]; then
  mkdir -p /tmp/site
  cat /tmp/tfw/part* | xz -d -T0 | tar x -C /tmp/site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/w/*.whl
fi
mkdir -p /tmp/cu12
for pat in 'libcublas.so.1*' 'libcublasLt.so.1*' 'libcufft.so.1*' 'libcusolver.so.1*' 'libcusparse.so.1*' 'libcudnn.so.9*' 'libnvJitLink.so.1*' 'libcurand.so.1*'; do
  f=$(find /opt /usr/local /usr/lib -name "$pat" 2>/dev/null | grep -v -e cu12 | head -1); echo "$pat -> $f"
  [ -n "$f" ] && echo "$(dirname $f)" >> /tmp/cu12/dirs
done
lnk() { f=$(find /opt /usr/local /usr/lib -name "$1" 2>/dev/null | head -1); [ -n "$f" ] && ln -sf "$f" /tmp/cu12/$2; }
lnk 'libcublas.so.13*' libcublas.so.12; lnk 'libcublasLt.so.13*' libcublasLt.so.12
lnk 'libcufft.so.12*' libcufft.so.11; lnk 'libcusolver.so.12*' libcusolver.so.11; lnk 'libcusparse.so.12*' libcusparse.so.12
lnk 'libcurand.so.10*' libcurand.so.10; lnk 'libnvJitLink.so.13*' libnvJitLink.so.12
ls -la /tmp/cu12
