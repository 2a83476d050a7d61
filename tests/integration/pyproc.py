"""A fresh Python process, as a training script would run, with the checkout's metaload
importable and no launcher variables inherited from the test's environment."""
import os
import subprocess
import sys
import textwrap

from conftest import BUILD_DIR

ENV = {**os.environ, "PYTHONPATH": str(BUILD_DIR / "python"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "METAD_ADDRESS"):
    ENV.pop(var, None)


def python(code, timeout=120, env=None):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env={**ENV, **(env or {})})
    return proc


def ok(code, **kwargs):
    proc = python(code, **kwargs)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-5000:]}"
    return proc.stdout
