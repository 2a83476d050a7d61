"""Every DTensor layout gets exactly its bytes (issue 21), proven against torch's own sharding.

One torchrun launch of 4 CPU ranks on Gloo (tests/integration/python/layouts_rank.py) places a
module's parameters with distribute_tensor on meta — a sweep of placements (Replicate, Shard(0),
Shard(1), _StridedShard with split factors 2, 3 and 4, Partial sum/avg/max/min) × meshes (1-D of 4,
2-D 2×2, 3-D 2×1×2 and 1×2×2) × uneven sizes (1002, 7 and 5 rows, 6, 5 and 3 columns: some
shards empty) × dtypes (float32, bfloat16) — calls metaload.materialize on a checkpoint
safetensors wrote, and compares each local tensor bit for bit with
distribute_tensor(reference, mesh, placements).to_local(), full_tensor() with the checkpoint's
tensor, and the bytes read with the bytes held. A transformers Mixtral (fused experts read from
per-expert tensors) placed with _StridedShard loads the same way. Placements metaload cannot
prove (Partial("product"), _MaskPartial) are refused naming tensor and placement before anything
is allocated.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import BUILD_DIR, free_port

HERE = pathlib.Path(__file__).resolve().parent
VENV_BIN = pathlib.Path(sys.executable).parent
ENV = {**os.environ, "PYTHONPATH": str(BUILD_DIR / "python"), "OMP_NUM_THREADS": "1",
       "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
SHAPES = {"rows1002": [1002, 6], "rows7": [7, 5], "rows5": [5, 3]}

# (mesh, placements): every placement metaload reads, alone and mixed, on 1-D, 2-D and 3-D meshes.
SWEEP = [
    ([4], ["R"]), ([4], ["S0"]), ([4], ["S1"]), ([4], ["SS0/2"]), ([4], ["SS0/3"]), ([4], ["SS1/2"]),
    ([4], ["Psum"]), ([4], ["Pavg"]), ([4], ["Pmax"]), ([4], ["Pmin"]),
    ([2, 2], ["S0", "S0"]), ([2, 2], ["S0", "S1"]), ([2, 2], ["SS0/2", "S0"]),
    ([2, 2], ["R", "SS1/2"]), ([2, 2], ["SS1/2", "S1"]), ([2, 2], ["Psum", "S0"]), ([2, 2], ["S1", "Pavg"]),
    ([2, 2], ["Psum", "Psum"]), ([2, 2], ["SS0/2", "Psum"]),
    ([2, 1, 2], ["S0", "R", "SS0/2"]), ([2, 1, 2], ["SS0/2", "S1", "S0"]), ([2, 1, 2], ["Psum", "S0", "S1"]),
    ([1, 2, 2], ["SS0/4", "SS0/2", "S0"]), ([1, 2, 2], ["R", "Psum", "SS1/2"]),
]
# Split factors no shard order explains (3 before a mesh dimension of 2): torch places them
# (distribute_tensor) but cannot gather them (full_tensor() aborts in Gloo), so only the local
# tensors are compared.
LOCAL_ONLY = [([2, 2], ["SS0/3", "S0"]), ([1, 2, 2], ["SS0/3", "SS0/2", "S0"])]


def case_id(mesh, placements):
    return "x".join(map(str, mesh)) + ":" + ",".join(placements)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """The sweep's tensors saved by safetensors; a tiny Mixtral saved by transformers."""
    import torch
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("layouts")
    torch.manual_seed(21)
    tensors = {f"{prefix}.{name}": torch.randn(shape).to(dtype) for prefix, dtype in
               (("f32", torch.float32), ("bf16", torch.bfloat16)) for name, shape in SHAPES.items()}
    tensors["f32.rows7"][0, 0] = -0.0  # a Partial(sum) must give -0.0 back, not +0.0
    (root / "sweep").mkdir()
    save_file(tensors, str(root / "sweep" / "model.safetensors"))
    import transformers  # noqa: F401  pinned in scripts/requirements.txt: missing is a failure, never a skip
    from transformers import AutoModelForCausalLM, MixtralConfig

    config = MixtralConfig(vocab_size=1002, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                           num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False)
    AutoModelForCausalLM.from_config(config).save_pretrained(root / "mixtral", max_shard_size="150KB")
    return root


