#!/usr/bin/env bash
# Makes .flashinfer/ (git-ignored): FlashInfer 0.7.2 for `benches/flashinfer_baselines.py` on the
# GPU machine, which has python 3.12, torch 2.11 (CUDA 13.0) and an H100 or H200, but no network,
# no FlashInfer and no tvm-ffi. Carry it with the bundle (`cargo xtask bundle-device` counts it).
#
# FlashInfer compiles its kernels on first use (JIT, nvcc); nothing may compile there, so its
# `sampling` and `topk` modules are built here for sm_90a with the nvcc wheel of CUDA 13.0 (the
# machine's driver runs CUDA 13.0) and placed where FlashInfer looks for modules built ahead
# (`flashinfer/data/aot/<name>/<name>.so`). Its wheel is 62 MiB, its package 432 MiB unpacked
# (10,342 files: every kernel family's sources), so .flashinfer holds only the Python modules
# that importing `flashinfer.sampling` and `flashinfer.topk` reads (the bench loads them without
# the package's `__init__`, which imports every family), and tvm-ffi's cp312 wheel unpacked. The rest it needs
# (numpy, filelock, packaging, requests, tqdm, nvidia-ml-py, typing-extensions) is in the
# machine's image.
#
# Needs the network (PyPI), python3 with venv, a host g++, and about 6 GB in the build folder
# (flashinfer's JIT imports torch, so the build installs torch 2.11 there: 4.7 GB). The sampling
# module took 10 minutes and the top-k module over an hour on two cores shared with other builds
# (load average 11, 2026-12-07); a second run reuses what the first built.
#
#   bash benches/flashinfer_prepare.sh            # build folder: target/flashinfer-build
#   FLASHINFER_BUILD=/tmp/fi bash benches/flashinfer_prepare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dest=$root/.flashinfer
build=$(mkdir -p "${FLASHINFER_BUILD:-target/flashinfer-build}" && cd "${FLASHINFER_BUILD:-target/flashinfer-build}" && pwd)
version=0.7.2
tvm=0.1.15.post2
cuda=13.0.88

# A python with torch 2.11 (as the GPU machine's), tvm-ffi, the nvcc of CUDA 13.0 and what
# importing flashinfer's sampling needs.
venv=$build/venv
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "torch==2.11.0" "apache-tvm-ffi==$tvm" filelock packaging nvidia-ml-py requests \
        tqdm numpy ninja "nvidia-cuda-nvcc==$cuda" "nvidia-cuda-crt==$cuda" "nvidia-nvvm==$cuda" "nvidia-cuda-cccl==13.0.*"
fi
py=$venv/bin/python

# FlashInfer's wheel, unpacked (its sources and headers for the build), and tvm-ffi's for the
# GPU machine's python 3.12.
pkg=$build/pkg
if [ ! -f "$pkg/flashinfer/version.py" ]; then
    "$py" -m pip download -q --no-deps -d "$build/wheels" "flashinfer-python==$version"
    rm -rf "$pkg" && mkdir -p "$pkg"
    unzip -q "$build/wheels/flashinfer_python-$version-py3-none-any.whl" -d "$pkg"
fi
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    -d "$build/wheels312" "apache-tvm-ffi==$tvm"

# A CUDA home as FlashInfer's ninja file expects it ($cuda_home/bin/nvcc, lib64, lib64/stubs):
# links into the nvcc wheel, and an empty libcuda.so for the link line's -lcuda (nothing in
# these modules calls the driver directly, so the library is not even recorded as needed).
cu=$("$py" -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13'))")
home=$build/cuda
mkdir -p "$home/lib64/stubs"
for d in bin include nvvm; do ln -sfn "$cu/$d" "$home/$d"; done
ln -sf "$cu/lib/libcudart.so.13" "$home/lib64/libcudart.so"
echo "" >"$build/empty.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$home/lib64/stubs/libcuda.so" "$build/empty.c"

# Build both modules for sm_90a (the H100's and H200's), with FlashInfer's own ninja rules.
export CUDA_HOME=$home PATH=$home/bin:$venv/bin:$PATH FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=$build/ws
(cd "$pkg" && "$py" -c "
from flashinfer.jit.sampling import gen_sampling_module
from flashinfer.jit.topk import gen_topk_module
for gen in (gen_sampling_module, gen_topk_module):
    spec = gen()
    spec.build()
    print('built', spec.jit_library_path)
")

# .flashinfer/site: the modules importing sampling and topk reads, the two built modules, and
# tvm-ffi.
rm -rf "$dest"
mkdir -p "$dest/site"
(cd "$pkg" && "$py" -c "
import os, sys, types
package = types.ModuleType('flashinfer'); package.__path__ = [os.path.abspath('flashinfer')]
sys.modules['flashinfer'] = package
import flashinfer.sampling, flashinfer.topk, flashinfer.version
for m in list(sys.modules.values()):
    f = getattr(m, '__file__', None)
    if m.__name__.startswith('flashinfer.') and f:
        print(os.path.relpath(f))
") | sort >"$build/modules.txt"
(cd "$pkg" && xargs -a "$build/modules.txt" cp --parents -t "$dest/site")
for name in sampling topk; do
    mkdir -p "$dest/site/flashinfer/data/aot/$name"
    cp "$(find "$build/ws" -path "*/cached_ops/$name/$name.so")" "$dest/site/flashinfer/data/aot/$name/"
done
unzip -q "$build/wheels312/apache_tvm_ffi-$tvm-cp312-"*.whl -d "$dest/tvm"
echo "FlashInfer $version (sampling, topk for sm_90a) and tvm-ffi $tvm; made by benches/flashinfer_prepare.sh" >"$dest/README"

# Check: the carried modules load (here with the build's python 3.11 tvm-ffi, the same version;
# no GPU is needed to load them, only to run them).
PYTHONPATH=$dest/site FLASHINFER_CUDA_ARCH_LIST=9.0a "$py" benches/flashinfer_baselines.py --check-load
echo ".flashinfer: $(du -sh "$dest" | cut -f1) ($(wc -l <"$build/modules.txt") modules)"
