"""The console entry points `metactl` and `metad` of the binary wheel (scripts/wheel.py).

Each checks that this environment holds the torch the wheel was built against, then execs
the binary from metaload/bin/: the process, its arguments, environment, exit code and
signals are the binary's own, as if it had been run directly.

A module of its own beside the package, not metaload._cli: importing anything under
`metaload` runs metaload/__init__.py, which imports torch (~3 s and ~650 MB before the exec,
for a command that may never touch a tensor). metaload/_torch_check.py is loaded alone, by
its path, for the same reason.
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

PACKAGE_DIR = pathlib.Path(__file__).resolve().parent / "metaload"


def _check_torch() -> None:
    spec = importlib.util.spec_from_file_location("_metaload_torch_check", PACKAGE_DIR / "_torch_check.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"metaload is incomplete: no {PACKAGE_DIR / '_torch_check.py'}")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    try:
        check.check_torch_version(PACKAGE_DIR)
    except ImportError as e:
        print(f"{pathlib.Path(sys.argv[0]).name}: {e}", file=sys.stderr)
        sys.exit(1)


def _exec(binary: str) -> None:
    _check_torch()
    path = PACKAGE_DIR / "bin" / binary
    # argv[0] stays what the user typed (usage lines name it); metactl finds metactl-load
    # beside its own executable through /proc/self/exe, not through argv[0].
    try:
        os.execv(path, [sys.argv[0], *sys.argv[1:]])
    except OSError as e:
        print(f"{binary}: cannot run {path}: {e.strerror}", file=sys.stderr)
        sys.exit(1)


def metactl() -> None:
    _exec("metactl")


def metad() -> None:
    _exec("metad")
