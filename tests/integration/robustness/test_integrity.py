"""End-to-end integrity (docs/integrity.md): real daemons, real ranks.

- Every streamed chunk carries a CRC-32C; a daemon told to corrupt chunks after computing it
  (metad_faulty, the test binary, with METALOAD_TEST_CORRUPT_CHUNKS) makes a streamed load fail,
  naming the tensor, the file, the bytes and the server.
- A server that sends zeros with checksums that match (metad_faulty, METALOAD_TEST_SERVE_ZEROS:
  a hostile member) passes every chunk check; the registered digests catch it, naming every
  tensor on the rank, whether the model has fast or strong digests.
- Each checkpoint file's size and mtime are recorded at registration; a file rewritten in place
  afterwards is refused by the direct reader and by the streaming daemon alike, until
  `metactl register --refresh NAME`, after which the load is bit-exact again.
"""
import os
import re

import pytest

from conftest import metactl
from ranks import check_reports, run_ranks
from sharded import checkpoint, shard_paths  # noqa: F401 (checkpoint is a fixture)


def failed_stream_load(tmp_path, daemons, checkpoint, env, read_threads=2):
    """Starts daemon a (metad_faulty) with the faults of `env`, registers the checkpoint, streams it
    to one rank, which must fail verification (exit 3); returns (daemon, stderr, report)."""
    a = daemons("a", [checkpoint["root"]], env=env, faulty=True)
    metactl("register", "tiny", "--checkpoint", checkpoint["ckpt"], "--daemon", a.address, check=0)
    [(rc, out, err, report)] = run_ranks(tmp_path, "tiny", [a],
                                        extra=["--source", "stream", "--read-threads", str(read_threads)])
    assert rc == 3, f"exited {rc}\n{out}\n{err}"
    assert report is not None and report["tensors"], err
    return a, err, report


def test_every_corrupted_chunk_fails_a_streamed_load_naming_tensor_file_and_server(tmp_path, daemons, checkpoint):
    a, err, report = failed_stream_load(tmp_path, daemons, checkpoint, {"METALOAD_TEST_CORRUPT_CHUNKS": "all"})
    assert "TEST FAULT INJECTION IS ON: METALOAD_TEST_CORRUPT_CHUNKS=all" in a.logs()
    unfilled = [t for t in report["tensors"] if not t["filled"]]
    assert len(unfilled) == len(checkpoint["tensors"]), "every streamed tensor must fail"
    shards = {str(p) for p in shard_paths(checkpoint["ckpt"])}
    for t in unfilled:
        assert "checksum mismatch in " in t["error"], t
        assert any(f"checksum mismatch in {s} at bytes [" in t["error"] for s in shards), t
        assert f") from {a.address} (CRC-32C 0x" in t["error"], t
    # The verdict names a tensor and the reason on stderr, and no byte counts as read.
    assert f"verification failed (gloo): {len(unfilled)} tensors on meta or unfilled on rank 0" in err, err
    named = [t for t in unfilled if f"rank 0: {t['name']}: not filled: {t['error']}" in err]
    assert len(named) >= 10, err  # the verdict lists the first findings, each with its reason
    assert report["bytes_read"] == 0, report["bytes_read"]


def test_one_corrupted_chunk_is_retried_once_and_the_load_ends_bit_exact_even_from_the_only_server(
        tmp_path, daemons, checkpoint):
    # A DATA_LOSS piece is read once more, from the next source; with one server, from it again.
    a = daemons("a", [checkpoint["root"]], env={"METALOAD_TEST_CORRUPT_CHUNKS": "1"}, faulty=True)
    metactl("register", "tiny", "--checkpoint", checkpoint["ckpt"], "--daemon", a.address, check=0)
    results = run_ranks(tmp_path, "tiny", [a], extra=["--source", "stream", "--read-threads", "1"])
    check_reports(results, checkpoint["tensors"])
    [(_, _, _, report)] = results
    [line] = report["failovers"]
    assert re.match(r"\S+: from server a at byte 0: checksum mismatch in \S+ at bytes \[\d+, \d+\) from "
                    + re.escape(a.address) + r" \(CRC-32C 0x[0-9a-f]+ sent, 0x[0-9a-f]+ received\) -> server a$",
                    line), line


