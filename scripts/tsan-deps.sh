#!/usr/bin/env bash
# Builds Abseil and gRPC instrumented with ThreadSanitizer, from Debian 12's own source packages
# (the versions the project links: abseil 20220623.1, gRPC 1.51.1), into build-tsan-deps/lib.
# `scripts/setup.sh tsan` runs the tests with LD_LIBRARY_PATH pointing there, so that metad and
# the tests load these in place of Debian's binaries: same versions and sonames, so the same
# ABI. Without them TSan cannot see an absl::Mutex (its lock and unlock are in libabsl's
# uninstrumented code) and reports every access it guards as a race.
#
# Once per machine: ~25 minutes on 2 cores (measured: 1 min Abseil, 22 min gRPC, beside another
# build; gRPC's core is most of it); later runs only check.
# Needs the deb-src lines for Debian's main archive; adds them when absent.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(pwd)/build-tsan-deps
prefix=$out/prefix
if [ -f "$prefix/.complete" ]; then exit 0; fi
mkdir -p "$out"
cd "$out"

if ! apt-get source --download-only --print-uris abseil >/dev/null 2>&1; then
  echo "==> adding Debian's source archive (deb-src) to apt"
  cat > /etc/apt/sources.list.d/metaload-debsrc.sources <<'SOURCES'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  apt-get update -qq
fi
# The installed binary packages' exact versions, so that the sources match what we link.
absl_version=$(dpkg-query -W -f='${source:Version}' libabsl20220623)
grpc_version=$(dpkg-query -W -f='${source:Version}' libgrpc++1.51)
[ -d abseil-src ] || { apt-get source -qq "abseil=$absl_version" >/dev/null && mv abseil-20220623* abseil-src; }
[ -d grpc-src ] || { apt-get source -qq "grpc=$grpc_version" >/dev/null && mv grpc-1.51* grpc-src; }

tsan=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON
  "-DCMAKE_C_FLAGS=-fsanitize=thread -fno-omit-frame-pointer"
  "-DCMAKE_CXX_FLAGS=-fsanitize=thread -fno-omit-frame-pointer"
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread)
command -v ccache >/dev/null && tsan+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

echo "==> Abseil $absl_version with TSan"
cmake -S abseil-src -B abseil-build -G Ninja "${tsan[@]}" -DBUILD_TESTING=OFF \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib >/dev/null
ninja -C abseil-build -j "$(nproc)" install >/dev/null

echo "==> gRPC $grpc_version with TSan (libgrpc++ and what it links)"
# As Debian builds it (debian/rules), against the Abseil above; no code generators.
cmake -S grpc-src -B grpc-build -G Ninja "${tsan[@]}" -DgRPC_BUILD_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -DgRPC_ABSL_PROVIDER=package -DgRPC_CARES_PROVIDER=package -DgRPC_PROTOBUF_PROVIDER=package \
  -DgRPC_RE2_PROVIDER=package -DgRPC_SSL_PROVIDER=package -DgRPC_ZLIB_PROVIDER=package \
  -DgRPC_BENCHMARK_PROVIDER=none -DgRPC_BACKWARDS_COMPATIBILITY_MODE=OFF -DgRPC_BUILD_CODEGEN=OFF \
  -DgRPC_BUILD_GRPC_CPP_PLUGIN=OFF -DgRPC_BUILD_GRPC_CSHARP_PLUGIN=OFF -DgRPC_BUILD_GRPC_NODE_PLUGIN=OFF \
  -DgRPC_BUILD_GRPC_OBJECTIVE_C_PLUGIN=OFF -DgRPC_BUILD_GRPC_PHP_PLUGIN=OFF \
  -DgRPC_BUILD_GRPC_PYTHON_PLUGIN=OFF -DgRPC_BUILD_GRPC_RUBY_PLUGIN=OFF \
  -DProtobuf_PROTOC_LIBRARY="$(ls /usr/lib/*/libprotoc.so.* | head -n 1)" >/dev/null
ninja -C grpc-build -j "$(nproc)" grpc++
cp -a grpc-build/lib*.so* "$prefix/lib/"
touch "$prefix/.complete"
echo "==> TSan-instrumented Abseil and gRPC in $prefix/lib"
