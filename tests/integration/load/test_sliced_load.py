"""Tensor-parallel, FSDP and replicated loads with real daemons and ranks: every rank reads
only its slices, and the bytes of every slice equal the same slice of the source tensor as
the `safetensors` library reads it — for the direct and the stream source.

One coordinator (node a, 4 GPU slots) holds the checkpoint, with a config.json: 8 attention
heads and 2 key/value heads of 8 dims, so tp splits whole heads, and at tp 4 each key/value
head is held by the two ranks that share it. `--source stream` makes ranks stream through the
daemon even though they could read the files: the daemon then gathers strided
(row-parallel) slices on its side.
"""
import collections
import json

import pytest
import torch

from checkpoints import llama_like_config, llama_like_tensors, save_sharded, tensor_sha256
from conftest import metactl
from ranks import run_ranks


@pytest.fixture
def node_a(tmp_path, daemons):
    root = tmp_path / "storage"
    tensors = llama_like_tensors()
    ckpt = save_sharded(tensors, root / "llama-tiny", shards=3, config=llama_like_config())
    a = daemons("a", [root], gpus=4)
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    return a, tensors


def bytes_served(daemon):
    return int(json.loads(metactl("status", "--daemon", daemon.address, "--format", "json", check=0).stdout)
               ["bytes_served"])


def held_slice(src, entry):
    s = entry.get("slice")
    return src if s is None else src.narrow(s["dim"], s["start"], s["length"])


def dtensor_local(src, chunks, rank, dim=0):
    """Rank `rank`'s local tensor under DTensor's Shard(dim): torch.chunk's piece, or an empty
    one past the end (torch.chunk gives fewer pieces than asked when they run out)."""
    pieces = src.chunk(chunks, dim)
    return pieces[rank] if rank < len(pieces) else src.narrow(dim, src.shape[dim], 0)


def assert_bytes_are_torch_chunks(by_rank, tensors, name, chunks, dim=0):
    """The bytes each rank received of `name` are torch.chunk's piece for it: an oracle
    independent of the plan's own slices."""
    for rank in range(chunks):
        want = dtensor_local(tensors[name], chunks, rank, dim)
        got = by_rank[rank][name]
        assert got["shape"] == list(want.shape), f"rank {rank}: {name} {got['shape']}, torch.chunk {list(want.shape)}"
        assert got["sha256"] == tensor_sha256(want), f"rank {rank}: {name} differs from torch.chunk's piece"


def check_slices(results, tensors, groups, dtype=None):
    """Every rank's slices equal the source's; inside each group of `groups` (lists of ranks)
    every tensor is either held whole by every rank or tiled by their slices, each piece held
    by the same number of ranks (one, or the ranks sharing a replicated key/value head).
    Computed buffers (rotary inv_freq) are checked elsewhere (test_buffers.py)."""
    by_rank = {}
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\n{out}\n{err}"
        expected_read = 0
        report["tensors"] = [t for t in report["tensors"] if not t["source"].startswith("buffer:")]
        for t in report["tensors"]:
            src = tensors[t["name"]]
            part = held_slice(src, t)
            if "slice" in t:
                assert t["full_shape"] == list(src.shape), t["name"]
            if t.get("source") != "tied" and not t["source"].startswith("fanout:"):
                expected_read += part.numel() * part.element_size()
            if dtype is not None and src.dtype != dtype and src.is_floating_point():
                part = part.to(dtype)
            assert t["shape"] == list(part.shape), t["name"]
            assert t["sha256"] == tensor_sha256(part), (
                f"rank {rank}: bytes of {t['name']} slice {t.get('slice')} differ from the source's")
        # Only its own slices' bytes were read (in the stored dtype), nothing more; what another
        # rank of its group read and sent (fan-out, test_fanout_load.py) not at all.
        assert report["bytes_read"] == expected_read, f"rank {rank} read {report['bytes_read']}, not {expected_read}"
        by_rank[rank] = {t["name"]: t for t in report["tensors"]}
    for group in groups:
        for name, src in tensors.items():
            entries = [by_rank[r].get(name) for r in group]
            held = [e for e in entries if e is not None]
            assert held, f"{name} is held by no rank of group {group}"
            if all("slice" not in e for e in held):
                assert len(held) == len(group), f"{name}: whole on some ranks of {group} only"
                continue
            dims = {e["slice"]["dim"] for e in held}
            assert len(dims) == 1, f"{name} split on several dims in group {group}"
            dim = dims.pop()
            # Ranks past the end of an uneven split hold an empty slice at the end, as in DTensor.
            assert len(held) == len(group), f"{name}: held by {len(held)} of the ranks of {group}"
            empty = [e["slice"] for e in held if e["slice"]["length"] == 0]
            assert all(cut["start"] == src.shape[dim] for cut in empty), f"{name}: empty slices {empty}"
            holders = collections.Counter((e["slice"]["start"], e["slice"]["length"]) for e in held
                                          if e["slice"]["length"] > 0)
            assert len(set(holders.values())) == 1, f"{name}: pieces held by uneven numbers of ranks: {holders}"
            spans = sorted(holders)
            at = 0
            for start, length in spans:
                assert start == at, f"{name}: gap or overlap at {at} in group {group}: {spans}"
                at += length
            assert at == src.shape[dim], f"{name}: slices cover {at} of {src.shape[dim]}"
    return by_rank


