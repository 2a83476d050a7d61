"""bench/run_bench.py --only e2e-fp8 at a few MiB, one round: transformers' and metaload's
dequantizing loads of the FP8 checkpoint both run on four CPU ranks, both appear in the printed
table, and they agree bit for bit on every rank (the benchmark's own check); and bench's
vectorized quantizer gives the same bits as the per-block definition the tests use."""
import json
import os
import pathlib
import subprocess
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests" / "integration" / "python")]
import fp8_checkpoint  # noqa: E402
import quant_checkpoints  # noqa: E402

# 1 layer, hidden 512 (4 heads of 128), 4 KV heads, intermediate 1024, vocab 1024: 7.3 MB in
# BF16; every quantized weight's rows (512, 1024) split into whole 128-row blocks on 4 ranks.
DIMS = "layers=1,hidden=512,intermediate=1024,heads=4,kv_heads=4,vocab=1024"


def test_quantizer_matches_the_per_block_definition_with_partial_blocks():
    torch.manual_seed(0)
    w = (torch.randn(300, 200) * 0.3).to(torch.bfloat16)
    codes, scale = fp8_checkpoint.fp8_blocks(w)
    want_codes, want_scale = quant_checkpoints.fp8_blocks(w)
    assert torch.equal(codes.view(torch.uint8), want_codes.view(torch.uint8))
    assert torch.equal(scale, want_scale)
    value = fp8_checkpoint.fp8_value(codes, scale)
    assert torch.equal(value.view(torch.int16), quant_checkpoints.fp8_blocks_value(codes, scale).view(torch.int16))


def test_tiny_run_prints_both_loaders_and_they_agree_bit_for_bit(tmp_path):
    build = pathlib.Path(os.environ.get("METALOAD_BUILD_DIR", ROOT / "build"))
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "run_bench.py"), "--build-dir", str(build),
                        "--only", "e2e-fp8", "--e2e-dims", DIMS, "--e2e-repeats", "1", "--timeout", "300",
                        "--work-dir", str(tmp_path), "--out", str(out)],
                       capture_output=True, text=True, timeout=580)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for label in ("transformers from_pretrained(distributed_config) dequantizing",
                  "metaload.from_pretrained(distributed_config, dequantize=True)",
                  "meta + fully_shard + metaload.materialize(dequantize=True)"):
        assert any(line.strip().startswith(label) for line in r.stdout.splitlines()), (label, r.stdout)
    assert "loaders agree bit for bit: yes (hf_dist, metaload_hf_dist, metaload; 4 ranks x " in r.stdout, r.stdout
    result = json.loads(out.read_text())["e2e_fp8"]
    assert result["loaders_agree"]["equal"] is True
    assert result["loaders_agree"]["tensors_per_rank"] == 12  # 7 projections, 2 norms, embed, norm, lm_head
    assert result["errors"] == {}
    # Every rank checked its shards against DeepSeek's dequantization of the file's codes too.
    for case in ("hf_dist", "metaload_hf_dist", "metaload"):
        assert all(rank["check_problems"] == [] for rank in result["samples"][case][0]["ranks"]), case
    assert 1.0 <= result["e2e_fp8_bytes_read_over_checkpoint"] <= 1.05
