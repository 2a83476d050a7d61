""""Verified" is a proof of content (docs/integrity.md): the Python package as users run it.

transformers builds and save_pretrained()s a tiny Llama (sharded). A copy is registered with a
real metad (digests by default) and one byte of model.layers.0.mlp.down_proj.weight is then
flipped, its size and mtime restored: every check of a rank passes, and the header check of a
daemon that did not register it (node b's, which streams it), only the digests can tell. (The
daemon that registered it refuses to stream the file at all, its ctime changed:
test_swapped_files.py.)
torchrun starts 4 CPU ranks on Gloo that load it as FSDP2 shards (each rank holds a quarter of
every weight's rows, which the old whole-tensor digests never checked):
- from_pretrained (distributed_config fsdp 4), materialize (read directly and streamed) and
  StorageReader under dcp.load all fail on every rank naming the tensor; the same loads of the
  clean copy say "verified ... content proven" on every rank.
- a folder with `metactl digest`'s manifest is proven the same way; a stale manifest is not used
  (a warning says why) and the load is "not verified".
- verify() on a model metaload never filled fails naming it (to_empty, and after a dcp.load
  that raised before reading), where it used to count its garbage as verified; with
  allow_partial_load, the tensor left as it was is named unproven, not verified.
One process: FP8 codes into a bfloat16 module are refused under strict=False too, naming the
scales beside them; gpt-oss under dtype=float16 keeps transformers' float32 norms, bit for bit.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

from checkpoints import header_offsets
from conftest import BUILD_DIR, Daemon, free_port, metactl, wait_for
from pyproc import ok

ENV = {**os.environ, "PYTHONPATH": str(BUILD_DIR / "python"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
VENV_BIN = os.path.dirname(sys.executable)
TARGET = "model.layers.0.mlp.down_proj.weight"

SAVE = """
import sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
torch.manual_seed(0)
config = AutoConfig.for_model("llama", hidden_size=64, intermediate_size=128, num_attention_heads=4,
                              num_key_value_heads=4, vocab_size=256, max_position_embeddings=64, num_hidden_layers=2,
                              tie_word_embeddings=False)
AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(sys.argv[1], max_shard_size="40KB")
"""

RANK = r"""
import json, os, sys, torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.distributed.configuration_utils import DistributedConfig
import metaload

daemon, streamer, clean, bad, folder, stale, out = sys.argv[1:8]
dist.init_process_group("gloo")
rank = dist.get_rank()
config = AutoConfig.from_pretrained(folder)
mesh = init_device_mesh("cpu", (4,))


def sharded(to_empty=False):
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if to_empty:
        model.to_empty(device="cpu")
        model.tie_weights()
    return model


def attempt(run):
    try:
        report = run()
        return {"ok": True, "report": str(report)}
    except BaseException as e:  # dcp's CheckpointException is a BaseException
        inner = e.failures[min(e.failures)][0] if getattr(e, "failures", None) else e
        return {"ok": False, "type": type(inner).__name__, "message": str(inner)}


results = {}
results["materialize-clean"] = attempt(lambda: metaload.materialize(sharded(), clean, daemon=daemon))
results["materialize-direct"] = attempt(lambda: metaload.materialize(sharded(), bad, daemon=daemon, source="direct"))
results["materialize-stream"] = attempt(lambda: metaload.materialize(sharded(), bad, daemon=streamer, source="stream"))
fsdp = DistributedConfig(fsdp_size=4)
results["from-pretrained-clean"] = attempt(
    lambda: metaload.from_pretrained(clean, daemon=daemon, distributed_config=fsdp).metaload_report)
results["from-pretrained"] = attempt(
    lambda: metaload.from_pretrained(bad, daemon=daemon, distributed_config=fsdp).metaload_report)
results["folder-manifest"] = attempt(lambda: metaload.materialize(sharded(), checkpoint=folder))
results["folder-stale-manifest"] = attempt(lambda: metaload.materialize(sharded(), checkpoint=stale))


def dcp_load(name):
    model = sharded(to_empty=True)
    reader = metaload.StorageReader(name, daemon=daemon)
    dcp.load(model.state_dict(), storage_reader=reader, planner=metaload.LoadPlanner())
    return reader.report


results["storage-reader-clean"] = attempt(lambda: dcp_load(clean))
results["storage-reader"] = attempt(lambda: dcp_load(bad))

# verify() on what metaload never filled: a model only to_empty'd, and one whose dcp.load raised
# before reading anything (DCP's own planner refuses the state_dict's extra key).
results["verify-to-empty"] = attempt(lambda: metaload.verify(sharded(to_empty=True)))


