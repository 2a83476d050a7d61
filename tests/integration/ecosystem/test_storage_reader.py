"""metaload.StorageReader under dcp.load (issue 24), bit for bit against HuggingFaceStorageReader.

transformers builds and save_pretrained()s a tiny Llama (BF16, loaded into a float32 module:
every tensor converted on the way) and a tied Qwen2 (float32, lm_head = embed_tokens), sharded
in small files. torchrun starts CPU ranks on Gloo (tests/integration/ecosystem/dcp_rank.py) that
build each model on meta, parallelize it (FSDP2, tensor parallel, FSDP2 x TP on a 2x2 mesh),
to_empty it, and dcp.load it twice: with torch's HuggingFaceStorageReader and with
metaload.StorageReader (+ metaload.LoadPlanner); every local shard must be torch.equal, dtype
and shape too. The daemon path streams from a real metad to ranks that cannot see the files,
proving every stored tensor, TP slices included, against the digests `metactl register`
recorded (a copy corrupted after registration, streamed by a daemon that did not register it,
fails on every rank, naming the tensor). Refusals name every tensor on every rank; arguments
HuggingFaceStorageReader's users pass are accepted (and the metadata is equal to its own), the
others refused with a message; the torchtitan-style example runs as users run it.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import Daemon, blind_to, free_port, metactl, wait_for
from tiny_models import ENV

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
VENV_BIN = pathlib.Path(sys.executable).parent


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    root = tmp_path_factory.mktemp("dcp")
    common = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)
    for name, config, dtype in (
            # 1002 rows: uneven over 4 ranks, as real vocabularies are.
            ("llama", LlamaConfig(vocab_size=1002, tie_word_embeddings=False, **common), torch.bfloat16),
            ("qwen2", Qwen2Config(vocab_size=998, tie_word_embeddings=True, **common), torch.float32)):
        torch.manual_seed(len(name))
        model = AutoModelForCausalLM.from_config(config).to(dtype)
        model.save_pretrained(root / name, max_shard_size="150KB")
        assert (root / name / "model.safetensors.index.json").exists()
    return root


def torchrun(nproc, cases, tmp_path, prefix=()):
    cases_file, out = tmp_path / f"cases{nproc}.json", tmp_path / f"out{nproc}"
    out.mkdir()
    cases_file.write_text(json.dumps(cases))
    cmd = [*prefix, str(VENV_BIN / "torchrun"), "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), str(HERE / "dcp_rank.py"), str(cases_file), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, f"torchrun exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


def assert_equal_to_hf(r, elements_read_as=None, ties=0):
    """`ties`: tied names over all ranks (each rank holds the tie once)."""
    assert "crash" not in r, r["crash"]
    assert r["mismatches"] == []
    assert r["sharded"] > 0
    # Verified by the planner's exchange, and by metaload.verify(model) afterwards: every
    # state_dict tensor on every rank, a tie once for verify (one tensor under two names; the
    # planner counts both names), the rotary buffers the module computed itself unproven.
    assert r["verified"] > 0 and r["verify_model"] == r["verified"] - ties
    if elements_read_as is not None:
        assert r["direct_bytes"] + r["streamed_bytes"] == r["held_elements"] * elements_read_as


def case(case_id, model, models, mode, **extra):
    return {"id": case_id, "model": model, "folder": str(models / model), "mode": mode, **extra}


def test_fsdp2_and_tp_on_two_ranks_equal_hugging_face_storage_reader(models, tmp_path):
    cases = [case("llama-fsdp", "llama", models, "fsdp"), case("llama-tp", "llama", models, "tp"),
             case("qwen2-fsdp", "qwen2", models, "fsdp"), case("qwen2-tp", "qwen2", models, "tp"),
             # The plain drop-in: DCP's own DefaultLoadPlanner, no metaload planner.
             case("llama-fsdp-default-planner", "llama", models, "fsdp", planner="default"),
             case("missing", "llama", models, "fsdp", failure="missing_key"),
             case("shape", "llama", models, "fsdp", failure="shape"),
             case("unexpected", "llama", models, "fsdp", failure="unexpected"),
             case("on-meta", "llama", models, "fsdp", failure="on_meta")]
    ranks = torchrun(2, cases, tmp_path)
    for rank in ranks:
        for name in ("llama-fsdp", "llama-tp"):
            assert_equal_to_hf(rank[name], elements_read_as=2)  # BF16 stored, each element read once
            assert rank[name]["sources"] == ["direct"]
        assert_equal_to_hf(rank["qwen2-fsdp"], elements_read_as=4, ties=2)
        assert_equal_to_hf(rank["qwen2-tp"], elements_read_as=4, ties=2)
        assert "tied:model.embed_tokens.weight" in rank["qwen2-fsdp"]["sources"]
        dropin = rank["llama-fsdp-default-planner"]
        assert "crash" not in dropin, dropin["crash"]
        assert dropin["mismatches"] == [] and dropin["verified"] is None

        missing = rank["missing"]
        assert (missing["raised"], missing["inner"]) == ("CheckpointException", "MetaTensorError"), missing
        assert "1 tensor without a source or a place:\n  model.extra.weight: the checkpoint has no such tensor " \
               "(allow_partial_load=True keeps it as it is)" in missing["message"]
        assert missing["ranks"] == [0, 1]
        shape = rank["shape"]
        assert shape["inner"] == "MetaTensorError", shape
        assert "model.norm.weight: the checkpoint stores it as [64] bfloat16, the state_dict holds [65]: " \
               "another size of this model?" in shape["message"]
        unexpected = rank["unexpected"]
        assert unexpected["inner"] == "MetaTensorError", unexpected
        assert "model.norm.weight: stored in the checkpoint, and the state_dict has no place for it" \
               in unexpected["message"]
        # Refused before anything was read: what dcp.load was to fill is unfilled for verify too.
        assert unexpected["verify_error"].startswith("verification failed (gloo): ")
        # A meta model's state_dict: DCP allocates fresh tensors in the dict (for
        # load_state_dict(assign=True)), metaload fills them, and the model itself is on meta.
        on_meta = rank["on-meta"]
        assert on_meta["raised"] == "", on_meta
        assert on_meta["verify_error"].startswith("verification failed (gloo): "), on_meta
        assert on_meta["verify_after_assign"] > 0, on_meta
    # Each FSDP2 rank read its own shards, which add up to the checkpoint once.
    stored = sum(rank["llama-fsdp"]["direct_bytes"] for rank in ranks)
    assert stored == sum(rank["llama-fsdp"]["held_elements"] for rank in ranks) * 2


def test_fsdp2_by_tp_on_four_ranks(models, tmp_path):
    cases = [case("llama-2d", "llama", models, "fsdp_tp"), case("qwen2-2d", "qwen2", models, "fsdp_tp")]
    for rank in torchrun(4, cases, tmp_path):
        assert_equal_to_hf(rank["llama-2d"], elements_read_as=2)
        assert_equal_to_hf(rank["qwen2-2d"], elements_read_as=4, ties=4)


def corrupt(folder, name):
    """Flips the first byte of stored tensor `name` in place, keeping the file's size and mtime."""
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    path = folder / index["weight_map"][name]
    raw = path.read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    at = 8 + header_len + json.loads(raw[8:8 + header_len])[name]["data_offsets"][0]
    stat = path.stat()
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes([raw[at] ^ 0xFF]))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_streamed_from_a_daemon_to_ranks_that_cannot_see_the_files(models, tmp_path):
    served = tmp_path / "served"
    for name in ("llama", "llama-bad"):
        shutil.copytree(models / "llama", served / name)
    daemon = Daemon(tmp_path, "a", [served])
    streamer = None
    try:
        # Node b's daemon did not register the copies: it serves them as their headers say, so
        # only the digests tell the corrupted one (a, which registered it, refuses the file: its
        # ctime changed, test_swapped_files.py).
        streamer = Daemon(tmp_path, "b", [served], coordinator=daemon.address)
        wait_for(lambda: "b " in metactl("status", "--daemon", daemon.address).stdout, what="node b to join")
        for name in ("llama", "llama-bad"):
            metactl("register", name, "--checkpoint", served / name, "--daemon", daemon.address, check=0)
        corrupt(served / "llama-bad", "model.norm.weight")  # after registration: its digest no longer matches
        # The oracle reads the folder the test made; the ranks cannot see the daemon's copies.
        cases = [case("stream-fsdp", "llama", models, "fsdp", daemon=daemon.address, source="stream"),
                 case("stream-tp", "llama", models, "tp", daemon=daemon.address, source="auto"),
                 case("corrupt", "llama", models, "tp", daemon=streamer.address, source="stream", failure="read",
                      registered="llama-bad")]
        ranks = torchrun(2, cases, tmp_path, prefix=blind_to(served))
    finally:
        assert streamer is None or streamer.stop() == 0
        assert daemon.stop() == 0
    for rank in ranks:
        for name in ("stream-fsdp", "stream-tp"):
            r = rank[name]
            assert_equal_to_hf(r, elements_read_as=2)
            assert r["direct_bytes"] == 0 and r["streamed_bytes"] > 0
            assert r["sources"] == ["stream:a"]
        # Registered digests: every stored tensor, TP's row and column slices and FSDP's shards
        # included, checked: the sum of both ranks' tiles equals each tensor's digest.
        for name in ("stream-fsdp", "stream-tp"):
            r = rank[name]
            assert r["proven"] is True and r["content"].startswith("content proven: "), r["content"]
            assert r["stored"]["checked"] == 21 and r["stored"]["no_digest"] == r["stored"]["unproven"] == 0, r

        # The final norm (read whole by both TP ranks) differs from its digest: every rank raises
        # the verification's one error naming it on each rank.
        r = rank["corrupt"]
        assert (r["raised"], r["inner"]) == ("CheckpointException", "MetaTensorError"), r
        lines = r["message"].splitlines()
        assert lines[0] == ("verification failed (gloo): 1 tensor whose bytes differ from the digests registered for "
                            "them, held by ranks 0, 1 (2 ranks):"), lines
        # Both ranks hold it and say the same: one line, naming both.
        assert any(line.startswith("  ranks 0, 1: model.norm.weight: bytes differ from the digest registered for "
                                   "it (fast 0x") for line in lines), lines
        assert r["verify_error"] == lines[0], r  # and metaload.verify(model) after says the same