def torchrun(nproc, cases, tmp_path, script="layouts_rank.py"):
    """Runs `script` (this folder's) on `nproc` CPU ranks; each rank's results by case name."""
    cases_file, out = tmp_path / "cases.json", tmp_path / "out"
    out.mkdir()
    cases_file.write_text(json.dumps(cases))
    cmd = [str(VENV_BIN / "torchrun"), "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), str(HERE / script), str(cases_file), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=480, env=ENV)
    assert proc.returncode == 0, f"torchrun exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]
    assert all(r["world"] == nproc for r in ranks)
    return [{c["name"]: c for c in rank["results"]} for rank in ranks]


def test_every_placement_mesh_size_and_dtype_gets_torchs_local_tensor_bit_for_bit(checkpoints, tmp_path):
    sweep = str(checkpoints / "sweep")
    cases = [{"id": case_id(m, p), "kind": "sweep", "folder": sweep, "mesh": m, "placements": p, "shapes": SHAPES,
              "full_tensor": (m, p) not in LOCAL_ONLY} for m, p in SWEEP + LOCAL_ONLY]
    mixtral = str(checkpoints / "mixtral")
    cases += [{"id": "mixtral:" + ",".join(p), "kind": "hf", "folder": mixtral, "mesh": m, "placements": p}
              for m, p in (([4], ["SS1/2"]), ([2, 2], ["SS1/2", "S1"]), ([2, 2], ["Psum", "SS0/2"]))]
    cases += [{"id": f"refused:{p}", "kind": "sweep", "folder": sweep, "mesh": [2, 2], "placements": ["S0", p],
               "shapes": SHAPES} for p in ("Pproduct", "Pmask")]
    results = torchrun(4, cases, tmp_path)
    for rank, by_case in enumerate(results):
        for c in cases:
            r = by_case[c["id"]]
            assert "crash" not in r, r["crash"]
            if c["id"].startswith("refused:"):
                continue
            assert "error" not in r, (c["id"], r["message"])
            assert r["mismatches"] == [], (c["id"], rank)
            # Read exactly the tensors it says it read; on a Replicate() mesh dimension the rest
            # arrived from the member of its replica group that read it, nothing gone wrong.
            assert r["bytes_read"] == r["holds_bytes"], (c["id"], rank)
            assert (r["received"] > 0) <= ("R" in c["placements"]), (c["id"], rank)
            assert r["notes"] == [], (c["id"], rank, r["notes"])
            assert r["verified"] > 0
            # Every tensor is counted under what proves it (digest_checked is a part of checkpoint).
            counted = sum(n for k, n in r["counts"].items() if k != "digest_checked")
            assert counted == len(r["sources"]), (c["id"], rank, r["counts"], r["sources"])
    # A strided shard's rows are several boxes: rank 0 of SS0/2 on 4 holds rows 0 and 4 of 7.
    strided = results[0]["4:SS0/2"]
    # Each box a (start, length) pair per dimension (was all starts, then all lengths).
    assert strided["boxes"]["f32.rows7"] == [[[0, 1], [0, 5]], [[4, 1], [0, 5]]]
    assert "f32.rows7" not in strided["slices"]
    # Partial(sum): coordinate 0 reads the value, the others hold the identity and read nothing.
    assert results[0]["4:Psum"]["bytes_read"] > 0
    assert results[0]["4:Psum"]["counts"]["checkpoint"] == 6 and results[0]["4:Psum"]["counts"]["identity"] == 0
    for rank in results[1:]:
        assert rank["4:Psum"]["bytes_read"] == 0
        assert rank["4:Psum"]["sources"]["bf16.rows1002"] == "identity:Partial(sum)"
        assert rank["4:Psum"]["counts"]["identity"] == 6 and rank["4:Psum"]["counts"]["checkpoint"] == 0
    # An empty shard (5 rows over 4: 2, 2, 1, 0) reads nothing and is no error.
    assert results[3]["4:S0"]["slices"]["f32.rows5"] == [[0, 0], [0, 3]]
    assert results[3]["4:S0"]["counts"]["empty"] == 2  # rows5 in both dtypes
    for rank in results:
        for p, shown in (("Pproduct", "Partial(product)"), ("Pmask", "_MaskPartial")):
            r = rank[f"refused:{p}"]
            assert r["error"] == "BadInputError", r
            assert r["message"].startswith("f32.rows1002: placement " + shown), r["message"]
            assert "before allocating or reading anything" in r["message"]
            assert r["still_meta"]