def raised_then_verify():
    model = sharded(to_empty=True)
    state = model.state_dict()
    state["model.extra.weight"] = torch.zeros(3)
    try:
        dcp.load(state, storage_reader=metaload.StorageReader(folder), planner=DefaultLoadPlanner())
    except BaseException:
        pass
    return metaload.verify(model)


results["verify-after-raise"] = attempt(raised_then_verify)


def partial():
    model = sharded(to_empty=True)
    state = model.state_dict()
    state["model.extra.weight"] = torch.zeros(4)  # the checkpoint has no such tensor: kept as it is
    reader = metaload.StorageReader(folder)
    dcp.load(state, storage_reader=reader, planner=metaload.LoadPlanner(allow_partial_load=True))
    return reader.report


results["partial-load"] = attempt(partial)
with open(f"{out}/rank{rank}.json", "w") as f:
    json.dump(results, f)
from gloo_exit import leave  # copied beside this script: dcp.load's collectives ran on Python tensors
leave()
"""


def flip_a_byte_of(folder, tensor):
    """Flips one byte in the middle of `tensor` in its shard; the file's size and mtime stay."""
    for shard in sorted(folder.glob("*.safetensors")):
        offsets = header_offsets(shard)
        if tensor in offsets:
            begin, end = offsets[tensor]
            before = shard.stat()
            raw = bytearray(shard.read_bytes())
            raw[(begin + end) // 2] ^= 0x5A
            shard.write_bytes(raw)
            os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
            return
    raise AssertionError(f"{tensor} is in no shard of {folder}")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("proof")
    folder = tmp / "llama"
    proc = subprocess.run([sys.executable, "-c", SAVE, str(folder)], capture_output=True, text=True, timeout=300,
                          env=ENV)
    assert proc.returncode == 0, proc.stderr[-4000:]
    served = tmp / "served"
    for name in ("clean", "bad"):
        shutil.copytree(folder, served / name)
    # A folder with its digests beside it, and one whose manifest a later rewrite made stale.
    metactl("digest", folder, check=0)
    assert (folder / "metaload.digests.json").is_file()
    stale = tmp / "stale"
    shutil.copytree(folder, stale)
    shard = sorted(stale.glob("*.safetensors"))[0]
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    daemon = Daemon(tmp, "a", [served], gpus=4)
    streamer = None
    try:
        streamer = Daemon(tmp, "b", [served], gpus=4, coordinator=daemon.address)
        wait_for(lambda: "b " in metactl("status", "--daemon", daemon.address).stdout, what="node b to join")
        for name in ("clean", "bad"):
            metactl("register", name, "--checkpoint", served / name, "--daemon", daemon.address, check=0)
        flip_a_byte_of(served / "bad", TARGET)
        script = tmp / "rank.py"
        script.write_text(RANK)
        shutil.copyfile(pathlib.Path(__file__).resolve().parents[1] / "gloo_exit.py", tmp / "gloo_exit.py")
        out = tmp / "out"
        out.mkdir()
        cmd = [os.path.join(VENV_BIN, "torchrun"), "--nproc-per-node", "4",
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(script), daemon.address,
               streamer.address, "clean", "bad", str(folder), str(stale), str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=ENV)
    finally:
        assert streamer is None or streamer.stop() == 0
        assert daemon.stop() == 0
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(4)]


def test_clean_loads_say_verified_content_proven_on_every_rank_fsdp_shards_included(ranks):
    for rank, r in enumerate(ranks):
        for case in ("materialize-clean", "from-pretrained-clean", "storage-reader-clean", "folder-manifest"):
            assert r[case]["ok"], (rank, case, r[case])
            report = r[case]["report"]
            assert "verified across all ranks: content proven: 21 stored tensors checked against their registered " \
                   "fast digests" in report, (case, report)
            assert "not verified" not in report, (case, report)


@pytest.mark.parametrize("case", ["materialize-direct", "materialize-stream", "from-pretrained", "storage-reader"])
def test_one_flipped_byte_in_a_sharded_tensor_fails_every_rank_naming_it(ranks, case):
    for rank, r in enumerate(ranks):
        result = r[case]
        assert result["ok"] is False and result["type"] == "MetaTensorError", (rank, result)
        lines = result["message"].splitlines()
        assert lines[0].startswith("verification failed (gloo): 1 tensor whose bytes differ from the digests "
                                   "registered for them, held by ranks 0-3 (4 ranks)"), lines
        # Every FSDP rank holds a quarter of its rows and says the same: one line, naming them all.
        assert any(line.startswith(f"  ranks 0-3: {TARGET}: bytes differ from the digest registered for it "
                                   "(fast 0x") for line in lines), lines


