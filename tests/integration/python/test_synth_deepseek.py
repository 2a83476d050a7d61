"""`metactl synth --experts` writes what transformers itself saves for DeepseekV3ForCausalLM
(the 100k-tensor benchmark's model, bench/scale.py): transformers builds the model from the
config.json synth wrote and save_pretrained()s it (its conversion mapping unfuses the experts
into per-expert tensors on save); every tensor it writes must be in synth's checkpoint with the
same shape and dtype, and synth must write nothing else but the FP8 release's weight scales.
"""
import json

import pytest

from conftest import metactl

FLAGS = ["--layers", 4, "--dense-layers", 1, "--experts", 4, "--hidden", 16, "--heads", 2, "--intermediate", 32,
         "--moe-intermediate", 8, "--vocab", 64]


def stored(folder):
    from safetensors import safe_open

    out = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, "pt") as f:
            for key in f.keys():
                piece = f.get_slice(key)
                out[key] = (list(piece.get_shape()), piece.get_dtype())
    return out


@pytest.mark.parametrize("scales", [False, True], ids=["bf16", "with-weight-scales"])
def test_synth_experts_is_what_transformers_saves(tmp_path, scales):
    import transformers  # pinned in scripts/requirements.txt: missing is a failure, never a skip
    import torch

    synth = tmp_path / "synth"
    metactl("synth", synth, *FLAGS, *(["--weight-scales"] if scales else []), "--shard-size", "20KB", check=0)
    config = json.loads((synth / "config.json").read_text())
    assert config["architectures"] == ["DeepseekV3ForCausalLM"] and config["n_routed_experts"] == 4
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(synth),
                                                          dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "saved")
    theirs, ours = stored(tmp_path / "saved"), stored(synth)
    assert "model.layers.3.mlp.experts.3.down_proj.weight" in theirs  # per expert, as checkpoints store them
    assert {k: v for k, v in ours.items() if k in theirs} == theirs
    extra = sorted(set(ours) - set(theirs))
    if scales:
        assert extra and all(k.endswith(".weight_scale_inv") and ours[k][1] == "F32" for k in extra)
        assert len(extra) == sum(1 for k, (shape, _) in theirs.items() if len(shape) == 2 and "_proj" in k)
    else:
        assert extra == []


def test_synth_experts_flags_refused(tmp_path):
    out = metactl("synth", tmp_path / "a", "--weight-scales", check=2)
    assert "--dense-layers, --moe-intermediate and --weight-scales need --experts N" in out.stderr
    out = metactl("synth", tmp_path / "b", "--experts", 4, "--kv-heads", 2, check=2)
    assert "--kv-heads does not apply with --experts (MLA)" in out.stderr
