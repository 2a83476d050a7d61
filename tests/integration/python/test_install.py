"""`cmake --install` gives C++ launchers the client library: a LibTorch program configured with
find_package(metaload) against the installed prefix (tests/install/consumer/) builds against
the public facade alone (include/metaload/, the only headers installed), links the installed
libmetaload.so, and loads a checkpoint with it.

Oracle: the bytes torch wrote to model.safetensors, compared with what the program read.
"""
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import torch
from safetensors.torch import save_file

from conftest import BUILD_DIR, SOURCE_DIR

CONSUMER_SOURCE = SOURCE_DIR / "tests" / "install" / "consumer"
# Headers an installed one may include without installing them: Abseil is a dependency.
EXTERNAL_PREFIXES = ("absl/",)
# Values exact in every dtype here, and a shape with a stride to get wrong.
TENSORS = {
    "embed.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4) / 4 - 1,
    "norm.weight": torch.tensor([1.5, -2.0, 0.0078125, 3.0], dtype=torch.bfloat16),
    "step": torch.tensor([7, -1], dtype=torch.int64),
}


def run(args, timeout, **kwargs):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, args))} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(prefix, consumer binary): the build installed into a fresh prefix, the consumer built against it."""
    tmp = tmp_path_factory.mktemp("install")
    prefix = tmp / "prefix"
    run(["cmake", "--install", BUILD_DIR, "--prefix", prefix], timeout=120)
    configure = ["cmake", "-S", CONSUMER_SOURCE, "-B", tmp / "build", "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                 f"-DCMAKE_PREFIX_PATH={prefix}"]
    env = dict(os.environ)
    if shutil.which("ccache"):
        # Paths under tmp relative in the cache key, so that each run's fresh prefix still hits.
        configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        env["CCACHE_BASEDIR"] = str(tmp)
    run(configure, timeout=120, env=env)
    run(["cmake", "--build", tmp / "build"], timeout=600, env=env)
    return prefix, tmp / "build" / "consumer"


def test_the_installed_include_folder_holds_only_the_public_facade(installed):
    """include/metaload/*.h and nothing else: no internal header (client/, planner/, util/...)
    is installed, and none of include/metaload/ is left out."""
    prefix, _ = installed
    include_root = prefix / "include"
    installed_files = sorted(p.relative_to(include_root).as_posix() for p in include_root.rglob("*") if p.is_file())
    facade = sorted(f"metaload/{p.name}" for p in (SOURCE_DIR / "include" / "metaload").glob("*.h"))
    assert {"metaload/errors.h", "metaload/load.h", "metaload/materialize.h", "metaload/verify.h"} <= set(facade)
    assert installed_files == facade
    assert sorted(p.name for p in include_root.iterdir()) == ["metaload"]


def test_installed_headers_include_only_installed_headers(installed):
    prefix, _ = installed
    include_root = prefix / "include"
    for header in sorted(include_root.rglob("*.h")):
        for included in re.findall(r'^#include "([^"]+)"', header.read_text(), re.MULTILINE):
            if not included.startswith(EXTERNAL_PREFIXES):
                assert (include_root / included).is_file(), (
                    f"{header.relative_to(include_root)} includes {included}, which is not installed: "
                    f"a public header may include only include/metaload/ and Abseil")


def test_package_files_are_installed(installed):
    prefix, _ = installed
    assert (prefix / "lib" / "libmetaload.so").is_file()
    assert (prefix / "lib" / "cmake" / "metaload" / "metaloadConfig.cmake").is_file()
    assert (prefix / "lib" / "cmake" / "metaload" / "metaloadConfigVersion.cmake").is_file()


def test_program_built_against_the_package_loads_the_exact_bytes(installed, tmp_path):
    prefix, consumer = installed
    save_file(TENSORS, str(tmp_path / "model.safetensors"))
    proc = subprocess.run([str(consumer), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded = {}
    for line in proc.stdout.splitlines():
        name, source, hex_bytes = line.split(" ")
        assert source == "direct", line
        loaded[name] = hex_bytes
    expected = {name: t.contiguous().view(torch.uint8).numpy().tobytes().hex() for name, t in TENSORS.items()}
    assert loaded == expected
    # It ran with the installed library, not the build tree's.
    ldd = subprocess.run(["ldd", str(consumer)], capture_output=True, text=True, check=True).stdout
    assert f"libmetaload.so => {prefix / 'lib' / 'libmetaload.so'}" in ldd, ldd


def test_program_built_against_the_package_reports_a_missing_checkpoint(installed, tmp_path):
    _, consumer = installed
    missing = tmp_path / "nowhere"
    proc = subprocess.run([str(consumer), str(missing)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert str(missing) in proc.stderr and "NOT_FOUND" in proc.stderr, proc.stderr
