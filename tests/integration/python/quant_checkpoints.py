"""Quantized checkpoints as their formats define them, built from models transformers itself
builds and saves, with each value's reference computed by the format's own definition:

- fp8 block (DeepSeek-V3's release, its inference/kernel.py `weight_dequant`): every 2-D
  `*_proj.weight` as F8_E4M3 codes with an F32 `weight_scale_inv` per 128x128 block (the last
  block of each dimension partial), value = f32(code) * scale_inv, rounded to BF16;
- compressed-tensors float-quantized (llm-compressor's FP8-dynamic): F8_E4M3 codes with a BF16
  `weight_scale` per output channel ([N, 1]) or per tensor ([1]);
- mxfp4 (gpt-oss, OCP MX v1.0): experts' `*_blocks` U8 [E, R, G, 16] (FP4 E2M1 codes, low
  nibble first) and `*_scales` U8 [E, R, G] (E8M0), value = E2M1 * 2^(scale - 127), its last two
  dimensions swapped as transformers' GptOssExperts holds them.

Each builder writes the quantized folder and a BF16 folder of the reference values under the
same names (`<folder>-reference`): transformers loading that folder gives the module-named
references (its own fusing of per-expert tensors).
"""
import json
import pathlib

import torch
from safetensors import safe_open
from safetensors.torch import save_file

FP4 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def tensors(folder):
    out = {}
    for path in sorted(pathlib.Path(folder).glob("*.safetensors")):
        with safe_open(path, "pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys()})
    return out


def fp8_blocks(w, block=128):
    """DeepSeek's quantization: per 128x128 block, scale = amax / 448, codes = w / scale in E4M3."""
    n, k = w.shape
    scale = torch.empty((n + block - 1) // block, (k + block - 1) // block)
    codes = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    for i in range(scale.shape[0]):
        for j in range(scale.shape[1]):
            piece = w[i * block:(i + 1) * block, j * block:(j + 1) * block].float()
            scale[i, j] = piece.abs().max().clamp(min=1e-12) / 448.0
            codes[i * block:(i + 1) * block, j * block:(j + 1) * block] = (piece / scale[i, j]).to(torch.float8_e4m3fn)
    return codes, scale


def fp8_blocks_value(codes, scale_inv, block=128):
    """DeepSeek's weight_dequant: each element's code times its block's scale_inv, in float32."""
    n, k = codes.shape
    full = scale_inv.repeat_interleave(block, 0)[:n].repeat_interleave(block, 1)[:, :k]
    return (codes.float() * full.float()).to(torch.bfloat16)


def _save(folder, stored, config, quantization):
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(stored, folder / "model.safetensors", metadata={"format": "pt"})
    config = dict(config)
    if quantization is not None:
        config["quantization_config"] = quantization
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def _saved_by_transformers(folder, config):
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    model.save_pretrained(folder)
    return tensors(folder), json.loads((pathlib.Path(folder) / "config.json").read_text())


def deepseek_config(**overrides):
    """A DeepSeek-V3 whose kv_a_proj_with_mqa is [160, 256] (128 + 32 rope rows): the shape
    transformers' FP8 dequantization scales wrongly (rows 80-127), and partial blocks everywhere."""
    import transformers

    settings = dict(
        vocab_size=96, hidden_size=256, intermediate_size=384, moe_intermediate_size=192, num_hidden_layers=2,
        first_k_dense_replace=1, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, n_group=1,
        topk_group=1, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=96, kv_lora_rank=128,
        qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=32, max_position_embeddings=64,
        tie_word_embeddings=False)
    return transformers.DeepseekV3Config(**{**settings, **overrides})


# Every weight's dimensions multiples of 256, so that a split in 2 keeps 128-blocks whole: what a
# module keeping its FP8 codes (transformers' FP8Linear and FP8Experts) can hold on 2 ranks.
DEEPSEEK_ALIGNED = dict(intermediate_size=512, moe_intermediate_size=128, n_shared_experts=2, q_lora_rank=256,
                        kv_lora_rank=224, num_attention_heads=4, num_key_value_heads=4)


def deepseek_fp8(folder, **overrides):
    """DeepSeek-V3 as its FP8 release stores it; returns the names quantized."""
    folder = pathlib.Path(folder)
    plain, config = _saved_by_transformers(folder.parent / (folder.name + "-bf16"), deepseek_config(**overrides))
    # kv_a_proj_with_mqa too
    quantized = _fp8_blocks_saved(folder, plain, config, lambda name: "_proj" in name and name.endswith(".weight"))
    return sorted(n + "_scale_inv" for n in quantized)


def _fp8_blocks_saved(folder, plain, config, quantizes):
    """Saves `plain` with every 2-D tensor `quantizes(name)` picks as FP8 codes and 128x128 block
    scales (quant_method fp8), and its reference values beside; returns the names quantized."""
    stored, reference = {}, {}
    for name, t in plain.items():
        if t.ndim == 2 and quantizes(name):
            codes, scale = fp8_blocks(t)
            stored[name], stored[name + "_scale_inv"] = codes, scale
            reference[name] = fp8_blocks_value(codes, scale)
        else:
            stored[name] = reference[name] = t
    _save(folder, stored, config, {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                   "weight_block_size": [128, 128]})
    _save(folder.parent / (folder.name + "-reference"), reference, config, None)
    return sorted(n for n in reference if n + "_scale_inv" in stored)


def _llama_saved(folder):
    """A small Llama as transformers saves it, beside `folder`: its tensors and config.json."""
    import transformers

    config = transformers.LlamaConfig(vocab_size=96, hidden_size=192, intermediate_size=320, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=False)
    return _saved_by_transformers(folder.parent / (folder.name + "-bf16"), config)


def llama_fp8(folder):
    """A Llama stored as DeepSeek's FP8 release stores weights (quant_method fp8, 128x128 blocks):
    hidden 192 and intermediate 320, so every scale grid ends in a partial block. A Llama has a
    built-in skeleton (its BF16 module), which a daemon registers; returns the names quantized."""
    folder = pathlib.Path(folder)
    plain, config_json = _llama_saved(folder)
    return _fp8_blocks_saved(folder, plain, config_json, lambda name: name.endswith("_proj.weight"))


def llama_fp8_aligned(folder):
    """A Llama whose every dimension is a multiple of 128, in FP8 128x128 blocks: what transformers'
    FP8Linear holds kept quantized, split on block boundaries."""
    import transformers

    folder = pathlib.Path(folder)
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, head_dim=64,
                                      max_position_embeddings=64, tie_word_embeddings=False)
    plain, config_json = _saved_by_transformers(folder.parent / (folder.name + "-bf16"), config)
    return _fp8_blocks_saved(folder, plain, config_json, lambda name: name.endswith("_proj.weight"))


def llama_compressed(folder, strategy):
    """A Llama as llm-compressor's FP8 (float-quantized) saves it, per `strategy` (channel|tensor)."""
    folder = pathlib.Path(folder)
    plain, config_json = _llama_saved(folder)
    stored, reference = {}, {}
    for name, t in plain.items():
        if t.ndim == 2 and name.endswith("_proj.weight"):
            w = t.float()
            scale = (w.abs().amax(dim=1, keepdim=True) if strategy == "channel" else w.abs().max().reshape(1)) / 448.0
            scale = scale.to(torch.bfloat16)
            codes = (w / scale.float()).to(torch.float8_e4m3fn)
            stored[name], stored[name + "_scale"] = codes, scale
            reference[name] = (codes.float() * scale.float()).to(torch.bfloat16)
        else:
            stored[name] = reference[name] = t
    quantization = {"quant_method": "compressed-tensors", "format": "float-quantized",
                    "quantization_status": "compressed", "ignore": ["lm_head"],
                    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                        "num_bits": 8, "type": "float", "strategy": strategy, "symmetric": True, "dynamic": False}}}}
    _save(folder, stored, config_json, quantization)
    _save(folder.parent / (folder.name + "-reference"), reference, config_json, None)


