"""`metactl check` and `metactl plan` on quantized checkpoints written by torch and `safetensors`.

A DeepSeek-V3-style FP8 checkpoint (F8_E4M3 weights, one F32 `weight_scale_inv` per 128x128 block,
a config.json with its quantization_config) is never "OK" for a BF16 module unless the check is
judged as a dequantizing load would (--dequantize); a method metaload does not read (bitsandbytes)
is refused by name with or without it; a weight whose scale is missing is named under --dequantize.
Exact lines and exit codes: docs/quantization.md, "The doctor and the planner".
"""
import json

import pytest
import torch
from safetensors.torch import save_file

from checkpoints import llama_like_config, llama_like_tensors
from conftest import metactl

BLOCK = 128
FP8_MAX = 448.0
SHAPE = dict(layers=2, hidden=128, intermediate=320, vocab=320, kv=32)
CONFIG_SHAPE = dict(layers=2, hidden=128, intermediate=320, vocab=320, heads=8, kv_heads=2)
FP8_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
              "weight_block_size": [BLOCK, BLOCK]}
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
EM = "\u2014"


def quantize_fp8_blocks(w):
    """DeepSeek-V3's rule: codes = fp8(w / s) and scale_inv = s per 128x128 block (s = amax / 448)."""
    rows, cols = w.shape
    w = w.float()
    scale = torch.empty((-(-rows // BLOCK), -(-cols // BLOCK)), dtype=torch.float32)
    codes = torch.empty_like(w)
    for i in range(scale.shape[0]):
        for j in range(scale.shape[1]):
            block = w[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK]
            s = max(block.abs().max().item() / FP8_MAX, 1e-12)
            scale[i, j] = s
            codes[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = block / s
    return codes.to(torch.float8_e4m3fn), scale


def is_projection(name):
    return name.endswith(".weight") and any(f".{p}." in name for p in PROJECTIONS)


def fp8_checkpoint(folder, quantization=FP8_CONFIG, drop_scale=None):
    """A Llama-shaped checkpoint whose projections are FP8 blocks with scales beside them; the
    embeddings, norms and lm_head stay as they are (as DeepSeek-V3 keeps them)."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, t in llama_like_tensors(**SHAPE).items():
        if is_projection(name):
            tensors[name], tensors[name + "_scale_inv"] = quantize_fp8_blocks(t)
        else:
            tensors[name] = t
    if drop_scale is not None:
        del tensors[drop_scale]
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = dict(llama_like_config(**CONFIG_SHAPE))
    if quantization is not None:
        config["quantization_config"] = quantization
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def lines(text):
    return text.rstrip("\n").split("\n")


VALUES = 2 * len(PROJECTIONS)  # 14 projections in 2 layers


@pytest.fixture(scope="module")
def fp8(tmp_path_factory):
    return fp8_checkpoint(tmp_path_factory.mktemp("quant") / "fp8")


def test_fp8_checkpoint_against_its_bf16_module_is_refused_without_dequantize(fp8):
    result = metactl("check", fp8, fp8, check=3)
    out = lines(result.stdout)
    config = fp8 / "config.json"
    assert out[2:5] == [
        "quantization (1):",
        f"  the checkpoint is quantized: fp8: FP8 codes, one scale per 128x128 block (declared by {config}); "
        f"{VALUES} values stored as codes and scales",
        "    metaload can: dequantize on load (dequantize=True, metactl load --dequantize), or keep as stored "
        "in a module built with its quantization",
    ]
    assert f"conversions refused (codes read as values) ({VALUES}):" in out
    weight = "model.layers.0.self_attn.q_proj.weight"
    assert (f"  {weight} is BF16 in the skeleton but stored quantized (fp8-block 128x128: {weight} "
            f"F8_E4M3 x {weight}_scale_inv F32): read without dequantization its codes would be taken for "
            "its values") in out
    assert ("    fix: dequantize on load (metactl load --dequantize, dequantize=True; `metactl check --dequantize` "
            "judges that load), or build the module with the checkpoint's quantization_config to keep the codes "
            "as stored") in out
    assert f"{weight} is BF16 in the skeleton but F8_E4M3 in the checkpoint" not in result.stdout
    assert out[-1] == (f"verdict: refused {EM} {VALUES} tensors stored as fp8 codes would be read as values "
                       "without dequantization: load with --dequantize (`metactl check --dequantize` judges "
                       "that load), or build the module quantized")


def test_fp8_checkpoint_dequantized_is_ok_and_its_scales_are_consumed(fp8):
    result = metactl("check", fp8, fp8, "--dequantize", check=0)
    out = lines(result.stdout)
    config = fp8 / "config.json"
    assert out[3] == (f"  the checkpoint is quantized: fp8: FP8 codes, one scale per 128x128 block (declared by "
                      f"{config}); {VALUES} values stored as codes and scales; judged as a dequantizing load "
                      f"(--dequantize): {VALUES} tensors dequantized to BF16 on load (below)")
    assert f"dequantized on load (codes and scales to values) ({VALUES}):" in out
    weight = "model.layers.1.mlp.down_proj.weight"
    assert f"  {weight} BF16 <- fp8-block 128x128: {weight} F8_E4M3 x {weight}_scale_inv F32" in out
    assert "unexpected" not in result.stdout and "refused" not in result.stdout
    assert out[-1] == f"verdict: OK {EM} nothing would stay on meta ({VALUES} tensors dequantized on load)"

    report = json.loads(metactl("check", fp8, fp8, "--dequantize", "--format", "json", check=0).stdout)
    assert report["quantization"]["method"] == "fp8"
    assert report["quantization"]["scheme"] == "fp8-block"
    assert report["quantization"]["dequantized"] == VALUES
    assert report["verdict"]["ok"] is True and report["verdict"]["dequantized"] == VALUES
    assert report["unexpected"] == [] and report["refused_conversions"] == []


def deepseek_like(fp8, folder):
    """The FP8 checkpoint under an architecture with no built-in skeleton (DeepSeek-V3's): its
    skeleton is derived from the headers, codes and scales as stored."""
    folder.mkdir()
    (folder / "model.safetensors").symlink_to(fp8 / "model.safetensors")
    config = json.loads((fp8 / "config.json").read_text())
    config.update(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3")
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_derived_skeleton_keeps_codes_as_stored_or_is_judged_as_the_bf16_module(tmp_path, fp8):
    ckpt = deepseek_like(fp8, tmp_path / "deepseek")
    out = lines(metactl("check", ckpt, ckpt, check=0).stdout)
    assert out[3] == (f"  the checkpoint is quantized: fp8: FP8 codes, one scale per 128x128 block (declared by "
                      f"{ckpt / 'config.json'}); {VALUES} values stored as codes and scales; the skeleton holds "
                      f"{VALUES} of them as stored codes (a module built quantized: loaded as stored)")
    assert out[-1] == f"verdict: OK {EM} nothing would stay on meta"
    out = lines(metactl("check", ckpt, ckpt, "--dequantize", check=0).stdout)
    assert out[-1] == f"verdict: OK {EM} nothing would stay on meta ({VALUES} tensors dequantized on load)"


def test_missing_scale_is_named_under_dequantize(tmp_path):
    scale = "model.layers.1.mlp.up_proj.weight_scale_inv"
    weight = scale[:-len("_scale_inv")]
    ckpt = fp8_checkpoint(tmp_path / "no-scale", drop_scale=scale)
    result = metactl("check", ckpt, ckpt, "--dequantize", check=3)
    out = lines(result.stdout)
    assert "quantization problems (refused by a dequantizing load) (1):" in out
    assert (f"  {weight}: stored as F8_E4M3 codes, but the checkpoint has no {scale} to scale them (a truncated "
            "or converted checkpoint?); a dequantizing load refuses it") in out
    assert out[-1] == (f"verdict: refused {EM} 1 stored tensor of the quantization cannot be dequantized "
                       "(quantization problems, above)")
    assert f"{VALUES - 1} tensors dequantized to BF16" in result.stdout


def test_bitsandbytes_is_refused_by_name_whatever_the_flag(tmp_path):
    ckpt = fp8_checkpoint(tmp_path / "bnb", quantization={"quant_method": "bitsandbytes", "load_in_4bit": True})
    for flags in ((), ("--dequantize",)):
        out = lines(metactl("check", ckpt, ckpt, *flags, check=3).stdout)
        assert out[3] == (f"  the checkpoint is quantized with bitsandbytes (declared by {ckpt / 'config.json'}), "
                          "which metaload does not read: bitsandbytes 4/8-bit weights pack their codes with state "
                          "metaload does not read; load a BF16 export of the model")
        assert out[-1] == (f"verdict: refused {EM} the checkpoint is quantized with bitsandbytes, which metaload "
                           "does not read (quantization, above)")


def test_plan_counts_dequantized_values_in_the_target_dtype(fp8):
    stored = json.loads(metactl("plan", fp8, "--gpus", "1", "--format", "json", check=0).stdout)
    dequantized = json.loads(metactl("plan", fp8, "--gpus", "1", "--dequantize", "--format", "json",
                                     check=0).stdout)
    weight = "model.layers.0.mlp.gate_proj.weight"
    before = {i["tensor"]: i for i in stored["ranks"][0]["items"]}[weight]
    after = {i["tensor"]: i for i in dequantized["ranks"][0]["items"]}[weight]
    assert before["dtype"] == "F8_E4M3" and before["bytes"] == 320 * 128 and "to_dtype" not in before
    assert after["dtype"] == "BF16" and after["bytes"] == 320 * 128 * 2 and "file" not in after
    assert after["dequantize"]["codes"]["tensor"] == weight
    assert after["dequantize"]["scales"]["tensor"] == weight + "_scale_inv"
    assert after["dequantize"]["rule"] == f"fp8-block 128x128: {weight} F8_E4M3 x {weight}_scale_inv F32"
