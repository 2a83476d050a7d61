"""Tile digests at registration (`metactl register`, docs/integrity.md): real daemons, real ranks.

- The registering daemon reads every tensor once and records its tile digest, by default; every
  rank adds the terms of the tiles it holds, whatever slice, and verification sums them: the
  verdict says "verified" and "content proven" only when every stored tensor is checked, tp
  and fsdp slices included, read directly or streamed.
- A shard whose bytes were changed with its size and mtime restored passes the size-and-mtime
  check of ranks, and the header check of a daemon that did not register it, but not the
  digests: the load fails (exit 3) on every rank, naming the tensor, also when ranks hold only
  slices of it (what the old whole-tensor digests never checked). (The daemon that registered
  it refuses to stream it at all: its ctime changed, test_swapped_files.py.)
- --no-digest: "loaded, not verified ... read without a digest"; --require-proof exits 3 on it.
- Strong digests, refresh, and a coordinator restarted from its state_dir keep the digests.
"""
import os

import pytest

from checkpoints import header_offsets, llama_like_config, llama_like_tensors, save_sharded
from conftest import free_port, metactl, wait_for
from sharded import checkpoint, shard_paths  # noqa: F401 (checkpoint is a fixture)
from ranks import check_reports, run_ranks


def register(daemon, ckpt, *flags):
    return metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", daemon.address, *flags, check=0)


def verdict(out):
    [line] = [line for line in out.splitlines() if "verified (" in line]
    return line


def proven(rank, world, stored, kind="fast"):
    return (f"rank {rank} verified (gloo): 0 tensors on meta or unfilled across {world} ranks; content proven: "
            f"{stored} stored tensors checked against their registered {kind} digests")