@pytest.mark.parametrize("source", ["direct", "stream"])
@pytest.mark.parametrize("tp", [2, 4])
def test_tensor_parallel_ranks_hold_exactly_their_slices(tmp_path, node_a, source, tp):
    a, tensors = node_a
    served_before = bytes_served(a)
    results = run_ranks(tmp_path, "tiny", [a] * tp, extra=["--strategy", "tp", "--tp", str(tp), "--source", source])
    by_rank = check_slices(results, tensors, [list(range(tp))])
    # Streamed: the daemon sent exactly the slices' bytes; direct: nothing.
    streamed = sum(r[3]["bytes_read"] for r in results) if source == "stream" else 0
    assert bytes_served(a) - served_before == streamed
    # Column-parallel q_proj splits dim 0, row-parallel o_proj dim 1 (strided: gathered by
    # the daemon when streamed), the vocab dim 0, norms stay whole.
    hidden = tensors["model.layers.0.self_attn.o_proj.weight"].shape[0]
    for rank in range(tp):
        held = by_rank[rank]
        assert held["model.layers.0.self_attn.q_proj.weight"]["slice"] == {
            "dim": 0, "start": rank * hidden // tp, "length": hidden // tp}
        assert held["model.layers.0.self_attn.o_proj.weight"]["slice"] == {
            "dim": 1, "start": rank * hidden // tp, "length": hidden // tp}
        assert held["lm_head.weight"]["slice"]["dim"] == 0
        assert "slice" not in held["model.norm.weight"]
        # 2 key/value heads of 8 rows: one each at tp 2; at tp 4 ranks 0-1 share head 0 and
        # 2-3 head 1, whole (issue 9: tp 4 gave each rank half a head).
        kv_head = rank if tp == 2 else rank // 2
        for proj in ("k_proj", "v_proj"):
            assert held[f"model.layers.0.self_attn.{proj}.weight"]["slice"] == {"dim": 0, "start": 8 * kv_head,
                                                                                 "length": 8}, (rank, proj)
        want = "direct" if source == "direct" else "stream:a"
        assert {t["source"] for t in held.values() if not t["source"].startswith("fanout:")} <= {want}
    for rc, out, err, report in results:
        assert f"verified (gloo): 0 tensors on meta or unfilled across {tp} ranks" in out


@pytest.mark.parametrize("source", ["direct", "stream"])
def test_fsdp_four_ranks_hold_dim0_chunks(tmp_path, node_a, source):
    a, tensors = node_a
    results = run_ranks(tmp_path, "tiny", [a] * 4, extra=["--strategy", "fsdp", "--source", source])
    by_rank = check_slices(results, tensors, [[0, 1, 2, 3]])
    # 176 rows of gate_proj over 4 ranks: 44 each, FSDP2's Shard(0).
    for rank in range(4):
        assert by_rank[rank]["model.layers.0.mlp.gate_proj.weight"]["slice"] == {
            "dim": 0, "start": 44 * rank, "length": 44}


def test_tp_with_pipeline_stages_and_replicas(tmp_path, node_a):
    # tp 2 x pp 1 x 2 data-parallel replicas: ranks 0-1 and 2-3 each hold the whole model
    # in two halves, the replicas the same slices.
    a, tensors = node_a
    results = run_ranks(tmp_path, "tiny", [a] * 4, extra=["--strategy", "tp", "--tp", "2", "--pp", "1"])
    by_rank = check_slices(results, tensors, [[0, 1], [2, 3]])
    assert by_rank[0].keys() == by_rank[2].keys()
    assert all(by_rank[0][n].get("slice") == by_rank[2][n].get("slice") for n in by_rank[0])


def test_replicate_every_rank_holds_everything(tmp_path, node_a):
    a, tensors = node_a
    results = run_ranks(tmp_path, "tiny", [a] * 2, extra=["--strategy", "replicate", "--source", "stream"])
    check_slices(results, tensors, [[0], [1]])


@pytest.mark.parametrize("source", ["direct", "stream"])
def test_dtype_converts_on_load(tmp_path, node_a, source):
    a, tensors = node_a
    results = run_ranks(tmp_path, "tiny", [a] * 2,
                        extra=["--strategy", "tp", "--tp", "2", "--dtype", "fp32", "--source", source])
    by_rank = check_slices(results, tensors, [[0, 1]], dtype=torch.float32)
    q = by_rank[0]["model.layers.0.self_attn.q_proj.weight"]
    assert q["dtype"] == "F32"
    assert q["source"].endswith(">F32")
    plan = metactl("plan", "tiny", "--daemon", a.address, "--gpus", "2", "--strategy", "tp", "--tp", "2",
                   "--dtype", "fp32", "--format", "json", check=0).stdout
    assert '"to_dtype": "F32"' in plan


def test_tp_heads_that_do_not_divide_are_refused_naming_the_tensor(tmp_path, node_a):
    a, _ = node_a
    # Three ranks of a 4-slot node: tp 3 divides the world and splits the 320-row vocabulary
    # unevenly, but not the 8 attention heads: a rank holds whole heads or nothing.
    proc = metactl("load", "tiny", "--daemon", a.address, "--world", "3", "--strategy", "tp", "--tp", "3",
                   check=2)
    assert ("tensor model.layers.0.self_attn.q_proj.weight [64, 64]: its 8 attention heads do not divide by "
            "--tp 3 (each rank of a tensor-parallel group holds whole heads)") in proc.stderr


@pytest.mark.parametrize("source", ["direct", "stream"])
def test_tp_splits_what_does_not_divide_like_torch_chunk(tmp_path, daemons, source):
    # 6 heads and 3 key/value heads of 8 divide by tp 3; the 320-row vocabulary and the 176-row
    # MLP do not: torch.chunk's pieces, as DTensor's Shard(0) holds them (107, 107, 106 and 59, 59, 58).
    config = llama_like_config(hidden=48, heads=6, kv_heads=3)
    tensors = llama_like_tensors(hidden=48, kv=24)
    ckpt = save_sharded(tensors, tmp_path / "storage" / "uneven", shards=2, config=config)
    a = daemons("a", [tmp_path / "storage"], gpus=4)
    metactl("register", "uneven", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    results = run_ranks(tmp_path, "uneven", [a] * 3, extra=["--strategy", "tp", "--tp", "3", "--source", source])
    by_rank = check_slices(results, tensors, [[0, 1, 2]])
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert [by_rank[r][name]["slice"] for r in range(3)] == [
            {"dim": 0, "start": 0, "length": 107}, {"dim": 0, "start": 107, "length": 107},
            {"dim": 0, "start": 214, "length": 106}], name
    assert [by_rank[r]["model.layers.0.mlp.down_proj.weight"]["slice"]["length"] for r in range(3)] == [59, 59, 58]
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.layers.0.mlp.up_proj.weight"):
        assert_bytes_are_torch_chunks(by_rank, tensors, name, 3)
    assert_bytes_are_torch_chunks(by_rank, tensors, "model.layers.0.mlp.down_proj.weight", 3, dim=1)
    for rc, out, err, report in results:
        assert "verified (gloo): 0 tensors on meta or unfilled across 3 ranks" in out


@pytest.mark.parametrize("source", ["direct", "stream"])
def test_fsdp_rank_past_the_end_of_a_short_dim_holds_an_empty_slice(tmp_path, daemons, source):
    # A vocabulary of 3 rows over 4 ranks: 1, 1, 1 and an empty [0, 64] on rank 3, as FSDP2's
    # Shard(0) gives every rank a local tensor; rank 3 reads nothing of it and still verifies.
    tensors = llama_like_tensors(layers=1, vocab=3)
    ckpt = save_sharded(tensors, tmp_path / "storage" / "short", shards=2)
    a = daemons("a", [tmp_path / "storage"], gpus=4)
    metactl("register", "short", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    results = run_ranks(tmp_path, "short", [a] * 4, extra=["--strategy", "fsdp", "--source", source])
    by_rank = check_slices(results, tensors, [[0, 1, 2, 3]])
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert [by_rank[r][name]["slice"]["length"] for r in range(4)] == [1, 1, 1, 0], name
        assert by_rank[3][name]["slice"] == {"dim": 0, "start": 3, "length": 0}
        assert by_rank[3][name]["shape"] == [0, 64]
        assert_bytes_are_torch_chunks(by_rank, tensors, name, 4)
    for rc, out, err, report in results:
        assert "verified (gloo): 0 tensors on meta or unfilled across 4 ranks" in out


def test_huge_pages_give_the_same_bytes(tmp_path, node_a):
    # --huge-pages only advises the kernel about the rank's tensor memory; bytes are unchanged.
    a, tensors = node_a
    results = run_ranks(tmp_path, "tiny", [a] * 2,
                        extra=["--strategy", "tp", "--tp", "2", "--source", "direct", "--huge-pages"])
    check_slices(results, tensors, [[0, 1]])
