"""The FP8 block-scaled checkpoint of a BF16 safetensors folder, as DeepSeek-V3's FP8 release
stores one (docs/quantization.md): every 2-D `*_proj.weight` as F8_E4M3 codes beside an F32
`*.weight_scale_inv` of shape [ceil(N/128), ceil(K/128)], per 128x128 block scale = amax / 448 and
codes = w / scale; every other tensor as stored. config.json gains the `quantization_config`
transformers' FineGrainedFP8 reads. Shard files keep their names, one written at a time, so the
writer never holds more than one BF16 shard.

    python bench/fp8_checkpoint.py BF16_DIR FP8_DIR

bench/e2e_fp8.py runs it in a child process (the driver never holds the model); bench/e2e_fsdp.py
checks loaded values against `fp8_value`, DeepSeek's `weight_dequant`.
"""
import json
import pathlib
import shutil
import sys

import torch

import checkpoint_data

BLOCK = 128
E4M3_MAX = 448.0
QUANTIZATION_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                       "weight_block_size": [BLOCK, BLOCK]}


def quantized_name(name, tensor):
    return tensor.ndim == 2 and name.endswith("_proj.weight")


def _blocks(w):
    """w as float32 [N/128, 128, K/128, 128], zero-padded to whole blocks (zeros change no amax)."""
    n, k = w.shape
    padded = torch.zeros(-(-n // BLOCK) * BLOCK, -(-k // BLOCK) * BLOCK)
    padded[:n, :k] = w.float()
    return padded.reshape(padded.shape[0] // BLOCK, BLOCK, padded.shape[1] // BLOCK, BLOCK)


def fp8_blocks(w):
    """(codes F8_E4M3 [N, K], scale_inv F32 [ceil(N/128), ceil(K/128)]); the same bits as the
    per-block loop in tests/integration/python/quant_checkpoints.py, in whole-tensor operations."""
    blocks = _blocks(w)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / E4M3_MAX
    codes = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn)
    return codes.reshape(blocks.shape[0] * BLOCK, -1)[:w.shape[0], :w.shape[1]].contiguous(), scale


def fp8_value(codes, scale_inv, dtype=torch.bfloat16):
    """DeepSeek's weight_dequant: f32(code) x f32(its block's scale_inv), rounded once to `dtype`."""
    n, k = codes.shape
    full = scale_inv.float().repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)[:, :k]
    return (codes.float() * full).to(dtype)


def write(bf16_dir, fp8_dir):
    """Writes FP8_DIR from BF16_DIR; returns the number of tensors quantized."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    bf16_dir, fp8_dir = pathlib.Path(bf16_dir), pathlib.Path(fp8_dir)
    fp8_dir.mkdir(parents=True, exist_ok=True)
    weight_map, quantized, tensor_bytes = {}, 0, 0
    for file in (path.name for path in checkpoint_data.shard_files(bf16_dir)):
        stored = {}
        with safe_open(str(bf16_dir / file), "pt") as f:
            for name in f.keys():
                t = f.get_tensor(name)
                if quantized_name(name, t):
                    stored[name], stored[name + "_scale_inv"] = fp8_blocks(t)
                    quantized += 1
                else:
                    stored[name] = t
        save_file(stored, str(fp8_dir / file), metadata={"format": "pt"})
        weight_map.update({name: file for name in stored})
        tensor_bytes += sum(t.numel() * t.element_size() for t in stored.values())
        del stored
    (fp8_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": tensor_bytes}, "weight_map": weight_map}, indent=2))
    config = json.loads((bf16_dir / "config.json").read_text())
    config["quantization_config"] = QUANTIZATION_CONFIG
    (fp8_dir / "config.json").write_text(json.dumps(config, indent=2))
    for extra in bf16_dir.glob("*.json"):  # generation_config.json, ...
        if not (fp8_dir / extra.name).exists():
            shutil.copy(extra, fp8_dir / extra.name)
    return quantized


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    print(json.dumps({"quantized_tensors": write(*sys.argv[1:])}))
