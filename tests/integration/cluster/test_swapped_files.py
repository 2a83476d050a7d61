"""Issue 35 §5: no swap. A file renamed over a registered checkpoint file is not served.

A local user who can write the checkpoint folder renames another file of the same size (another
user's fine-tune with the same header, or any file) over a registered shard and copies the
shard's mtime onto it (os.utime): the size and mtime a daemon compared were the registered ones,
and a ReadRange streamed the other file's bytes, `same_device: true` or not. Now the daemon
that registered the files compares the descriptor it opened with what it recorded (device,
inode, size, mtime, ctime) before a byte is sent; and a verdict on a record it did not build
(a PublishModel, GetLayout) is kept for that very file only, not for whatever has its size
and mtime. Raw requests come from tests/integration/read_range_probe.cc, which writes the
bytes it received, so that "none of the other file's bytes" is checked, not assumed.
"""
import os
import time

import pytest

from checkpoints import header_offsets, llama_like_tensors, save_sharded
from conftest import free_port, metactl, wait_for
from record_forgery import layout_record, probe, publish


def rfc3339(ns):
    """A time as the daemon writes it (util/fs/file_stamp.h FormatMtime)."""
    seconds, fraction = divmod(ns, 10**9)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return text + ("." + f"{fraction:09d}".rstrip("0") if fraction else "") + "Z"


def rename_over(path, other_bytes):
    """Writes `other_bytes` beside `path`, copies its mtime and renames it over `path`: what a
    local user with write access to the folder can do. Returns (stat before, stat after)."""
    before = path.stat()
    assert len(other_bytes) == before.st_size
    other = path.with_name(".other")
    other.write_bytes(other_bytes)
    os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.rename(other, path)
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ino != before.st_ino
    return before, after


def fine_tune_of(path):
    """`path`'s bytes with every tensor byte changed and its header kept: another checkpoint of
    the same model, as another user's fine-tune is."""
    raw = bytearray(path.read_bytes())
    begin = min(b for b, _ in header_offsets(path).values())
    for i in range(begin, len(raw)):
        raw[i] ^= 0x5A
    return bytes(raw)


@pytest.fixture
def cluster(tmp_path, daemons):
    """Coordinator a and agent b over one root (same_device: true), the checkpoint not yet
    registered."""
    root = tmp_path / "storage"
    ckpt = save_sharded(llama_like_tensors(), root / "llama-tiny", shards=2)
    a = daemons("a", [root], extra=["same_device: true"])
    b = daemons("b", [root], coordinator=a.address, extra=["same_device: true"])
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address).stdout, what="node b to join")
    return {"a": a, "b": b, "ckpt": ckpt, "shard": sorted(ckpt.glob("*.safetensors"))[0]}


@pytest.mark.parametrize("registrar", ["a", "b"])
def test_a_file_renamed_over_a_registered_shard_with_its_mtime_copied_is_not_served(tmp_path, cluster, registrar):
    daemon, shard = cluster[registrar], cluster["shard"]
    metactl("register", "tiny", "--checkpoint", cluster["ckpt"], "--daemon", daemon.address, check=0)
    begin, end = sorted(header_offsets(shard).values())[0]
    got = tmp_path / "got"
    registered_bytes = shard.read_bytes()
    assert probe(daemon, "tiny", shard, begin, end - begin, got) == ("OK", str(end - begin))
    assert got.read_bytes() == registered_bytes[begin:end]

    other_bytes = fine_tune_of(shard)
    before, after = rename_over(shard, other_bytes)
    # Before: ("OK", "...") and the other file's bytes.
    assert probe(daemon, "tiny", shard, begin, end - begin, got) == (
        "FAILED_PRECONDITION",
        f"{shard} changed since it was registered: inode {after.st_ino}, registered {before.st_ino}; "
        f"ctime {rfc3339(after.st_ctime_ns)}, registered {rfc3339(before.st_ctime_ns)} "
        f"(size {before.st_size} bytes, as registered; mtime {rfc3339(before.st_mtime_ns)}, as registered); "
        "run `metactl register --refresh tiny`"), daemon.name
    assert got.read_bytes() == b""

    # Registered anew, the file now there is the one served.
    metactl("register", "tiny", "--refresh", "--daemon", daemon.address, check=0)
    assert probe(daemon, "tiny", shard, begin, end - begin, got) == ("OK", str(end - begin))
    assert got.read_bytes() == other_bytes[begin:end]


def test_a_verdict_on_a_published_record_is_not_reused_for_a_file_renamed_over_it(tmp_path, cluster):
    a, b, shard = cluster["a"], cluster["b"], cluster["shard"]
    metactl("register", "tiny", "--checkpoint", cluster["ckpt"], "--daemon", a.address, check=0)
    # A record a and b did not build, naming the shard's first tensor as its header gives it:
    # served, and the verdict kept.
    real = layout_record(a, "tiny")
    name, (begin, end) = min(header_offsets(shard).items(), key=lambda kv: kv[1])
    [first] = [{k: v for k, v in t.items() if k != "digest"} for t in real["tensors"] if t["name"] == name]
    assert publish(a, dict(real, name="copy", tensors=[first]), tmp_path) == ("OK", "")
    got = tmp_path / "got"
    for daemon in (a, b):
        assert probe(daemon, "copy", shard, begin, end - begin, got) == ("OK", str(end - begin)), daemon.name

    # Another user's file of the same size (no safetensors header at all), its mtime the shard's.
    secret = b"another user's private bytes\n"
    other_bytes = (secret * (shard.stat().st_size // len(secret) + 1))[:shard.stat().st_size]
    rename_over(shard, other_bytes)
    for daemon in (a, b):
        # Before: ("OK", "...") from the verdict kept for the shard's size and mtime, and the
        # other file's bytes.
        assert probe(daemon, "copy", shard, begin, end - begin, got) == (
            "PERMISSION_DENIED", f'ReadRange: "{shard}" does not hold what the record of model "copy" says'), daemon.name
        assert got.read_bytes() == b"", daemon.name
    assert "it is not a safetensors file" in a.logs() + b.logs()


def test_a_coordinator_restarted_from_its_state_dir_still_serves_only_the_files_it_registered(tmp_path, daemons):
    root = tmp_path / "storage"
    ckpt = save_sharded(llama_like_tensors(), root / "llama-tiny", shards=2)
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    c = daemons("c", [root], port=free_port(), extra=[f"state_dir: {tmp_path / 'state'}"])
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", c.address, check=0)
    c.kill9()
    c.restart()  # the record read back from state_dir names this node: its stamps are this host's
    begin, end = sorted(header_offsets(shard).values())[0]
    got = tmp_path / "got"
    assert probe(c, "tiny", shard, begin, end - begin, got) == ("OK", str(end - begin))
    before, after = rename_over(shard, fine_tune_of(shard))
    code, message = probe(c, "tiny", shard, begin, end - begin, got)
    assert (code, got.read_bytes()) == ("FAILED_PRECONDITION", b"")
    assert message.startswith(f"{shard} changed since it was registered: inode {after.st_ino}, "
                              f"registered {before.st_ino}; ctime "), message
