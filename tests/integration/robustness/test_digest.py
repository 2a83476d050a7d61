"""Per-tensor digests at registration (`metactl register --digest`, docs/integrity.md, issue 12):
real daemons, real ranks.

- The registering daemon reads every tensor once and records its XXH3-64; ranks that read a
  whole tensor into CPU memory check the bytes they read against it, and the verdict says how
  many tensors were proven so, and how many sliced ones were not checked.
- A shard whose bytes were changed with its size and mtime restored passes the file-stat check
  but not the digests: the load fails (exit 3) on every rank, naming the tensor.
- Without --digest the verdict is exactly as before.
- The digests are part of the persisted record: a coordinator restarted from its state_dir
  still has them.
"""
import os

import pytest

from checkpoints import header_offsets, llama_like_config, llama_like_tensors, save_sharded
from conftest import free_port, metactl
from sharded import checkpoint, shard_paths  # noqa: F401 (checkpoint is a fixture)
from ranks import check_reports, run_ranks


def register(daemon, ckpt, *flags):
    return metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", daemon.address, *flags, check=0)


def verdict(out):
    [line] = [line for line in out.splitlines() if " verified (" in line]
    return line


@pytest.mark.parametrize("source", ["direct", "stream"])
def test_a_registered_digest_proves_every_whole_tensor_bit_exact(tmp_path, daemons, checkpoint, source):
    a = daemons("a", [checkpoint["root"]])
    registered = register(a, checkpoint["ckpt"], "--digest")
    assert registered.stdout.rstrip().endswith("; digests of every tensor recorded"), registered.stdout
    count = len(checkpoint["tensors"])
    assert f"RegisterModel tiny: digests of {count} tensors, " in a.logs()

    results = run_ranks(tmp_path, "tiny", [a], extra=["--source", source])
    check_reports(results, checkpoint["tensors"])
    [(rc, out, err, report)] = results
    assert verdict(out) == (f"rank 0 verified (gloo): 0 tensors on meta or unfilled across 1 ranks; "
                            f"bytes of {count} tensors match the registered digests")
    assert report["registered_digests"] == {"matched": count, "sliced_not_checked": 0, "on_device_not_checked": 0}
    assert {t["registered_digest"] for t in report["tensors"]} == {"matched"}


