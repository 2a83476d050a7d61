#!/usr/bin/env python3
"""Packages build-device/ into .devicepkg/ for scripts/gpu-check-device.sh (a GPU machine that has
torch 2.11 in a Python environment, and none of gRPC, protobuf, Abseil, yaml-cpp, ...).

    .cache/venv312/bin/python scripts/device_pack.py BUILD_DIR OUT_DIR TORCH_SITE_PACKAGES
    (scripts/device-package.sh runs it)

Layout: bin/ (metactl, metactl-load, metad), lib/ (libmetaload.so and every library they need
that is neither the C/C++ runtime's nor torch's or the nvidia wheels', renamed with a digest as
scripts/wheel.py does), python/metaload/ (the package with _native). RUNPATHs are $ORIGIN-relative
only; LibTorch, the CUDA runtime and NCCL come from LD_LIBRARY_PATH, which the check script sets
from the machine's own torch. Reuses scripts/wheel.py's helpers.
"""
import importlib.util
import os
import pathlib
import re
import shutil
import sys

build, out, site = (pathlib.Path(a).resolve() for a in sys.argv[1:4])
# The built source's own scripts/wheel.py (the build may be of an archived commit, not the checkout).
cache = (build / "CMakeCache.txt").read_text()
source = pathlib.Path(re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache, re.M).group(1))
spec = importlib.util.spec_from_file_location("metaload_wheel", source / "scripts" / "wheel.py")
wheel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wheel)

patchelf, strip = wheel.tool("patchelf"), wheel.tool("strip")
if out.exists():
    shutil.rmtree(out)
package = wheel.Package(out, site, patchelf)
# Reuses Package's bundling with this layout: the bundled libraries' folder is lib/, not metaload/lib/.
for built, installed in wheel.BINARIES.items():
    package.add(f"bin/{installed}", build / built, strip)
package.add("lib/libmetaload.so", build / "client" / "libmetaload.so", strip)
(native,) = (build / "python" / "metaload").glob("_native.*.so")
package.add(f"python/metaload/{native.name}", native, strip)
for path in sorted((build / "python" / "metaload").iterdir()):
    if path.is_file() and path.suffix != ".so" and path.name != "built_with_torch.txt":
        shutil.copyfile(path, out / "python" / "metaload" / path.name)

pending = list(package.elves.items())
while pending:
    path, original = pending.pop()
    resolved = package.resolved(original)
    for soname in wheel.needed(patchelf, out / path):
        if wheel.SYSTEM_SONAMES.match(soname) or soname in package.bundled or soname == "libmetaload.so":
            continue
        found = resolved.get(soname)
        if found is None:
            wheel.fail(f"{original}: ldd does not resolve {soname}")
        if found.is_relative_to(site):
            continue  # torch's or an nvidia wheel's: the machine's own
        name = wheel.bundled_name(soname, found)
        package.bundled[soname], package.bundled_from[soname] = name, found
        package.add(f"lib/{name}", found, strip)
        pending.append((f"lib/{name}", found))

for path in package.elves:
    file = out / path
    args = []
    for soname in wheel.needed(patchelf, file):
        if soname in package.bundled:
            args += ["--replace-needed", soname, package.bundled[soname]]
    if path.startswith("lib/") and path != "lib/libmetaload.so":
        args += ["--set-soname", os.path.basename(path)]
    rpath = wheel.origin_path(os.path.dirname(path), "lib")
    wheel.run(patchelf, *args, "--set-rpath", rpath, file)
package.check_runpaths()

(out / "torch.txt").write_text(wheel.run(sys.executable, "-c", "import importlib.metadata as m; print(m.version('torch'))"))

(out / "source.txt").write_text(os.environ.get("DEVICEPKG_SOURCE", f"{source} (working tree)") + "\n")
size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
print(f"{out}: {size / 2**20:.1f} MiB; bundled: {' '.join(sorted(package.bundled))}")
