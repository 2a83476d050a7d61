"""Non-persistent buffers are computed on the rank, not left on meta: loaded through real
daemons and ranks, every rotary inv_freq / original_inv_freq / embed_scale equals, bit for
bit, the buffer transformers itself builds for the same config; every weight equals the bytes
save_pretrained wrote; and tied aliases come back as the stored tensor."""
import json

import pytest

from checkpoints import tensor_sha256
from conftest import metactl
from hf_cases import CASES, tiny_config
from ranks import run_ranks

# The cases whose buffers differ in kind: each RoPE scaling, Gemma's embed_scale, Falcon.
BUFFER_CASES = [c for c in CASES if c[0] in {
    "llama-tied-bias-headdim-llama3", "mistral-tied-yarn", "qwen2-untied-linear", "gemma-headdim",
    "phi3-tied-longrope-partial", "falcon-new-decoder"}]


@pytest.fixture(scope="module")
def hf():
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers, torch


@pytest.mark.parametrize("case_id,model_type,overrides,dtype_name", BUFFER_CASES, ids=[c[0] for c in BUFFER_CASES])
def test_loaded_model_equals_transformers(hf, tmp_path, daemons, case_id, model_type, overrides, dtype_name):
    transformers, torch = hf
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(transformers, model_type, overrides),
                                                          dtype=getattr(torch, dtype_name))
    root = tmp_path / "root"
    model.save_pretrained(str(root / case_id), safe_serialization=True)
    metactl("skeleton", root / case_id / "config.json", "-o", tmp_path / "s.json", check=0)
    a = daemons("a", [root], gpus=2)
    metactl("register", case_id, "--checkpoint", root / case_id, "--skeleton", tmp_path / "s.json",
            "--daemon", a.address, check=0)

    results = run_ranks(tmp_path, case_id, [a, a])
    loaded = {}
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank}: {err}"
        for t in report["tensors"]:
            assert t["name"] not in loaded, t["name"]
            loaded[t["name"]] = t

    state_dict = model.state_dict()
    buffers = {n: b for n, b in model.named_buffers() if n not in state_dict}
    assert buffers, "each case has non-persistent buffers"
    for name, buffer in buffers.items():
        assert loaded[name]["source"].startswith("buffer:"), name
        assert loaded[name]["sha256"] == tensor_sha256(buffer), f"{name} differs from transformers' buffer"
    for name, tensor in state_dict.items():
        assert name in loaded, f"{name} was not loaded"
        assert loaded[name]["sha256"] == tensor_sha256(tensor), name
        if loaded[name].get("tied_to"):
            assert loaded[name]["source"] == "tied"
