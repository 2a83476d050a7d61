"""The torch this package was built against, and the refusal of any other (docs/install.md).

The extension, libmetaload.so and the binaries link that torch's LibTorch, whose C++ ABI
changes between versions: under another torch they would fail with an undefined symbol, or
worse. The build records the version (built_with_torch.txt, written by
client/python/CMakeLists.txt) as pip names it (importlib.metadata: 2.15.0, where
torch.__version__ says 2.15.0+cu132).

Imports neither torch nor the rest of the package: metaload/__init__.py calls it before
`import torch`, and the console entry points (_metaload_cli.py) load this file alone, before
exec'ing metactl or metad, so that a command pays no torch import.
"""
from __future__ import annotations

import importlib.metadata
import pathlib

RECORD_NAME = "built_with_torch.txt"


class TorchVersionError(ImportError):
    """This environment's torch is not the one the package was built against."""


def installed_torch_version() -> str | None:
    """The torch distribution installed in this environment, or None."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def check_torch_version(package_dir: pathlib.Path) -> None:
    """Raises TorchVersionError unless the installed torch is the recorded one.

    A package without the record (built against a LibTorch given by METALOAD_TORCH_PREFIX,
    outside any Python environment) has nothing to compare and passes.
    """
    try:
        built = (package_dir / RECORD_NAME).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return
    found = installed_torch_version()
    if found == built:
        return
    here = f"torch {found}" if found else "no torch"
    raise TorchVersionError(
        f"metaload ({package_dir}) was built against torch {built}, but this environment has {here}: "
        f"its extension and binaries link that torch's LibTorch, whose ABI changes between versions. "
        f"Install torch=={built} here, or rebuild metaload against this environment's torch: "
        f"scripts/setup.sh wheel in a checkout whose .venv holds it (pin it in scripts/requirements.txt), "
        f"or `pip install --no-build-isolation ./` from the checkout (docs/install.md).")
