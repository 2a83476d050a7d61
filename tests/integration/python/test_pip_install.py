"""`pip install --no-build-isolation ./` (README "Use from Python") installs the `metaload`
package into another virtual environment that already has torch, and it materializes a model
there from a checkpoint folder.

pip's part is split in its two steps, so that the compile happens once per test run: pip builds
the wheel from the source tree (pip_wheel.py: `pip wheel --no-build-isolation --no-deps ./`,
ctest's fixture integration_test_pip_install_build, whose wheel METALOAD_PIP_WHEEL_DIR names),
and here pip installs that wheel. Run alone (pytest, no METALOAD_PIP_WHEEL_DIR), the module
runs pip_wheel.py's build itself first.

The fresh environment gets the project's torch without a 4 GB download: a .pth file puts
.venv's site-packages (torch, safetensors) on its path, after its own, so to pip torch is
already installed, as on a user's machine. The environment has no pip of its own (whose
setuptools would shadow the one torch requires): .venv's pip installs into it (`pip --python`).

Oracle: the module torch built and saved with safetensors, compared bit for bit.
"""
import os
import pathlib
import subprocess
import sys
import sysconfig
import textwrap

import pytest

import pip_wheel
from conftest import BUILD_DIR
from pyproc import fresh_venv, pip_install_wheel
from pip_wheel import clean_env

MATERIALIZE = textwrap.dedent("""
    import pathlib, sys
    import torch
    import metaload
    from safetensors.torch import save_file

    venv, checkpoint = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    package = pathlib.Path(metaload.__file__).parent
    assert package.is_relative_to(venv), f"imported {package}, not the installed package"
    assert (package / "libmetaload.so").is_file() and list(package.glob("_native*.so")), sorted(package.iterdir())
    # The torch it was built against, recorded for the import-time check (docs/install.md).
    import importlib.metadata
    assert (package / "built_with_torch.txt").read_text().strip() == importlib.metadata.version("torch")

    def build():
        return torch.nn.Sequential(torch.nn.Embedding(10, 8, dtype=torch.bfloat16), torch.nn.Linear(8, 4))

    torch.manual_seed(0)
    reference = build()
    save_file(reference.state_dict(), str(checkpoint / "model.safetensors"))
    with torch.device("meta"):
        model = build()
    metaload.materialize(model, "tiny", checkpoint=str(checkpoint))
    for (name, want), (_, got) in zip(reference.state_dict().items(), model.state_dict().items()):
        assert got.device.type == "cpu" and got.dtype == want.dtype and torch.equal(got, want), name

    # A tensor the checkpoint lacks: refused, naming it, through the installed extension.
    with torch.device("meta"):
        bigger = torch.nn.Sequential(*build(), torch.nn.Linear(4, 2))
    try:
        metaload.materialize(bigger, "tiny", checkpoint=str(checkpoint))
        raise AssertionError("a module with a tensor the checkpoint lacks was materialized")
    except metaload.MetaTensorError as e:
        assert "2.weight" in str(e), str(e)
    print("materialized from the installed package")
""")


@pytest.fixture(scope="module")
def wheel_dir():
    """The folder pip_wheel.py built the wheel into: ctest's fixture's, else built here."""
    given = os.environ.get("METALOAD_PIP_WHEEL_DIR")
    if given:
        return pathlib.Path(given)
    pip_wheel.build(BUILD_DIR / "pip-wheel")
    return BUILD_DIR / "pip-wheel"


@pytest.fixture(scope="module")
def venv(wheel_dir, tmp_path_factory):
    """A fresh virtual environment with torch (the project's) and the wheel pip built, installed by pip."""
    root = tmp_path_factory.mktemp("pip") / "venv"
    python, own_site = fresh_venv(root)
    (root / own_site / "project-torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    with pip_wheel.published(wheel_dir) as wheel:
        # --no-index: nothing may come from anywhere but this wheel and the environment; nothing
        # but metaload installed (the environment's torch kept, no second one downloaded).
        pip_install_wheel(python, wheel)
    return root


def test_pip_installed_package_materializes_a_model_bit_exact(venv, tmp_path):
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", MATERIALIZE, str(venv), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "materialized from the installed package" in proc.stdout