def test_a_stale_manifest_is_not_used_and_the_load_says_not_verified(ranks):
    for r in ranks:
        result = r["folder-stale-manifest"]
        assert result["ok"], result
        assert "loaded, not verified across all ranks: content not proven for every tensor: 21 read without a " \
               "digest" in result["report"], result["report"]


def test_verify_fails_on_what_metaload_never_filled(ranks):
    for rank, r in enumerate(ranks):
        for case in ("verify-to-empty", "verify-after-raise"):
            result = r[case]
            assert result["ok"] is False and result["type"] == "MetaTensorError", (case, result)
            assert ("ranks 0-3: model.embed_tokens.weight: not filled by metaload (its values were never loaded "
                    "or checked by it)") in result["message"], (case, result["message"][:2000])


def test_a_partial_load_names_what_it_left_and_is_not_verified(ranks):
    for r in ranks:
        result = r["partial-load"]
        assert result["ok"], result
        # The folder's manifest proves what was read; the tensor the checkpoint lacks, left as it
        # was, keeps the load from being "verified".
        assert "loaded, not verified across all ranks: content not proven for every tensor: 21 stored tensors " \
               "checked against their registered fast digests; counted on each rank holding one: 4 kept as they were " \
               "(unread: unproven)" in \
               result["report"], result["report"]


def test_fp8_codes_into_a_bfloat16_module_are_refused_under_strict_false(tmp_path):
    out = ok(f"""
        import torch, metaload
        from safetensors.torch import save_file
        from transformers import AutoConfig, AutoModelForCausalLM
        config = AutoConfig.for_model("llama", hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_key_value_heads=4, vocab_size=256, max_position_embeddings=64,
                                      num_hidden_layers=1, tie_word_embeddings=False)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        state = {{k: v.contiguous() for k, v in model.state_dict().items()}}
        # DeepSeek-V3 style: FP8 codes with a weight_scale_inv per 128x128 block beside them.
        state["model.layers.0.mlp.down_proj.weight"] = state["model.layers.0.mlp.down_proj.weight"].to(torch.float8_e4m3fn)
        state["model.layers.0.mlp.down_proj.weight_scale_inv"] = torch.ones(1, 1)
        save_file(state, "{tmp_path}/model.safetensors")
        config.save_pretrained("{tmp_path}")
        for strict in (True, False):
            with torch.device("meta"):
                meta = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
            try:
                metaload.materialize(meta, checkpoint="{tmp_path}", strict=strict)
                print("LOADED", strict)
            except metaload.MetaTensorError as e:
                print("REFUSED", strict, [f.why for f in e.findings if f.tensor.endswith("down_proj.weight")])
    """, timeout=180)
    for strict in ("True", "False"):
        [line] = [line for line in out.splitlines() if line.split()[1:2] == [strict]]
        assert line.startswith(f"REFUSED {strict} ['stored quantized as F8_E4M3 FP8 codes with scales beside it "
                               "(model.layers.0.mlp.down_proj.weight_scale_inv): read as BF16 its codes would not be "
                               "its values, whatever strict says"), line


def test_gpt_oss_in_float16_keeps_transformers_float32_norms_bit_for_bit(tmp_path):
    out = ok(f"""
        import torch, metaload
        from transformers import AutoConfig, AutoModelForCausalLM
        config = AutoConfig.for_model("gpt_oss", hidden_size=64, intermediate_size=64, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=16, vocab_size=256, max_position_embeddings=64,
                                      num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2,
                                      layer_types=["full_attention", "sliding_attention"])
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained("{tmp_path}", max_shard_size="100KB")
        ref = AutoModelForCausalLM.from_pretrained("{tmp_path}", dtype=torch.float16).state_dict()
        got = metaload.from_pretrained("{tmp_path}", dtype=torch.float16).state_dict()
        print("DIFFER", sorted(k for k in ref if ref[k].dtype != got[k].dtype or not torch.equal(ref[k], got[k])))
        print("NORM", got["model.norm.weight"].dtype, got["model.layers.0.self_attn.q_proj.weight"].dtype)
    """, timeout=180)
    assert "DIFFER []" in out, out
    assert "NORM torch.float32 torch.float16" in out, out
