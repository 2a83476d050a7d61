"""Quantized checkpoints (issue 36): FP8 block-scaled (DeepSeek-V3's release), compressed-tensors
FP8 per channel and per tensor, gpt-oss MXFP4 — built from models transformers itself builds and
saves (quant_checkpoints.py) — dequantized on load into transformers' own BF16 modules, every rank
bit for bit equal to the format's own definition on every layout (FSDP rows through a block, TP
columns, _StridedShard, 2-D meshes, replicas, expert parallelism); kept quantized with each rank's
scales those of its codes, or refused naming the split; refused without dequantize=True, naming
the quantization; and compared with transformers' own dequantizing load, which scales the rows of
a partial block with the wrong scale.
"""
import json
import pathlib
import sys

import pytest

from conftest import metactl
from pyproc import ok, python
from test_python_layouts import torchrun

HERE = pathlib.Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    sys.path.insert(0, str(HERE))
    import quant_checkpoints as q

    root = tmp_path_factory.mktemp("quantized")
    q.deepseek_fp8(root / "deepseek")
    q.llama_compressed(root / "channel", "channel")
    q.llama_compressed(root / "tensor", "tensor")
    q.gpt_oss_mxfp4(root / "gpt-oss")
    kept_checkpoint(root / "kept")
    q.llama_fp8_aligned(root / "llama-fp8")
    q.deepseek_fp8(root / "deepseek-aligned", **q.DEEPSEEK_ALIGNED)
    return root


def kept_checkpoint(folder):
    """A module holding FP8 codes beside their block scales, as transformers' FP8Linear does."""
    import torch
    from safetensors.torch import save_file

    import quant_checkpoints as q

    folder.mkdir()
    codes, scale = q.fp8_blocks(torch.randn(512, 256, generator=torch.Generator().manual_seed(3)))
    save_file({"proj.weight": codes, "proj.weight_scale_inv": scale}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({"architectures": ["Kept"], "model_type": "kept",
                                                    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                                                            "weight_block_size": [128, 128]}}))


LAYOUTS = {
    "deepseek": [([4], ["S0"]), ([4], ["S1"]), ([4], ["SS0/2"]), ([2, 2], ["S0", "S1"]), ([2, 2], ["R", "S0"])],
    "channel": [([4], ["S0"]), ([2, 2], ["S1", "SS0/2"])],
    "tensor": [([4], ["S1"]), ([2, 2], ["S0", "R"])],
    "gpt-oss": [([4], ["S0"]), ([2, 2], ["S0", "S2"]), ([2, 2], ["S2", "R"])],
}


