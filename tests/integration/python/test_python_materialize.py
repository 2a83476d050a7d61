"""`import metaload` in the training process (issue 11), proven the way users run it.

transformers builds and save_pretrained()s tiny random models (sharded); torchrun starts CPU
ranks on Gloo that build each model on meta, parallelize it (none, FSDP2 fully_shard, tensor
parallel, FSDP2 x TP), call metaload.materialize, and compare with from_pretrained: every local
shard against torch's own sharding of the reference tensor (distribute_tensor), full_tensor(),
the bytes each rank read against its shards' bytes, and logits of a fixed batch
(tests/integration/python/materialize_rank.py). Streaming ranks run in a mount namespace where the
checkpoint's folder is empty, so they can only stream it from a real metad.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import BUILD_DIR, Daemon, blind_to, free_port, metactl

HERE = pathlib.Path(__file__).resolve().parent
VENV_BIN = pathlib.Path(sys.executable).parent
ENV = {**os.environ, "PYTHONPATH": str(BUILD_DIR / "python"), "OMP_NUM_THREADS": "1",
       "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


def make_models(root):
    """Tiny random models of five families, saved as sharded safetensors by transformers."""
    import torch
    from transformers import (AutoModelForCausalLM, GPT2Config, LlamaConfig, MistralConfig, MixtralConfig,
                              Qwen2Config)

    common = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)
    configs = {
        # 1002 rows: uneven over 4 ranks (251, 251, 251, 249), as real vocabularies are.
        "llama": (LlamaConfig(vocab_size=1002, tie_word_embeddings=False, **common), torch.bfloat16),
        "qwen2": (Qwen2Config(vocab_size=998, tie_word_embeddings=True, **common), torch.float32),
        "mistral": (MistralConfig(vocab_size=1000, tie_word_embeddings=False, **common), torch.float32),
        "mixtral": (MixtralConfig(vocab_size=1000, num_local_experts=4, num_experts_per_tok=2,
                                  tie_word_embeddings=False, **common), torch.float32),
        "gpt2": (GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=64), torch.float32),
    }
    for name, (config, dtype) in configs.items():
        torch.manual_seed(len(name))
        model = AutoModelForCausalLM.from_config(config).to(dtype)
        model.save_pretrained(root / name, max_shard_size="150KB")
    return list(configs)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import transformers  # noqa: F401  pinned in scripts/requirements.txt: missing is a failure, never a skip
    root = tmp_path_factory.mktemp("models")
    make_models(root)
    return root


def torchrun(nproc, cases, tmp_path, prefix=(), script="materialize_rank.py"):
    """Runs the ranks (`script` in this folder); returns each rank's results by case id."""
    cases_file, out = tmp_path / f"cases{nproc}.json", tmp_path / f"out{nproc}"
    out.mkdir()
    cases_file.write_text(json.dumps(cases))
    cmd = [*prefix, str(VENV_BIN / "torchrun"), "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), str(HERE / script), str(cases_file), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=480, env=ENV)
    assert proc.returncode == 0, f"torchrun exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]
    return [{c["name"]: c for c in rank} for rank in ranks]


def assert_loaded(result, logits="exact"):
    assert "crash" not in result, result["crash"]
    assert "error" not in result, result["message"]
    assert result["mismatches"] == []
    assert result["bytes_read"] == result["expected_bytes"] > 0
    assert result["verified"] > 0
    assert result["requires_grad"]
    assert result.get("tied_one_object", True)
    if logits == "exact":
        assert result["logits_equal"], result["logits_max_diff"]
    else:
        # Row-parallel layers sum partial products on each rank and then across ranks: float32
        # rounding differs from one matmul by a few ulps. The weights themselves are compared
        # bit for bit above.
        assert result["logits_max_diff"] < 1e-5


def case(case_id, model, folder, mode, **extra):
    return {"id": case_id, "model": model, "folder": str(folder), "checkpoint": str(folder), "mode": mode, **extra}


def test_two_ranks_plain_fsdp2_and_tp_equal_from_pretrained(models, tmp_path):
    cases = []
    for name in ("llama", "qwen2", "mistral", "mixtral", "gpt2"):
        cases += [case(f"{name}-plain", name, models / name, "plain"),
                  case(f"{name}-fsdp", name, models / name, "fsdp")]
    for name in ("llama", "qwen2", "mistral"):
        cases.append(case(f"{name}-tp", name, models / name, "tp"))
    # A BF16 checkpoint into a float32 module: converted on load, as load_state_dict copies.
    cases.append(case("llama-bf16-to-f32", "llama", models / "llama", "fsdp", dtype="float32"))
    cases[0]["dtype"] = cases[1]["dtype"] = "bfloat16"  # llama as stored; the others float32
    results = torchrun(2, cases, tmp_path)
    for rank in results:
        for c in cases:
            r = rank[c["id"]]
            assert_loaded(r, logits="close" if c["mode"] == "tp" else "exact")
            if c["mode"] != "plain":
                assert any(s != "kept" for s in r["sources"].values())
    # Each FSDP2 rank read about half the checkpoint; plain ranks read all of it.
    llama_plain = results[0]["llama-plain"]["bytes_read"]
    assert sum(rank["llama-fsdp"]["bytes_read"] for rank in results) == llama_plain
    assert all(">F32" in s or "buffer" in s for s in results[0]["llama-bf16-to-f32"]["sources"].values())
    # Qwen2 ties lm_head to the embedding: one object, read once.
    assert results[0]["qwen2-plain"]["ties"] == [["lm_head.weight", "model.embed_tokens.weight", True]]


def test_four_ranks_fsdp2_uneven_and_fsdp_by_tp(models, tmp_path):
    cases = [case("llama-fsdp4", "llama", models / "llama", "fsdp", dtype="bfloat16", dtensor_ops=True),
             # float32 module from the BF16 checkpoint: TP's partial sums differ by ulps only.
             case("llama-dp2-tp2", "llama", models / "llama", "dp_tp", dtype="float32"),
             case("mixtral-fsdp4", "mixtral", models / "mixtral", "fsdp")]
    results = torchrun(4, cases, tmp_path)
    for rank in results:
        assert_loaded(rank["llama-fsdp4"])
        # FSDP2's sharded parameters are allocated as local tensors (issue 22): empty_like on a
        # DTensor runs DTensor's sharding propagation, ~0.1 s per rank uncached.
        assert not [op for op in rank["llama-fsdp4"]["dtensor_ops"] if "empty" in op], rank["llama-fsdp4"]["dtensor_ops"]
        assert_loaded(rank["mixtral-fsdp4"])
        assert_loaded(rank["llama-dp2-tp2"], logits="close")
    # 1002 embedding rows over 4 ranks, as torch.chunk splits them: 251, 251, 251, 249.
    total = sum(rank["llama-fsdp4"]["bytes_read"] for rank in results)
    plain_bytes = sum(f.stat().st_size for f in (models / "llama").glob("*.safetensors"))
    assert total < plain_bytes and total > plain_bytes * 0.95


def test_ranks_that_cannot_see_the_files_stream_them(models, tmp_path):
    served = tmp_path / "served"
    shutil.copytree(models / "llama", served / "llama")
    daemon = Daemon(tmp_path, "a", [served])
    try:
        metactl("register", "llama", "--checkpoint", served / "llama", "--daemon", daemon.address, check=0)
        cases = [{"id": "stream-fsdp", "model": "llama", "folder": str(models / "llama"), "daemon": daemon.address,
                  "mode": "fsdp", "dtype": "bfloat16"},
                 {"id": "stream-plain", "model": "llama", "folder": str(models / "llama"), "daemon": daemon.address,
                  "mode": "plain", "dtype": "bfloat16", "source": "stream"}]
        results = torchrun(2, cases, tmp_path, prefix=blind_to(served))
    finally:
        assert daemon.stop() == 0
    for rank in results:
        for c in cases:
            r = rank[c["id"]]
            assert_loaded(r)
            assert r["streamed"] == r["bytes_read"]
            assert all(s.startswith("stream:a") or s.startswith("buffer") for s in r["sources"].values())


def test_a_head_the_checkpoint_lacks_and_a_rank_that_leaves_a_tensor_on_meta(models, tmp_path):
    folder = models / "llama"
    cases = [case("new-head", "llama", folder, "fsdp", extra_head=True),
             case("new-head-zeros", "llama", folder, "fsdp", extra_head=True, init_missing="zeros"),
             case("left-on-meta", "llama", folder, "fsdp", leave_on_meta_rank=1)]
    results = torchrun(2, cases, tmp_path)
    for rank in results:
        refused = rank["new-head"]
        assert refused["error"] == "MetaTensorError", refused
        # The head both ranks lack is said once, naming both (was: every line once per rank, and 4 tensors).
        assert refused["message"] == (
            "materialize refused, before anything was allocated or read: 2 tensors without a source or a place on "
            "ranks 0, 1 (2 ranks):\n"
            "  ranks 0, 1: value_head.weight: it is not in the checkpoint\n"
            "  ranks 0, 1: value_head.bias: it is not in the checkpoint\n"
            "  ranks 0, 1: fix: initialize what the checkpoint lacks explicitly with init_missing=\"zeros\" or "
            "\"normal:STD\", or load a checkpoint that has it"), refused["message"]
        assert {(f[0], f[1]) for f in refused["findings"]} == {
            ("value_head.weight", 0), ("value_head.bias", 0), ("value_head.weight", 1), ("value_head.bias", 1)}
        assert "Cannot copy out of meta tensor" not in refused["message"]
        assert rank["new-head-zeros"]["value_head_zero"] is True
        assert rank["new-head-zeros"]["sources"]["value_head.weight"] == "init:zeros"
        left = rank["left-on-meta"]
        assert left["verify"] == "raised"
        assert left["findings"] == [["model.layers.0.mlp.up_proj.weight", 1, "parameter still on meta"]]
        assert "rank 1: model.layers.0.mlp.up_proj.weight: parameter still on meta" in left["message"]