def flip_a_byte_keeping_size_and_mtime(ckpt, shard_index=1):
    """Changes one byte in the middle of the first tensor of a shard; its size and mtime stay."""
    shard = shard_paths(ckpt)[shard_index]
    name, (begin, end) = sorted(header_offsets(shard).items())[0]
    before = shard.stat()
    raw = bytearray(shard.read_bytes())
    raw[(begin + end) // 2] ^= 0x5A
    shard.write_bytes(raw)
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert shard.stat().st_size == before.st_size and shard.stat().st_mtime_ns == before.st_mtime_ns
    return name


@pytest.mark.parametrize("source", ["direct", "stream"])
def test_a_registered_digest_proves_every_tensor_bit_exact(tmp_path, daemons, checkpoint, source):
    a = daemons("a", [checkpoint["root"]])
    registered = register(a, checkpoint["ckpt"])  # digests by default
    assert registered.stdout.rstrip().endswith("; digests of every tensor recorded"), registered.stdout
    count = len(checkpoint["tensors"])
    assert f"RegisterModel tiny: fast digests of {count} tensors, " in a.logs()

    results = run_ranks(tmp_path, "tiny", [a], extra=["--source", source])
    check_reports(results, checkpoint["tensors"])
    [(rc, out, err, report)] = results
    assert verdict(out) == proven(0, 1, count)
    assert report["has_digests"] is True
    for t in report["tensors"]:
        assert t["proof"]["digest"] == "fast" and t["proof"]["tiles_hashed"] == t["proof"]["tiles"], t
        assert t["proof"]["tiles_cut"] == 0, t


@pytest.mark.parametrize("strategy", [["--strategy", "tp", "--tp", "2"], ["--strategy", "fsdp"]])
def test_sliced_tensors_are_checked_by_the_sum_of_every_ranks_tiles(tmp_path, daemons, strategy):
    root = tmp_path / "storage"
    tensors = llama_like_tensors()
    ckpt = save_sharded(tensors, root / "llama-tiny", shards=3, config=llama_like_config())
    a = daemons("a", [root], gpus=2)
    register(a, ckpt)
    results = run_ranks(tmp_path, "tiny", [a, a], extra=strategy)
    sliced = 0
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\n{out}\n{err}"
        for t in report["tensors"]:
            if t["source"].startswith("buffer:") or t["source"] == "tied":
                assert "proof" not in t, t
                continue
            part = "slice" in t and t["slice"]["length"] != t["full_shape"][t["slice"]["dim"]]
            sliced += part
            assert t["proof"]["tiles_cut"] == 0, (rank, t)
            if part:  # a part of the tensor's tiles, all of them whole
                assert 0 < t["proof"]["tiles_hashed"] < t["proof"]["tiles"], (rank, t)
    assert sliced > 0, "tp and fsdp slice tensors"
    for rank, (rc, out, err, report) in enumerate(results):
        assert verdict(out).startswith(proven(rank, 2, len(tensors))), verdict(out)


@pytest.mark.parametrize("source", ["direct", "stream"])
def test_bytes_changed_under_a_restored_size_and_mtime_fail_on_every_rank_even_in_slices(
        tmp_path, daemons, checkpoint, source):
    a = daemons("a", [checkpoint["root"]], gpus=2)
    # Streamed by node b's daemon, which did not register the files: it serves them as their
    # headers say, which the change kept.
    b = daemons("b", [checkpoint["root"]], gpus=2, coordinator=a.address) if source == "stream" else a
    wait_for(lambda: b.name + " " in metactl("status", "--daemon", a.address).stdout, what="node b to join")
    register(a, checkpoint["ckpt"])
    name = flip_a_byte_keeping_size_and_mtime(checkpoint["ckpt"])
    # fsdp: each rank holds half of every tensor's rows; only one of them holds the changed byte.
    results = run_ranks(tmp_path, "tiny", [b, b], extra=["--source", source, "--strategy", "fsdp"])
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 3, f"rank {rank} exited {rc}\n{out}\n{err}"
        assert ("verification failed (gloo): 1 tensor whose bytes differ from the digests registered for them, "
                "held by ranks 0, 1 (2 ranks)") in err, err
        # Both hold a part of it and say the same: one line, naming both.
        assert f"  ranks 0, 1: {name}: bytes differ from the digest registered for it (fast 0x" in err, err
        assert all(t["filled"] for t in report["tensors"]), "the reads succeeded; the proof failed"


def test_without_digests_the_verdict_says_what_was_not_proven_and_require_proof_fails(
        tmp_path, daemons, checkpoint):
    a = daemons("a", [checkpoint["root"]])
    count = len(checkpoint["tensors"])
    plain = register(a, checkpoint["ckpt"], "--no-digest")
    assert "digests" not in plain.stdout
    [(rc, out, err, report)] = run_ranks(tmp_path, "tiny", [a])
    assert rc == 0, err
    assert verdict(out) == (f"rank 0 loaded, not verified (gloo): 0 tensors on meta or unfilled across 1 ranks; "
                            f"content not proven for every tensor: {count} read without a digest (register the "
                            "model with digests to check them)")
    assert report["has_digests"] is False
    assert {t["proof"]["digest"] for t in report["tensors"]} == {"none"}
    [(rc, out, err, report)] = run_ranks(tmp_path, "tiny", [a], extra=["--require-proof"])
    assert rc == 3, (out, err)
    assert err.startswith("metactl load: rank 0 loaded, not verified (gloo)") and "(--require-proof)" in err, err

    # Adding digests to the same registration needs no --replace; --refresh keeps them.
    register(a, checkpoint["ckpt"])
    refreshed = metactl("register", "tiny", "--refresh", "--daemon", a.address, check=0)
    assert refreshed.stdout.rstrip().endswith("; digests of every tensor recorded"), refreshed.stdout
    [(rc, out, err, report)] = run_ranks(tmp_path, "tiny", [a], extra=["--require-proof"])
    assert rc == 0, err
    assert verdict(out) == proven(0, 1, count)

    # Registering it again with --no-digest drops them; --refresh keeps that choice too.
    register(a, checkpoint["ckpt"], "--no-digest")
    metactl("register", "tiny", "--refresh", "--daemon", a.address, check=0)
    [(rc, out, err, report)] = run_ranks(tmp_path, "tiny", [a])
    assert rc == 0, err
    assert "read without a digest" in verdict(out)


def test_strong_digests_prove_slices_too(tmp_path, daemons):
    root = tmp_path / "storage"
    tensors = llama_like_tensors()
    ckpt = save_sharded(tensors, root / "llama-tiny", shards=3, config=llama_like_config())
    a = daemons("a", [root], gpus=2)
    register(a, ckpt, "--digest-kind", "strong")
    assert f"RegisterModel tiny: strong digests of {len(tensors)} tensors" in a.logs()
    results = run_ranks(tmp_path, "tiny", [a, a], extra=["--strategy", "fsdp"])
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\n{out}\n{err}"
        assert verdict(out).startswith(proven(rank, 2, len(tensors), "strong")), verdict(out)


def test_register_refuses_flags_that_contradict_each_other(daemons, checkpoint):
    a = daemons("a", [checkpoint["root"]])
    both = metactl("register", "tiny", "--checkpoint", checkpoint["ckpt"], "--daemon", a.address, "--no-digest",
                   "--digest-kind", "strong", check=2)
    assert both.stderr.strip() == "metactl register: --no-digest records no digest: drop --digest and --digest-kind"
    kind = metactl("register", "tiny", "--checkpoint", checkpoint["ckpt"], "--daemon", a.address,
                   "--digest-kind", "xxh3", check=2)
    assert "digest kind \"xxh3\": fast (XXH3 tiles: catches corruption) or strong" in kind.stderr, kind.stderr


def test_digests_survive_a_restart_of_a_coordinator_with_a_state_dir(tmp_path, daemons, checkpoint):
    d = daemons("a", [checkpoint["root"]], port=free_port(), extra=[f"state_dir: {tmp_path / 'state'}"])
    register(d, checkpoint["ckpt"])
    d.kill9()
    d.restart()
    assert "registry: restored 1 models" in d.logs()
    [(rc, out, err, report)] = run_ranks(tmp_path, "tiny", [d])
    assert rc == 0, err
    assert verdict(out) == proven(0, 1, len(checkpoint["tensors"]))