def test_every_format_and_layout_dequantizes_bit_for_bit_with_the_formats_definition(folders, tmp_path):
    for name in [*LAYOUTS, "llama-fp8", "deepseek-aligned"]:
        metactl("digest", folders / name, check=0)  # so that the proof is checked
    cases = [{"name": f"{name}:{'x'.join(map(str, mesh))}:{','.join(p)}", "folder": str(folders / name), "mesh": mesh,
              "placements": p} for name, layouts in LAYOUTS.items() for mesh, p in layouts]
    cases.append({"name": "kept:4:S0", "folder": str(folders / "kept"), "mesh": [4], "placements": ["S0"],
                  "kind": "kept"})
    # transformers' FP8Linear: 256- and 512-row weights over 2 keep whole blocks; over 4 (64 rows) not.
    cases.append({"name": "kept-hf:2x2:S0,R", "folder": str(folders / "llama-fp8"), "mesh": [2, 2],
                  "placements": ["S0", "R"], "kind": "kept-hf"})
    # transformers' own FP8 quantizer's DeepSeek-V3 (FP8Linear and FP8Experts, the experts' scales
    # fused as their codes are): dimension 0 in 2 (experts for the fused ones), whole blocks, 2 replicas.
    cases.append({"name": "kept-hf-quantizer:2x2:S0,R", "folder": str(folders / "deepseek-aligned"),
                  "mesh": [2, 2], "placements": ["S0", "R"], "kind": "kept-hf-quantizer"})
    # ... whose experts' 192 rows end in partial blocks: transformers declares gate_up_proj_scale_inv
    # [4, 3, 2], the experts' scales concatenate to 4 rows: no layout holds the right scales.
    cases.append({"name": "kept-hf-quantizer:partial", "folder": str(folders / "deepseek"), "mesh": [4],
                  "placements": ["R"], "kind": "kept-hf-quantizer"})
    cases.append({"name": "kept-hf:4:S0", "folder": str(folders / "llama-fp8"), "mesh": [4], "placements": ["S0"],
                  "kind": "kept-hf"})
    cases.append({"name": "kept:4:S1", "folder": str(folders / "kept"), "mesh": [4], "placements": ["S1"],
                  "kind": "kept"})
    # DCP's own dcp.load with metaload.StorageReader(dequantize=True) and metaload.LoadPlanner (DCP
    # reads state_dict names as stored: no fused experts, so DeepSeek's per-expert tensors are not here).
    cases += [{"name": f"dcp:{name}:2x2:{','.join(p)}", "folder": str(folders / name), "mesh": [2, 2],
               "placements": p, "kind": "dcp"} for name, p in (("channel", ["S0", "S1"]), ("gpt-oss", ["S0", "S2"]))]
    # down_proj's 96 intermediate values over 4: 24 each, through MXFP4's 32-value groups.
    cases.append({"name": "refused:gpt-oss", "folder": str(folders / "gpt-oss"), "mesh": [4], "placements": ["S1"]})
    cases.append({"name": "refused:deepseek", "folder": str(folders / "deepseek"), "mesh": [4], "placements": ["S0"],
                  "dequantize": False})
    results = torchrun(4, cases, tmp_path, script="quant_rank.py")
    for rank, by_case in enumerate(results):
        for c in cases:
            r = by_case[c["name"]]
            if c["name"] == "kept-hf-quantizer:partial":
                assert "crash" in r and ("model.layers.1.mlp.experts.gate_up_proj_scale_inv: the module's shape is "
                                         "[4, 3, 2], but the checkpoint's tensors for it") in r["crash"], (c["name"], r)
                continue
            if c["name"] == "kept-hf:4:S0":
                assert "crash" in r and ("model.layers.0.self_attn.q_proj.weight: this rank's part [" in r["crash"] and
                                         "cuts through its 128-element scale blocks" in r["crash"]), (c["name"], r)
                continue
            if c["name"] == "kept:4:S1":
                # 256 columns over 4 ranks: 64 each, through the 128-column scale blocks.
                assert "crash" in r and "cuts through its 128-element scale blocks" in r["crash"], (c["name"], r)
                continue
            if c["name"] == "refused:gpt-oss":
                assert "crash" in r and ("model.layers.0.mlp.experts.down_proj: this rank's part [" in r["crash"] and
                                         "cuts through MXFP4's 32-value groups" in r["crash"]), (c["name"], r)
                continue
            if c["name"] == "refused:deepseek":
                assert "crash" in r and ("stored quantized (fp8: FP8 codes, one scale per 128x128 block; fp8-block "
                                         "128x128: model.layers.0.self_attn.kv_a_proj_with_mqa.weight F8_E4M3 x "
                                         "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv F32): pass "
                                         "dequantize=True") in r["crash"], (c["name"], r)
                continue
            assert "crash" not in r, f"rank {rank} {c['id']}: {r['crash']}\n{r.get('trace', '')}"
            assert r["bad"] == [], f"rank {rank} {c['id']}: {r['bad'][:5]}"
            if c.get("kind") == "kept":
                assert r["sources"]["proj.weight"] == "direct", r["sources"]
                continue
            if c.get("kind") == "kept-hf-quantizer":
                key = "model.layers.1.mlp.experts.gate_up_proj"
                assert r["sources"][key].endswith("(fused from 4 stored tensors)"), r["sources"][key]  # 2 experts of 4
                assert r["sources"][key + "_scale_inv"].endswith("(fused from 4 stored tensors)"), r["sources"]
                assert r["proven"] is True, (c["name"], r["content"], r["unproven"])
                continue
            if c.get("kind") == "kept-hf":  # codes and scales read as stored (or fanned out to a replica), proven
                key = "model.layers.1.mlp.down_proj"
                assert {r["sources"][key + ".weight"], r["sources"][key + ".weight_scale_inv"]} <= {
                    "direct", "fanout:rank 0", "fanout:rank 1", "fanout:rank 2", "fanout:rank 3"}, r["sources"]
                assert r["proven"] is True, (c["name"], r["content"], r["unproven"])
                continue
            dequantized = {k: v for k, v in r["sources"].items() if v.startswith("dequantized:")}
            assert dequantized, (c["name"], r["sources"])
            # Each tensor counted once; a dequantized value as computed from checkpoint bytes.
            assert r["counts"]["dequantized"] == len(dequantized), (c["name"], r["counts"])
            assert sum(r["counts"].values()) == len(r["sources"]), (c["name"], r["counts"], r["sources"])
            assert f"{len(dequantized)} computed from checkpoint bytes (dequantized)" in r["summary"], r["summary"]
            if c["folder"].endswith("deepseek"):
                key = "model.layers.0.self_attn.kv_a_proj_with_mqa.weight"
                assert r["sources"][key] == (f"dequantized:direct>BF16 (fp8-block 128x128: {key} F8_E4M3 x "
                                             f"{key}_scale_inv F32)"), (c["name"], rank, r["sources"][key])
            if c["folder"].endswith(("channel", "tensor")) and "R" not in c["placements"]:
                # its own codes and each value's whole scale tensor, nothing else (no replica sends)
                assert r["bytes_read"] == r["expected_bytes"], (c["name"], r["bytes_read"], r["expected_bytes"])
            # Codes are read exactly, scales alike by every holder: the sum proves every tensor.
            assert r["proven"] is True, (c["name"], r["content"], r["unproven"])