@pytest.mark.parametrize("kind", ["fast", "strong"])
def test_a_server_sending_zeros_with_matching_checksums_is_caught_by_the_digests(tmp_path, daemons, checkpoint, kind):
    a = daemons("a", [checkpoint["root"]], env={"METALOAD_TEST_SERVE_ZEROS": "1"}, faulty=True)
    metactl("register", "tiny", "--checkpoint", checkpoint["ckpt"], "--daemon", a.address, "--digest-kind", kind,
            check=0)
    [(rc, out, err, report)] = run_ranks(tmp_path, "tiny", [a], extra=["--source", "stream"])
    assert "TEST FAULT INJECTION IS ON: METALOAD_TEST_SERVE_ZEROS=1" in a.logs()
    assert rc == 3, f"exited {rc}\n{out}\n{err}"
    # Every chunk passed its CRC-32C: every tensor is filled, with zeros.
    assert all(t["filled"] for t in report["tensors"]) and report["failovers"] == [], report
    count = len(checkpoint["tensors"])
    assert (f"verification failed (gloo): {count} tensors whose bytes differ from the digests registered for them, "
            "held by rank 0 (1 ranks)") in err, err
    for name in checkpoint["tensors"]:
        assert f"rank 0: {name}: bytes differ from the digest registered for it ({kind} " in err, err


def test_chunks_without_checksums_are_refused_as_from_an_older_daemon(tmp_path, daemons, checkpoint):
    # METALOAD_TEST_NO_CHECKSUM=1 makes metad_faulty send what a daemon older than checksums sends;
    # the rank (whose library has no such switch) refuses it.
    a, _, report = failed_stream_load(tmp_path, daemons, checkpoint, {"METALOAD_TEST_NO_CHECKSUM": "1"})
    assert "TEST MODE IS ON: METALOAD_TEST_NO_CHECKSUM=1" in a.logs()
    assert all(not t["filled"] for t in report["tensors"]), report["tensors"]
    for t in report["tensors"]:
        assert f"from {a.address} carries no checksum: that daemon is older than this client" in t["error"], t


def test_uncorrupted_streams_load_bit_exact(tmp_path, daemons, checkpoint):
    a = daemons("a", [checkpoint["root"]])
    assert "TEST FAULT INJECTION" not in a.logs()
    metactl("register", "tiny", "--checkpoint", checkpoint["ckpt"], "--daemon", a.address, check=0)
    results = run_ranks(tmp_path, "tiny", [a], extra=["--source", "stream"])
    check_reports(results, checkpoint["tensors"])


@pytest.mark.parametrize("source", ["direct", "stream"])
def test_a_shard_rewritten_in_place_is_refused_until_register_refresh(tmp_path, daemons, checkpoint, source):
    a = daemons("a", [checkpoint["root"]])
    metactl("register", "tiny", "--checkpoint", checkpoint["ckpt"], "--daemon", a.address, check=0)
    shard = shard_paths(checkpoint["ckpt"])[1]
    registered_ns = shard.stat().st_mtime_ns
    # Rewritten in place with the same bytes (same size), one second later: only the mtime tells.
    shard.write_bytes(shard.read_bytes())
    os.utime(shard, ns=(registered_ns + 1_000_000_000, registered_ns + 1_000_000_000))

    [(rc, out, err, report)] = run_ranks(tmp_path, "tiny", [a], extra=["--source", source])
    assert rc == 3, f"exited {rc}\n{out}\n{err}"
    unfilled = [t for t in report["tensors"] if not t["filled"]]
    assert unfilled, "the tensors of the rewritten shard must fail"
    size = shard.stat().st_size
    for t in unfilled:
        assert f"{shard} changed since it was registered: mtime " in t["error"], t
        assert f"(size {size} bytes, as registered); run `metactl register --refresh tiny`" in t["error"], t
    # Only the rewritten shard's tensors failed; the other shards' loaded.
    assert any(t["filled"] for t in report["tensors"])

    refreshed = metactl("register", "tiny", "--refresh", "--daemon", a.address, check=0)
    assert refreshed.stdout.startswith("refreshed tiny: "), refreshed.stdout
    results = run_ranks(tmp_path, "tiny", [a], extra=["--source", source])
    check_reports(results, checkpoint["tensors"])