def test_torchtitan_style_example(models, tmp_path):
    # The folder's digests beside it (`metactl digest`): the ranks prove every byte they load.
    folder, logs = tmp_path / "llama", tmp_path / "logs"
    shutil.copytree(models / "llama", folder)
    metactl("digest", folder, check=0)
    # Each rank's output in a file of its own (--redirects): two ranks printing to one pipe interleave.
    cmd = [str(VENV_BIN / "torchrun"), "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), "--log-dir", str(logs), "--redirects", "3",
           str(ROOT / "examples" / "torchtitan_dcp.py"), "--checkpoint", str(folder), "--tp", "1", "--compare"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)
    out = {int(f.parent.name): f.read_text() for f in logs.rglob("stdout.log")}
    assert proc.returncode == 0, f"{out}\n{proc.stderr[-6000:]}"
    assert sorted(out) == [0, 1], sorted(out)
    for r, text in out.items():
        lines = text.splitlines()
        report = next(line for line in lines if line.startswith(f"rank {r}: metaload: rank {r}/2 llama on cpu"))
        assert "verified across all ranks: content proven: 21 stored tensors checked against their registered fast " \
               "digests" in report and "not verified" not in report, report
        verify = next(line for line in lines if line.startswith(f"rank {r}: metaload.verify(model):"))
        assert int(verify.split(":")[-1].split()[0]) > 0, verify
        assert any(line.startswith(f"rank {r}: logits match from_pretrained: True (max abs diff 0)") for line in lines), text


