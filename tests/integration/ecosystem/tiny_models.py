"""Tiny models that transformers itself builds and saves (save_pretrained, sharded in small
files), for the tests of this folder: the `models` fixture, one folder per model.

    qwen2-tied  a Qwen2 whose lm_head is its embedding (not stored)
    llama       a Llama, 2 layers, untied
    llama4      the same with 4 layers (a stage each at pp 4)
    moe         a Qwen3-MoE with 4 experts (stored per expert, fused by transformers on load)
"""
import contextlib
import os
import shutil
import subprocess
import sys

import pytest

from conftest import BUILD_DIR, Daemon, metactl

ENV = {**os.environ, "PYTHONPATH": str(BUILD_DIR / "python"), "OMP_NUM_THREADS": "1",
       "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}

SAVE = """
import sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
out = sys.argv[1]
small = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=256, max_position_embeddings=64)
models = {
    "qwen2-tied": ("qwen2", dict(num_hidden_layers=2, num_key_value_heads=2, tie_word_embeddings=True)),
    "llama": ("llama", dict(num_hidden_layers=2, num_key_value_heads=4, tie_word_embeddings=False)),
    "llama4": ("llama", dict(num_hidden_layers=4, num_key_value_heads=4, tie_word_embeddings=False)),
    "moe": ("qwen3_moe", dict(num_hidden_layers=2, num_key_value_heads=4, moe_intermediate_size=32, num_experts=4,
                              num_experts_per_tok=2, head_dim=16)),
}
for seed, (name, (kind, extra)) in enumerate(models.items()):
    torch.manual_seed(seed)
    config = AutoConfig.for_model(kind, **small, **extra)
    AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(f"{out}/{name}", max_shard_size="40KB")
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("models")
    proc = subprocess.run([sys.executable, "-c", SAVE, str(out)], capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@contextlib.contextmanager
def served(models, model, tmp_path, name, skeleton=None, before_register=None):
    """A metad (node "a") serving a copy of models/model under tmp_path/served/name, registered as
    `name`; yields (daemon, the copy's folder) and stops the daemon (asserting exit 0) after.
    Ranks run blind_to(the copy's parent) cannot see it: they stream."""
    folder = tmp_path / "served" / name
    shutil.copytree(models / model, folder)
    if before_register is not None:
        before_register(folder)
    daemon = Daemon(tmp_path, "a", [folder.parent])
    try:
        extra = ["--skeleton", skeleton] if skeleton else []
        metactl("register", name, "--checkpoint", folder, *extra, "--daemon", daemon.address, check=0)
        yield daemon, folder
    finally:
        assert daemon.stop() == 0
