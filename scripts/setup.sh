#!/usr/bin/env bash
# Installs everything metaload needs on a Debian 12 machine (run as root), builds it, then
# runs what you ask for:
#
#   scripts/setup.sh demo    set up, build, run the two-node demo   (README's first command)
#   scripts/setup.sh test    set up, build, run every test          (README's second command)
#   scripts/setup.sh test --quick   set up, build, run the unit tests only (`ctest -L unit`: every
#                            C++ unit binary and the pure-Python ones; the inner loop, < 2 min)
#   scripts/setup.sh build   set up and build only
#   scripts/setup.sh bench   set up, build, run the performance benchmark (README "Performance";
#                            extra arguments go to bench/run_bench.py, e.g. --size-gib 0.25)
#   scripts/setup.sh sanitize  set up, build with ASan + UBSan in build-asan/, run every test there
#   scripts/setup.sh tsan    set up, build Abseil and gRPC with TSan (scripts/tsan-deps.sh, once:
#                            ~25 min), build with TSan in build-tsan/, run the daemon and client tests
#   scripts/setup.sh wheel   set up, build, then package build/ into
#                            dist/metaload-VERSION-cpXY-cpXY-linux_x86_64.whl (scripts/wheel.py):
#                            the Python package, metactl and metad, their libraries; installs with
#                            `pip install FILE.whl` where the same torch is (docs/install.md)
#
# `test` starts with scripts/lint.sh (every C++ file formatted by the pinned clang-format; mypy
# over the Python package) and ends with a libFuzzer smoke run: every parser target for 20 s
# (scripts/fuzz.sh).
#
# Idempotent and quick the second time: apt packages are installed only when missing, the
# virtual environment only when scripts/requirements.txt changed, and the build is
# incremental (build/ is reused).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
what=${1:-build}
case "$what" in demo|test|build|bench|sanitize|tsan|wheel) ;;
  *) echo "usage: scripts/setup.sh demo|test|build|bench|sanitize|tsan|wheel" >&2; exit 2 ;;
esac
shift || true

step() { printf '\n==> %s\n' "$*"; }

apt_packages=(build-essential cmake ninja-build pkg-config ccache python3-venv python3-dev
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev libabsl-dev
  libgtest-dev libgmock-dev nlohmann-json3-dev libyaml-cpp-dev libgloo-dev libssl-dev libxxhash-dev libcurl4-openssl-dev iproute2
  etcd-server etcd-client clang libfuzzer-14-dev libfuse3-dev)
missing=()
for p in "${apt_packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  step "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
  # etcd-server starts a system etcd on 2379 where systemd runs; the tests start their own on
  # free ports (tests/integration/cluster/test_etcd_registry.py), so the one we just installed goes.
  if [[ " ${missing[*]} " == *" etcd-server "* ]] && command -v systemctl >/dev/null &&
     systemctl is-active --quiet etcd 2>/dev/null; then
    systemctl disable --now etcd >/dev/null 2>&1 || true
  fi
fi

# LibTorch comes from PyPI's torch wheel, in a virtual environment inside the checkout.
venv="$root/.venv"
stamp="$venv/.metaload-requirements"
if [ ! -x "$venv/bin/python" ] || ! cmp -s scripts/requirements.txt "$stamp"; then
  step "creating .venv with $(grep -v '^#' scripts/requirements.txt | tr '\n' ' ')(downloads ~4 GB the first time)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r scripts/requirements.txt
  cp scripts/requirements.txt "$stamp"
fi

# Relative paths in the ccache key: a fresh clone elsewhere on this machine reuses the cache.
export CCACHE_BASEDIR="$root"
# Compiles that use the precompiled LibTorch header are cacheable only with these (else every
# one is "Could not use precompiled header" and a warm cache saves nothing).
export CCACHE_SLOPPINESS=pch_defines,time_macros
step "building (build/)"
if [ ! -f build/build.ninja ]; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
fi
ninja -C build -j "$(nproc)"
# `import metaload` in the checkout's .venv: the package is built into build/python.
echo "$root/build/python" > "$(echo "$venv"/lib/python3*/site-packages)/metaload-build.pth"

# A sanitizer build beside build/, and ctest in it. The Python interpreter is not instrumented,
# so the sanitizer runtime is preloaded for the tests that `import metaload` (leak checks off:
# CPython's own allocations at exit would be reported).
sanitizer_env=()  # more VAR=value for the tests only (not the build)
sanitized_tests() {
  local dir=$1 option=$2 runtime=$3 options_var=$4
  shift 4
  step "building with $option ($dir/)"
  if [ ! -f "$dir/build.ninja" ]; then
    launcher=()
    command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-D$option=ON" "${launcher[@]}" >/dev/null
  fi
  ninja -C "$dir" -j "$(nproc)"
  step "tests under $option"
  env LD_PRELOAD="$runtime" "${sanitizer_env[@]}" "$options_var" METALOAD_SANITIZED=1 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ctest --test-dir "$dir" --output-on-failure -j 2 "$@"
}

case "$what" in
  demo) step "demo"; exec scripts/demo.sh ;;
  test)
    if [ "${1:-}" = --quick ]; then
      step "unit tests (ctest -L unit)"
      exec ctest --test-dir build --output-on-failure -j 2 -L unit
    fi
    [ $# -eq 0 ] || { echo "usage: scripts/setup.sh test [--quick]" >&2; exit 2; }
    step "lint: format and types (scripts/lint.sh)"
    scripts/lint.sh
    step "tests"
    ctest --test-dir build --output-on-failure -j 2
    step "fuzz smoke: every parser target for 20 s (docs/fuzzing.md)"
    exec scripts/fuzz.sh --seconds 20 ;;
  sanitize)
    # pip builds a fresh unsanitized copy in its own venv: nothing of ours to check there. The
    # wheel would bundle the sanitizer runtime beside the preloaded one: it packages build/ only.
    sanitized_tests build-asan METALOAD_SANITIZE "$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \
      ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=0 -E 'integration_test_(pip_install|wheel)' ;;
  tsan)
    step "Abseil and gRPC instrumented with TSan (build-tsan-deps/)"
    scripts/tsan-deps.sh
    # Every process the tests start (metad, metactl, Python with our extension) loads these in
    # place of Debian's: TSan then sees absl::Mutex and gRPC's own hand-offs.
    sanitizer_env=("LD_LIBRARY_PATH=$root/build-tsan-deps/prefix/lib")
    sanitized_tests build-tsan METALOAD_TSAN "$(gcc -print-file-name=libtsan.so)" \
      "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp" \
      -R '^(daemon_test|daemon_abuse_test|failover_test|client_test|proto_test|security_test|integration_test_(load|failover|security|served_ranges|connection_limits))$' ;;
  bench) step "benchmark (writes bench.json)"; exec "$venv/bin/python" bench/run_bench.py --build-dir build "$@" ;;
  wheel) step "binary wheel (dist/)"; exec "$venv/bin/python" scripts/wheel.py --build-dir build --out-dir dist "$@" ;;
esac