def test_arguments_that_make_no_sense_are_refused(models, monkeypatch):
    import metaload

    monkeypatch.delenv("METAD_ADDRESS", raising=False)
    folder = str(models / "llama")
    refused = {
        "gs://bucket/llama": "gs://bucket/llama: no storage back end for gs:// locations in this build (POSIX paths, "
                             "s3://)",
        "/no/such/folder": "'/no/such/folder': no such folder on this host (a model registered with a daemon is "
                           "named without slashes)",
        "llama-8b": "'llama-8b' is not a folder on this host; to read a model registered with a daemon, pass "
                    "daemon='HOST:PORT' or set METAD_ADDRESS",
    }
    for target, message in refused.items():
        with pytest.raises(metaload.BadInputError) as e:
            metaload.StorageReader(target)
        assert str(e.value) == message
    for kwargs, message in (
            ({"daemon": "127.0.0.1:1"}, f"{folder!r} is a folder, read directly, and daemon='127.0.0.1:1' serves "
                                        "registered models: give the folder or the registered name with daemon="),
            ({"source": "stream"}, f"source='stream' streams from a daemon: register {folder} with one (metactl "
                                   "register) and pass the model's name with daemon="),
            ({"source": "nfs"}, "source 'nfs' is not one of auto, direct, stream"),
            ({"thread_count": 4, "read_threads": 3}, "thread_count=4 and read_threads=3: give one of them"),
            ({"thread_count": 0}, "read_threads 0 is not a positive integer")):
        with pytest.raises(metaload.BadInputError) as e:
            metaload.StorageReader(folder, **kwargs)
        assert str(e.value) == message
    # What HuggingFaceStorageReader's users pass: a path (str or PathLike) and thread_count.
    reader = metaload.StorageReader(models / "llama", thread_count=4)
    assert reader.checkpoint_id == folder
    assert metaload.StorageReader.validate_checkpoint_id(folder)
    assert not metaload.StorageReader.validate_checkpoint_id(str(models))
    metadata = reader.read_metadata()
    from torch.distributed.checkpoint import HuggingFaceStorageReader

    theirs = HuggingFaceStorageReader(folder).read_metadata()
    assert metadata.state_dict_metadata == theirs.state_dict_metadata