@pytest.mark.parametrize("source", ["direct", "stream"])
def test_bytes_changed_under_a_restored_size_and_mtime_fail_on_every_rank_naming_the_tensor(
        tmp_path, daemons, checkpoint, source):
    a = daemons("a", [checkpoint["root"]])
    register(a, checkpoint["ckpt"], "--digest")
    shard = shard_paths(checkpoint["ckpt"])[1]
    name, (begin, end) = sorted(header_offsets(shard).items())[0]
    before = shard.stat()
    raw = bytearray(shard.read_bytes())
    raw[(begin + end) // 2] ^= 0x5A
    shard.write_bytes(raw)
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert shard.stat().st_size == before.st_size and shard.stat().st_mtime_ns == before.st_mtime_ns

    results = run_ranks(tmp_path, "tiny", [a, a], extra=["--source", source])
    holder = [rank for rank, (_, _, _, report) in enumerate(results)
              if any(t["name"] == name for t in report["tensors"])]
    assert len(holder) == 1, holder
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 3, f"rank {rank} exited {rc}\n{out}\n{err}"
        assert (f"verification failed (gloo): 1 tensor on meta or unfilled on rank {holder[0]} (2 ranks)"
                in err), err
        assert (f"rank {holder[0]}: {name}: not filled: bytes differ from the digest recorded at "
                f"registration (xxh3 0x") in err, err
        assert f" read) in {shard.name}" in err, err
    [failed] = [t for t in results[holder[0]][3]["tensors"] if not t["filled"]]
    assert failed["name"] == name
    assert failed["error"].startswith("bytes differ from the digest recorded at registration (xxh3 0x"), failed
    assert "recorded, 0x" in failed["error"], failed
    others = [t for rank in range(2) for t in results[rank][3]["tensors"] if t["name"] != name]
    assert others and all(t["filled"] for t in others), "only the changed tensor fails"


@pytest.mark.parametrize("strategy", [["--strategy", "tp", "--tp", "2"], ["--strategy", "fsdp"]])
def test_sliced_tensors_are_counted_as_not_checked(tmp_path, daemons, strategy):
    root = tmp_path / "storage"
    tensors = llama_like_tensors()
    ckpt = save_sharded(tensors, root / "llama-tiny", shards=3, config=llama_like_config())
    a = daemons("a", [root], gpus=2)
    register(a, ckpt, "--digest")
    results = run_ranks(tmp_path, "tiny", [a, a], extra=strategy)
    matched = sliced = 0
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\n{out}\n{err}"
        for t in report["tensors"]:
            if t["source"].startswith("buffer:") or t["source"] == "tied":
                assert "registered_digest" not in t, t
                continue
            part = "slice" in t and t["slice"]["length"] != t["full_shape"][t["slice"]["dim"]]
            expected = "sliced_not_checked" if part else "matched"
            assert t["registered_digest"] == expected, (rank, t)
            matched += expected == "matched"
            sliced += expected == "sliced_not_checked"
        assert report["registered_digests"]["on_device_not_checked"] == 0
    assert sliced > 0, "tp and fsdp slice tensors"
    for rank, (rc, out, err, report) in enumerate(results):
        assert verdict(out) == (f"rank {rank} verified (gloo): 0 tensors on meta or unfilled across 2 ranks; "
                                f"bytes of {matched} tensors match the registered digests "
                                f"({sliced} sliced tensors not checked)")


def test_without_digest_the_verdict_is_unchanged_and_digests_come_and_go_without_replace(
        tmp_path, daemons, checkpoint):
    a = daemons("a", [checkpoint["root"]])
    plain = register(a, checkpoint["ckpt"])
    assert "digests" not in plain.stdout
    [(rc, out, err, report)] = run_ranks(tmp_path, "tiny", [a])
    assert rc == 0, err
    assert verdict(out) == "rank 0 verified (gloo): 0 tensors on meta or unfilled across 1 ranks"
    assert "registered_digests" not in report
    assert all("registered_digest" not in t for t in report["tensors"])

    # Adding digests to the same registration needs no --replace; --refresh keeps them.
    register(a, checkpoint["ckpt"], "--digest")
    refreshed = metactl("register", "tiny", "--refresh", "--daemon", a.address, check=0)
    assert refreshed.stdout.rstrip().endswith("; digests of every tensor recorded"), refreshed.stdout
    [(rc, out, err, report)] = run_ranks(tmp_path, "tiny", [a])
    assert rc == 0, err
    assert verdict(out).endswith(f"; bytes of {len(checkpoint['tensors'])} tensors match the registered digests")

    # Registering it again without --digest drops them: the verdict is the plain one again.
    register(a, checkpoint["ckpt"])
    [(rc, out, err, report)] = run_ranks(tmp_path, "tiny", [a])
    assert rc == 0, err
    assert verdict(out) == "rank 0 verified (gloo): 0 tensors on meta or unfilled across 1 ranks"


def test_digests_survive_a_restart_of_a_coordinator_with_a_state_dir(tmp_path, daemons, checkpoint):
    d = daemons("a", [checkpoint["root"]], port=free_port(), extra=[f"state_dir: {tmp_path / 'state'}"])
    register(d, checkpoint["ckpt"], "--digest")
    d.kill9()
    d.restart()
    assert "registry: restored 1 models" in d.logs()
    [(rc, out, err, report)] = run_ranks(tmp_path, "tiny", [d])
    assert rc == 0, err
    assert verdict(out).endswith(f"; bytes of {len(checkpoint['tensors'])} tensors match the registered digests")
