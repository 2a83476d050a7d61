#!/usr/bin/env python3
"""The test run's one pip source build (README "Use from Python"): `pip wheel
--no-build-isolation --no-deps ./` compiles the package from the source tree against .venv's
torch, the build `pip install --no-build-isolation ./` runs before it installs the wheel it
made. test_pip_install.py installs that wheel into fresh environments.

    .venv/bin/python tests/integration/python/pip_wheel.py OUT_DIR

ctest runs it once per run, before the tests that need it (integration_test_pip_install_build,
FIXTURES_SETUP pip_wheel: tests/integration/CMakeLists.txt). It leaves one wheel in
OUT_DIR/dist, and none there unless this build succeeded. scikit-build-core builds in
OUT_DIR/cmake-build, kept between runs: in a fresh clone (CI) every file is compiled, and a
rerun compiles what changed. Another pyproject.toml or torch starts that folder afresh.

Another ctest on the same build folder may run at the same time: the build holds OUT_DIR/lock
exclusively, and `published` holds it shared while a test installs the wheel.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version
from typing import NoReturn

SOURCE_DIR = pathlib.Path(__file__).resolve().parents[3]
WHEEL_NAME = re.compile(r"metaload-[0-9.]+-cp3\d+-cp3\d+-linux_x86_64\.whl")


class WheelError(Exception):
    pass


def fail(message: str) -> NoReturn:
    raise WheelError(f"pip_wheel.py: {message}")


def clean_env() -> dict[str, str]:
    """The environment without PYTHONPATH: ctest puts build/python there (the checkout's
    package), which would shadow the installed one."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


@contextlib.contextmanager
def _locked(out: pathlib.Path, mode: int) -> Iterator[None]:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "lock", "a") as lock:
        fcntl.flock(lock, mode)
        yield


def _the_wheel(folder: pathlib.Path) -> pathlib.Path:
    found = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if len(found) != 1 or not WHEEL_NAME.fullmatch(found[0].name):
        fail(f"expected one metaload wheel in {folder}, found {[f.name for f in found]}")
    return found[0]


def build(out: pathlib.Path) -> pathlib.Path:
    """Builds the wheel from the source tree into OUT/dist; returns its path."""
    with _locked(out, fcntl.LOCK_EX):
        dist, staging, cmake_build = out / "dist", out / "staging", out / "cmake-build"
        for folder in (dist, staging):
            shutil.rmtree(folder, ignore_errors=True)
        # Other settings (pyproject.toml's cmake.define, targets) or another torch: a fresh folder.
        settings = (SOURCE_DIR / "pyproject.toml").read_bytes() + f"\ntorch {version('torch')}\n".encode()
        stamp = out / "cmake-build.settings"
        if not stamp.is_file() or stamp.read_bytes() != settings:
            shutil.rmtree(cmake_build, ignore_errors=True)
            stamp.unlink(missing_ok=True)
        env = clean_env()
        if shutil.which("ccache"):
            # Relative paths in the key; the precompiled <torch/types.h> every torch-using file
            # includes makes a compile uncacheable unless ccache may trust it (pch_defines,
            # time_macros: ccache's manual, "Precompiled headers").
            env.update(SKBUILD_CMAKE_ARGS="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", CCACHE_BASEDIR="/",
                       CCACHE_SLOPPINESS="pch_defines,time_macros")
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check",
                               "--no-build-isolation", "--no-deps", "--wheel-dir", str(staging),
                               "--config-settings", f"build-dir={cmake_build}", str(SOURCE_DIR)],
                              capture_output=True, text=True, timeout=1500, env=env)
        if proc.returncode != 0:
            fail(f"pip wheel exited {proc.returncode}:\n{proc.stdout[-8000:]}\n{proc.stderr[-8000:]}")
        if not re.search(r"^Successfully built metaload$", proc.stdout, re.M):
            fail(f"pip wheel did not say it built metaload:\n{proc.stdout[-4000:]}")
        wheel = _the_wheel(staging)
        stamp.write_bytes(settings)
        dist.mkdir()
        target = dist / wheel.name
        wheel.replace(target)
        staging.rmdir()
        print(f"{target} ({target.stat().st_size / 1e6:.1f} MB) built by pip in {time.monotonic() - started:.1f} s")
        return target


@contextlib.contextmanager
def published(out: pathlib.Path) -> Iterator[pathlib.Path]:
    """The wheel `build` left in OUT/dist, not replaced while the caller holds it."""
    with _locked(out, fcntl.LOCK_SH):
        yield _the_wheel(out / "dist")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: pip_wheel.py OUT_DIR")
    try:
        build(pathlib.Path(sys.argv[1]).resolve())
    except WheelError as e:
        sys.exit(str(e))


if __name__ == "__main__":
    main()