def test_register_refresh_takes_no_checkpoint_and_needs_a_registered_name(daemons, checkpoint):
    a = daemons("a", [checkpoint["root"]])
    bad = metactl("register", "tiny", "--refresh", "--checkpoint", checkpoint["ckpt"], "--daemon", a.address, check=2)
    assert ("--refresh keeps the checkpoint, skeleton, policy, strictness and digests tiny was registered with: "
            "drop --checkpoint") in bad.stderr
    unknown = metactl("register", "nope", "--refresh", "--daemon", a.address)
    assert unknown.returncode == 2, unknown.stderr
    assert "nope" in unknown.stderr, unknown.stderr


def two_servers(daemons, checkpoint, env_a, env_b):
    """Daemons a (coordinator) and b serving the same checkpoint folder, the model registered; each
    is metad_faulty when its `env` arms a fault."""
    a = daemons("a", [checkpoint["root"]], env=env_a, faulty=bool(env_a))
    b = daemons("b", [checkpoint["root"]], coordinator=a.address, env=env_b, faulty=bool(env_b))
    from conftest import wait_for
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address).stdout, what="b to join")
    metactl("register", "tiny", "--checkpoint", checkpoint["ckpt"], "--daemon", a.address, check=0)
    return a, b


def test_a_corrupted_chunk_is_retried_from_the_other_server_and_ends_bit_exact(tmp_path, daemons, checkpoint):
    a, b = two_servers(daemons, checkpoint, {"METALOAD_TEST_CORRUPT_CHUNKS": "1"}, {})
    results = run_ranks(tmp_path, "tiny", [a], extra=["--source", "stream", "--read-threads", "1"])
    check_reports(results, checkpoint["tensors"])
    [(_, out, _, report)] = results
    moved = [t for t in report["tensors"] if t.get("failovers")]
    assert len(moved) == 1, report["failovers"]
    [event] = moved[0]["failovers"]
    assert (event["from"], event["to"]) == ("a", "b"), event
    assert "checksum mismatch in " in event["error"] and f"from {a.address} (CRC-32C 0x" in event["error"], event
    assert "rank 0: 1 item failed over from a to b" in out, out


def test_with_every_source_corrupting_every_rank_fails_naming_the_tensors(tmp_path, daemons, checkpoint):
    a, b = two_servers(daemons, checkpoint, {"METALOAD_TEST_CORRUPT_CHUNKS": "all"},
                       {"METALOAD_TEST_CORRUPT_CHUNKS": "all"})
    results = run_ranks(tmp_path, "tiny", [a, b], extra=["--source", "stream"])
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 3, f"rank {rank} exited {rc}\n{out}\n{err}"
        unfilled = [t for t in report["tensors"] if not t["filled"]]
        assert unfilled and len(unfilled) == len(report["tensors"]), report["tensors"]
        for t in unfilled:
            assert "checksum mismatch in " in t["error"], t
            assert f"from {a.address}" in t["error"] and f"from {b.address}" in t["error"], \
                f"every server's error must be named: {t['error']}"
        # Each rank's verdict names tensors that failed, on this rank and the other.
        assert "verification failed (gloo):" in err, err
        assert re.search(r"rank 0: \S+: not filled: ", err) and re.search(r"rank 1: \S+: not filled: ", err), err
