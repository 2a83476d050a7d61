"""FP8 checkpoints kept quantized in torchao's float8 tensors (issue 36): a transformers Llama whose
projections hold torchao Float8Tensor weights — per row and per tensor as torchao's own quantize_
builds them on meta, 128x128 blocks as Float8Tensor.from_hp builds them — filled by
metaload.materialize from FP8 checkpoints as DeepSeek's release (128x128 block scales) and
llm-compressor (per-channel and per-tensor scales) store them (quant_checkpoints.py): every rank's
qdata the checkpoint's bytes, its scale the checkpoint's values, the output torchao's own module's
built from the same tensors, dequantize() the format's definition; a granularity other than the
checkpoint's, a partial block, an unquantized tensor and a sharded Float8Tensor refused before
anything is allocated, each with its exact text.
"""
import functools
import json
import pathlib
import sys

import pytest

from conftest import metactl
from test_python_layouts import torchrun

HERE = pathlib.Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    sys.path.insert(0, str(HERE))
    import quant_checkpoints as q

    root = tmp_path_factory.mktemp("torchao")
    made = {"block": q.llama_fp8_aligned, "channel": functools.partial(q.llama_compressed, strategy="channel"),
            "tensor": functools.partial(q.llama_compressed, strategy="tensor"),
            "partial": functools.partial(block_checkpoint, rows=160), "cut": functools.partial(block_checkpoint, rows=384)}
    for name, make in made.items():
        make(root / name)
        metactl("digest", root / name, check=0)  # so that "verified" proves the codes and scales
    return root


def block_checkpoint(folder, rows):
    """One [rows, 256] FP8 weight `proj.weight` in 128x128 blocks."""
    import torch
    from safetensors.torch import save_file

    import quant_checkpoints as q

    folder.mkdir()
    codes, scale = q.fp8_blocks(torch.randn(rows, 256, generator=torch.Generator().manual_seed(5)))
    save_file({"proj.weight": codes, "proj.weight_scale_inv": scale}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({"architectures": ["Proj"], "model_type": "proj",
                                                    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                                                            "weight_block_size": [128, 128]}}))


def test_torchao_float8_tensors_hold_the_checkpoints_codes_and_scales(folders, tmp_path):
    cases = [{"name": name, "folder": str(folders / name), "granularity": g}
             for name, g in (("block", "block"), ("channel", "row"), ("tensor", "tensor"))]
    # Sharded as torchao's own tensor-parallel tests shard (DTensor.from_local of each rank's
    # Float8Tensor, Shard(0)): 128 rows a rank keep whole 128-row blocks; per row always does.
    cases += [{"name": f"sharded:{name}", "folder": str(folders / name), "granularity": g, "sharded": True}
              for name, g in (("block", "block"), ("channel", "row"))]
    cases += [
        # torchao's default, per row, from 128x128 blocks
        {"name": "refused:granularity", "folder": str(folders / "block"), "granularity": "row"},
        # per tensor, sharded: each rank's torchao tensor has a scale of its own rows
        {"name": "refused:sharded-tensor", "folder": str(folders / "tensor"), "granularity": "tensor",
         "sharded": True},
        {"name": "refused:partial", "folder": str(folders / "partial"), "partial": True},
        {"name": "refused:cut", "folder": str(folders / "cut"), "cut": True},
        # the checkpoint keeps lm_head in BF16 (compressed-tensors' ignore)
        {"name": "refused:unquantized", "folder": str(folders / "channel"), "granularity": "row", "lm_head": True},
    ]
    results = torchrun(2, cases, tmp_path, script="torchao_rank.py")
    for rank, by_case in enumerate(results):
        for c in cases:
            r = by_case[c["name"]]
            if c["name"].startswith("refused:"):
                assert "crash" in r, (c["name"], r)
                continue
            assert "crash" not in r, f"rank {rank} {c['name']}: {r['crash']}\n{r.get('trace', '')}"
            assert r["bad"] == [], (c["name"], r["bad"])
            assert r["kinds"] == (["DTensor", "Parameter"] if c.get("sharded") else ["Float8Tensor", "Parameter"])
            assert r["same_output"] is True and r["dequantized_differ"] == [], (c["name"], r)
            # llm-compressor's scales are BF16, torchao's float32 (an exact conversion)
            scale = "direct (as {}_scale_inv)" if c["folder"].endswith("block") else "direct>F32 (as {}_scale)"
            first = "model.layers.0.self_attn.q_proj.weight"
            assert r["sources"] == {first: "direct", first + ".scale": scale.format(first)}, r["sources"]
            assert r["proven"] is True, (c["name"], r["content"])
        granularity = by_case["refused:granularity"]["crash"]
        assert ("model.layers.0.mlp.down_proj.weight: model.layers.0.mlp.down_proj.weight: the module keeps these "
                "codes with one scale per row ([1, 512]), but the checkpoint stores one per 128x128 block "
                "(fp8-block 128x128: model.layers.0.mlp.down_proj.weight F8_E4M3 x "
                "model.layers.0.mlp.down_proj.weight_scale_inv F32): build the module with the checkpoint's "
                "granularity (one scale per 128x128 block) or dequantize on load (dequantize=True)") in granularity, granularity
        # its scales, of another shape, are one cause with their codes: not a module of another size
        assert ("model.layers.0.mlp.down_proj.weight_scale_inv: the scales of model.layers.0.mlp.down_proj.weight, "
                "refused with its codes (see model.layers.0.mlp.down_proj.weight)") in granularity, granularity
        assert "differ in shape" not in granularity, granularity
        sharded = by_case["refused:sharded-tensor"]["crash"]
        assert ("model.layers.0.mlp.down_proj.weight: the module keeps these codes with one scale per 96x320 block, "
                "but the checkpoint stores one per tensor ([192, 320])") in sharded, sharded
        partial = by_case["refused:partial"]["crash"]
        assert ("proj.weight: its dimension 0 (160) ends in a partial 128-element scale block, which a module "
                "declaring its block size cannot hold (torchao's Float8Tensor takes a block as the dimension / its "
                "scale count: 80 here): dequantize on load (dequantize=True)") in partial, partial
        cut = by_case["refused:cut"]["crash"]
        assert (f"proj.weight: this rank's part [{192 * rank}, {192 * (rank + 1)}) of dimension 0 cuts through its "
                "128-element scale blocks, so it cannot hold exactly the scales of its codes; split that dimension "
                "on block boundaries (3 blocks of 128: e.g. 3 or a divisor of it ranks, each holding whole blocks) "
                "or dequantize on load (dequantize=True)") in cut, cut
        unquantized = by_case["refused:unquantized"]["crash"]
        assert ("lm_head.weight: the module keeps it as FP8 codes with their scales, but the checkpoint stores it "
                "unquantized, as BF16: load it into an unquantized module and quantize it after") in unquantized, unquantized


def test_a_granularity_of_the_wrong_rank_or_a_non_positive_block_is_refused_at_the_edge():
    from pyproc import python

    out = python("""
        import torch
        from metaload import _native, BadInputError
        for block in ([0, 128], [128], [1, -5]):
            try:
                _native.Request("w", [256, 128], torch.empty(256, 128, dtype=torch.float8_e4m3fn), scale_block=block)
            except BadInputError as e:
                print(e)
        print(_native.Request("w", [256, 128], torch.empty(0), scale_block=[128, 128]).scale_block)
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == [
        f"w: scale_block {block} must give a positive number of elements per scale for each of its 2 dimensions"
        for block in ("[0, 128]", "[128]", "[1, -5]")] + ["[128, 128]"], out.stdout