def test_a_tie_to_empty_broke_is_refused_with_the_fix(models):
    """One process, no process group: dcp.load runs alone. to_empty allocates a tied head apart
    from the embedding; DefaultLoadPlanner(allow_partial_load=True) would leave it unfilled."""
    import torch
    import torch.distributed.checkpoint as dcp
    from transformers import AutoConfig, AutoModelForCausalLM

    import metaload

    folder = models / "qwen2"
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    model.to_empty(device="cpu")
    with pytest.raises(BaseException) as e:  # dcp's CheckpointException is a BaseException
        dcp.load(model.state_dict(), storage_reader=metaload.StorageReader(folder), planner=metaload.LoadPlanner())
    inner = e.value.failures[0][0]
    assert isinstance(inner, metaload.MetaTensorError), e.value
    assert str(inner).endswith(
        "  lm_head.weight: the checkpoint has no such tensor; it stores one tensor of its shape, "
        "model.embed_tokens.weight: tied to it, and the tie broken? (to_empty allocates tied parameters apart: call "
        "model.tie_weights() after it) (allow_partial_load=True keeps it as it is)")
    model.tie_weights()
    reader = metaload.StorageReader(folder)
    dcp.load(model.state_dict(), storage_reader=reader, planner=metaload.LoadPlanner())
    assert reader.report.sources["lm_head.weight"] == "tied:model.embed_tokens.weight"
    # verify counts the module's distinct tensors: the tie once; its two rotary buffers, which no
    # checkpoint holds and nothing marked (to_empty left them; the example computes them), are
    # unproven, not verified, and say so.
    v = metaload.verify(model)
    assert v == reader.report.verified_tensors - 1, v
    assert v.proven is False and v.content == (
        "content not proven for every tensor: 26 read without a digest (register the model with digests to check "
        "them); counted on each rank holding one: 2 kept as they were (unread: unproven)"), v.content
