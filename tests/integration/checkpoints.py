"""Checkpoints written by the real `safetensors` library (not by metaload), for oracles."""
import hashlib
import json
import pathlib
import struct

import torch
from safetensors.torch import save_file


def llama_like_tensors(layers=4, hidden=64, intermediate=176, vocab=320, kv=16, seed=0):
    """A small Llama-shaped state dict with mixed dtypes (bf16 weights, fp32 norms)."""
    g = torch.Generator().manual_seed(seed)
    t = {"model.embed_tokens.weight": torch.randn(vocab, hidden, generator=g).to(torch.bfloat16)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = torch.randn(hidden, generator=g)
        t[p + "post_attention_layernorm.weight"] = torch.randn(hidden, generator=g)
        for name, shape in (("self_attn.q_proj", (hidden, hidden)), ("self_attn.k_proj", (kv, hidden)),
                            ("self_attn.v_proj", (kv, hidden)), ("self_attn.o_proj", (hidden, hidden)),
                            ("mlp.gate_proj", (intermediate, hidden)), ("mlp.up_proj", (intermediate, hidden)),
                            ("mlp.down_proj", (hidden, intermediate))):
            t[p + name + ".weight"] = torch.randn(*shape, generator=g).to(torch.bfloat16)
    t["model.norm.weight"] = torch.randn(hidden, generator=g)
    t["lm_head.weight"] = torch.randn(vocab, hidden, generator=g).to(torch.bfloat16)
    return t


def llama_like_config(layers=4, hidden=64, intermediate=176, vocab=320, heads=8, kv_heads=2):
    """The config.json transformers' LlamaForCausalLM builds llama_like_tensors' shapes from:
    with the defaults, 8 heads and 2 key/value heads of 8 dims (k_proj is [16, 64])."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
            "intermediate_size": intermediate, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "head_dim": hidden // heads, "vocab_size": vocab,
            "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def save_sharded(tensors, folder, shards=3, config=None):
    """Splits tensors over `shards` files + model.safetensors.index.json, as HF does; writes
    `config` as config.json when given."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config, indent=2))
    names = list(tensors)
    per = -(-len(names) // shards)
    weight_map, total = {}, 0
    for s in range(shards):
        part = {n: tensors[n].contiguous() for n in names[s * per:(s + 1) * per]}
        if not part:
            continue
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file(part, str(folder / file), metadata={"format": "pt"})
        for n, t in part.items():
            weight_map[n] = file
            total += t.numel() * t.element_size()
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return folder


def tensor_sha256(t):
    """sha256 of a tensor's bytes in row-major order, as `metactl load --report` computes it."""
    return hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def header_offsets(path):
    """{name: (begin, end)} absolute in the file, parsed independently of metaload."""
    raw = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    return {k: (8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1])
            for k, v in header.items() if k != "__metadata__"}


def checkpoint_bytes(folder):
    """The bytes of every tensor the folder's safetensors files store (headers excluded): what
    ranks read between them, once, to load the whole model."""
    from safetensors import safe_open

    total = 0
    for path in pathlib.Path(folder).glob("*.safetensors"):
        with safe_open(str(path), "pt") as f:
            for name in f.keys():
                t = f.get_slice(name)
                n = 1
                for d in t.get_shape():
                    n *= d
                total += n * {"F32": 4, "BF16": 2, "F16": 2}[t.get_dtype()]
    return total
