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


def save_tiny_llama(folder, bigger=None):
    """A 2-layer Llama (float32, untied, 1002 rows) saved by transformers at `folder` in shards;
    with `bigger`, its config with 4 layers saved there."""
    ok(f"""
        import torch
        from transformers import LlamaConfig, AutoModelForCausalLM
        config = LlamaConfig(vocab_size=1002, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).save_pretrained("{folder}", max_shard_size="150KB")
        if {bigger is not None}:
            config.num_hidden_layers = 4
            config.save_pretrained("{bigger}")
    """)


def fresh_venv(root):
    """A new virtual environment at `root` with no pip of its own (whose setuptools would shadow
    the one torch requires: .venv's pip installs into it); (its python, its site-packages)."""
    import pathlib

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = pathlib.Path(root) / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return python, site


def pip_install_wheel(python, wheel):
    """Installs `wheel` into `python`'s environment with .venv's pip, nothing from an index, and
    asserts that nothing but metaload was installed (the environment's torch kept)."""
    import re

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # build/python would shadow the installed package
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
                           "--disable-pip-version-check", str(wheel)], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout[-8000:]}\n{proc.stderr[-8000:]}"
    assert re.fullmatch(r"Successfully installed metaload-[0-9.]+", proc.stdout.splitlines()[-1]), proc.stdout[-2000:]
    return proc