def test_transformers_dequantization_differs_exactly_where_a_block_is_partial(folders):
    out = ok(f"""
        import json, torch, transformers, metaload
        def same(a, b):
            return a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))
        result = {{}}
        for name in ("deepseek", "gpt-oss"):
            folder = "{folders}/" + name
            reference = transformers.AutoModelForCausalLM.from_pretrained(folder + "-reference",
                                                                          dtype=torch.bfloat16).state_dict()
            theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).state_dict()
            ours = metaload.from_pretrained(folder, dequantize=True).state_dict()
            result[name] = {{"ours": [k for k, v in ours.items() if not same(v, reference[k])],
                            "theirs": {{k: list(v.shape) for k, v in theirs.items() if not same(v, reference[k])}}}}
        print(json.dumps(result))
    """, timeout=300)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["deepseek"]["ours"] == [] and result["gpt-oss"]["ours"] == []
    # transformers 5.24 derives the block from the scale grid (rows // scale rows): a [160, 256]
    # weight with 2 scale rows gets blocks of 80, so rows 80-127 take the second row's scale. The
    # format's definition (DeepSeek's weight_dequant, 128x128 blocks, the last partial) is the
    # reference; metaload follows it.
    theirs = result["deepseek"]["theirs"]
    # Every tensor whose stored weights have a partial block (kv_a_proj_with_mqa's 160 rows, the
    # experts' and shared experts' 192), fused or not; none of those whose blocks are whole.
    assert theirs and all("kv_a_proj_with_mqa" in k or "experts" in k for k in theirs), theirs
    assert {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.self_attn.q_a_proj.weight"}.isdisjoint(theirs)
    assert "model.layers.0.self_attn.kv_a_proj_with_mqa.weight" in theirs
    assert result["gpt-oss"]["theirs"] == {}  # MXFP4: transformers and the OCP definition agree


def test_from_pretrained_spellings_and_refusals(folders):
    folder = folders / "deepseek"
    out = python(f"""
        import torch, transformers, metaload
        reference = transformers.AutoModelForCausalLM.from_pretrained("{folder}-reference",
                                                                      dtype=torch.bfloat16).state_dict()
        model = metaload.from_pretrained("{folder}",
                                         quantization_config=transformers.FineGrainedFP8Config(dequantize=True))
        assert all(torch.equal(v, reference[k]) for k, v in model.state_dict().items())
        print("fp8 config: equal")
        try:
            metaload.from_pretrained("{folder}")
        except metaload.MetaTensorError as e:
            print("plain:", str(e).splitlines()[1].strip())
        try:
            metaload.from_pretrained("{folder}", quantization_config=transformers.FineGrainedFP8Config())
        except metaload.BadInputError as e:
            print("other:", e)
    """, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    lines = out.stdout.splitlines()
    assert "fp8 config: equal" in lines
    assert any(line.startswith("plain: rank 0: model.") and "stored quantized" in out.stdout for line in lines), out.stdout
    assert ("other: metaload.from_pretrained: quantization_config= is not supported: metaload reads the quantization "
            "the checkpoint's config.json declares: pass dequantize=True") in out.stdout


def test_a_checkpoint_that_breaks_its_quantization_is_refused_naming_the_tensor(folders, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    broken.mkdir()
    stored = load_file(folders / "kept" / "model.safetensors")
    stored["proj.weight_scale_inv"] = torch.ones(2, 2)  # [512, 256] in 128x128 blocks has [4, 2] scales
    save_file(stored, broken / "model.safetensors")
    (broken / "config.json").write_text((folders / "kept" / "config.json").read_text())
    out = python(f"""
        import torch, metaload
        module = torch.nn.Module()
        module.proj = torch.nn.Linear(256, 512, bias=False, device="meta", dtype=torch.bfloat16)
        try:
            metaload.materialize(module, checkpoint="{broken}", dequantize=True, verify=False)
        except metaload.MetaTensorError as e:
            print(e)
    """)
    assert ("proj.weight: the checkpoint is fp8: FP8 codes, one scale per 128x128 block, but its scale "
            "proj.weight_scale_inv has shape [2, 2], but a [512, 256] weight in fp8-block 128x128 has [4, 2] "
            "scales: not dequantized") in out.stdout, out.stdout + out.stderr[-3000:]