def mxfp4_value(blocks, scales):
    """OCP MX: each E2M1 code (low nibble first) times 2^(scale - 127); gpt-oss's layout swapped."""
    values = torch.stack([FP4[(blocks & 15).long()], FP4[(blocks >> 4).long()]], dim=-1)
    values = values.reshape(*blocks.shape[:-2], blocks.shape[-2] * 32)
    exponent = scales.long() - 127
    values = values * torch.pow(2.0, exponent.double()).float().repeat_interleave(32, dim=-1)
    return values.to(torch.bfloat16).transpose(1, 2).contiguous()


def gpt_oss_mxfp4(folder):
    """gpt-oss as it ships: experts in MXFP4, everything else BF16 (random codes and scales)."""
    import transformers

    folder = pathlib.Path(folder)
    config = transformers.GptOssConfig(vocab_size=96, hidden_size=128, intermediate_size=96, num_hidden_layers=1,
                                       num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                                       num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
                                       tie_word_embeddings=False, layer_types=["full_attention"])
    plain, config_json = _saved_by_transformers(folder.parent / (folder.name + "-bf16"), config)
    generator = torch.Generator().manual_seed(1)
    stored, reference = {}, {}
    for name, t in plain.items():
        if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            e, cols, rows = t.shape  # the module's [E, in, out]: stored as [E, out, in / 32, 16]
            blocks = torch.randint(0, 256, (e, rows, cols // 32, 16), dtype=torch.uint8, generator=generator)
            scales = torch.randint(118, 130, (e, rows, cols // 32), dtype=torch.uint8, generator=generator)
            stored[name + "_blocks"], stored[name + "_scales"] = blocks, scales
            reference[name] = mxfp4_value(blocks, scales)
        else:
            stored[name] = reference[name] = t
    _save(folder, stored, config_json, {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]})
    _save(folder.parent / (folder.name + "-reference"), reference, config_json, None)
