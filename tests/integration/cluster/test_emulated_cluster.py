"""The benchmark's emulated cluster (bench/cluster/): throttlefs serves the backing files' exact
bytes, read-only, at one mount per host with no page cache shared between mounts (a host keeps
its own across opens, as NFS does, until the benchmark drops it), every mount drawing on one
shared bandwidth; an EmulatedCluster gives each host its own
address and its own view of STORAGE and LOCAL, and leaves nothing behind; net_copy copies a
checkpoint to every other host byte for byte. Needs root (as CI runs), /dev/fuse and libfuse3."""
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

from conftest import BUILD_DIR, SOURCE_DIR

THROTTLEFS = BUILD_DIR / "tests" / "throttlefs"
sys.path[:0] = [str(SOURCE_DIR / "bench"), str(SOURCE_DIR / "bench" / "cluster")]
from hosts import EmulatedCluster, check_can_emulate, drop_cache  # noqa: E402
from processes import Reaper  # noqa: E402


@pytest.fixture
def backing(tmp_path):
    back = tmp_path / "back"
    (back / "ckpt").mkdir(parents=True)
    data = os.urandom(8 << 20)
    (back / "ckpt" / "a.bin").write_bytes(data)
    (back / "ckpt" / "b.json").write_text('{"x": 1}')
    return back, data


def test_this_machine_can_run_it():
    # Not a skip: CI runs as root with /dev/fuse, and the benchmark needs all of it.
    assert check_can_emulate(THROTTLEFS) is None


def test_throttlefs_serves_exact_bytes_read_only_cached_per_host_at_one_shared_bandwidth(tmp_path, backing):
    back, data = backing
    mounts = [tmp_path / "m0", tmp_path / "m1"]
    for m in mounts:
        m.mkdir()
    fs = subprocess.Popen([str(THROTTLEFS), "--backing", str(back), "--bandwidth-mb-per-s", "40", "--latency-us",
                           "0", *map(str, mounts)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert fs.stdout.readline().strip() == "ready"

        def stats():
            return json.loads((mounts[0] / ".throttlefs-stats").read_text())

        assert stats()["bytes"] == 0
        assert (mounts[1] / "ckpt" / "a.bin").read_bytes() == data  # through mmap-capable buffered reads
        assert stats()["mounts"][1]["bytes"] == len(data) and stats()["mounts"][0]["bytes"] == 0
        # A second open on that host reads from its cache (a daemon that opens a file per request
        # must not re-read what it prefetched); another host has a cache of its own.
        assert (mounts[1] / "ckpt" / "a.bin").read_bytes() == data
        assert stats()["bytes"] == len(data)
        assert (mounts[0] / "ckpt" / "a.bin").read_bytes() == data
        assert stats()["bytes"] == 2 * len(data)
        drop_cache(mounts[1])  # what the benchmark does before every run
        assert (mounts[1] / "ckpt" / "a.bin").read_bytes() == data
        assert stats()["bytes"] == 3 * len(data)
        assert sorted(p.name for p in (mounts[0] / "ckpt").iterdir()) == ["a.bin", "b.json"]
        with pytest.raises(OSError) as e:
            (mounts[0] / "ckpt" / "new").write_text("x")
        assert e.value.errno == 30  # EROFS
        with pytest.raises(OSError):
            open(mounts[0] / "ckpt" / "a.bin", "r+b")

        # Both mounts at once share 40 MB/s: 2 x 8 MiB cannot arrive in under 0.42 s (a lower
        # bound, which a loaded machine only makes longer), while either alone would take 0.21 s.
        for m in mounts:
            drop_cache(m)
        started = time.monotonic()
        readers = [threading.Thread(target=lambda m=m: (m / "ckpt" / "a.bin").read_bytes()) for m in mounts]
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        assert time.monotonic() - started >= 2 * len(data) / 40e6 * 0.98
        assert stats()["bytes"] == 5 * len(data)
    finally:
        fs.terminate()
        assert fs.wait(timeout=20) == 0
    mounted = pathlib.Path("/proc/mounts").read_text()
    assert not any(str(m) in mounted for m in mounts)


@pytest.mark.parametrize("argv, message", [
    (["--backing", "/nonexistent-folder", "/tmp/m"], "--backing /nonexistent-folder is not a folder"),
    (["--backing", "/tmp", "--latency-us", "-5", "/tmp/m"], "--latency-us wants a whole number from 0"),
    (["--backing", "/tmp", "--bandwidth-mb-per-s", "0", "/tmp/m"], "--bandwidth-mb-per-s wants a whole number from 1"),
    (["--backing", "/tmp", "--bandwidth-mb-per-s", "18446744073709551616", "/tmp/m"], "wants a whole number"),
    (["--backing", "/tmp", "--read-ahead-kib", "1x", "/tmp/m"], "--read-ahead-kib wants a whole number"),
    (["--backing", "/tmp"], "give at least one MOUNT"),
    (["--bogus"], "unknown or incomplete flag --bogus"),
])
def test_throttlefs_refuses_bad_flags(argv, message):
    r = subprocess.run([str(THROTTLEFS), *argv], capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def host_run(cluster, host, script):
    return subprocess.run([*cluster.prefix(host), "sh", "-c", script], capture_output=True, text=True, timeout=60)


def test_hosts_have_their_own_address_storage_and_disk_and_nothing_is_left(tmp_path, backing):
    back, data = backing
    reaper = Reaper()
    try:
        with EmulatedCluster(tmp_path / "c", THROTTLEFS, back, 3, lambda i: i != 2, reaper,
                             bandwidth_mb_per_s=1000, latency_us=100, link_gbit=1.0) as cluster:
            names = list(cluster.netns) + [cluster.bridge]
            for host in range(3):
                r = host_run(cluster, host, f"ip -4 -o addr show eth0; ls {cluster.storage}/ckpt; "
                                            f"echo {host} > {cluster.local}/mine; ls {cluster.local}")
                assert f"inet {cluster.addresses[host]}/24" in r.stdout
                assert ("a.bin" in r.stdout) == (host != 2), r  # host 2 cannot see the storage
                assert r.stdout.strip().endswith("mine")
            assert [(d / "mine").read_text() for d in cluster.disks] == ["0\n", "1\n", "2\n"]
            assert not (cluster.local / "mine").exists()  # only inside the hosts' mount namespaces
            # Host 1 reaches host 0 over the bridge, through its shaped link.
            server = subprocess.Popen([*cluster.prefix(0), sys.executable, "-c",
                                       "import socket; s = socket.create_server(('0.0.0.0', 47001)); "
                                       "c, _ = s.accept(); c.sendall(b'hello from 0')"])
            r = host_run(cluster, 1, f"{sys.executable} -c \"import socket, time\n"
                                     f"for _ in range(100):\n"
                                     f"    try: c = socket.create_connection(('{cluster.addresses[0]}', 47001)); break\n"
                                     f"    except OSError: time.sleep(0.05)\n"
                                     f"print(c.recv(100).decode())\"")
            assert r.stdout.strip() == "hello from 0", r
            assert server.wait(timeout=20) == 0
            # net_copy: host 0 copies the checkpoint to its disk and host 1's and 2's.
            copy = tmp_path / "copy.log"
            with open(copy, "w") as log:
                sender = subprocess.Popen([*cluster.prefix(0), sys.executable, SOURCE_DIR / "bench" / "cluster" /
                                           "net_copy.py", "send", cluster.storage / "ckpt", cluster.local / "ckpt",
                                           "47002", "2"], stdout=log)
                receivers = [subprocess.Popen([*cluster.prefix(h), sys.executable, SOURCE_DIR / "bench" / "cluster" /
                                               "net_copy.py", "receive", cluster.addresses[0], "47002",
                                               cluster.local / "ckpt"]) for h in (1, 2)]
                assert [p.wait(timeout=60) for p in (sender, *receivers)] == [0, 0, 0]
            summary = json.loads(copy.read_text().splitlines()[-1])
            assert summary["bytes"] == len(data) + len('{"x": 1}') and summary["receivers"] == 2
            for disk in cluster.disks:
                assert (disk / "ckpt" / "a.bin").read_bytes() == data
                assert (disk / "ckpt" / "b.json").read_text() == '{"x": 1}'
            assert cluster.storage_stats()["bytes"] == summary["bytes"]  # storage read once
    finally:
        reaper.stop_all()
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not any(n in left or n in links for n in names)
    assert "throttlefs" not in pathlib.Path("/proc/mounts").read_text()


def test_ranks_read_only_their_own_bytes_from_network_storage(tmp_path, daemons):
    """Two fsdp ranks each need half the rows of every tensor. On network storage the kernel's
    sequential read-ahead would also fetch the other rank's rows (4 MiB past each read here, as
    an NFS client reads ahead): 1.28 times the checkpoint in the benchmark's hosts regime before
    metaload told the kernel its reads are not sequential (also where it reads headers: the
    daemon's header read left read-ahead markers that the rank's reads then set off, 4 MB more
    once the storage kept a host's cache across opens). Storage must serve the ranks' own
    bytes, plus the file headers. Rank 1 reads through a mount of its own (another host: no
    page cache shared with rank 0), bound over rank 0's path in its own mount namespace."""
    import torch
    from checkpoints import save_sharded
    from ranks import check_reports, run_ranks

    back = tmp_path / "back"
    # 24 tensors of 512 KiB: each rank's half of one is followed by the other rank's half.
    tensors = {f"layer.{i}.weight": torch.randn(512, 256, dtype=torch.float32) for i in range(24)}
    save_sharded(tensors, back / "m", shards=2)
    mount, other = tmp_path / "mnt", tmp_path / "mnt1"
    mount.mkdir()
    other.mkdir()
    fs = subprocess.Popen([str(THROTTLEFS), "--backing", str(back), "--latency-us", "0", str(mount), str(other)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert fs.stdout.readline().strip() == "ready"
        a = daemons("a", [mount], gpus=2)
        metactl_path = BUILD_DIR / "client" / "metactl"
        subprocess.run([str(metactl_path), "register", "m", "--checkpoint", str(mount / "m"), "--daemon", a.address],
                       check=True, capture_output=True, timeout=120)
        served = json.loads((mount / ".throttlefs-stats").read_text())["bytes"]
        host1 = ["unshare", "-m", "--propagation", "private", "sh", "-c", f'mount --bind {other} {mount} && exec "$@"',
                 "sh"]
        results = run_ranks(tmp_path, "m", [a, a], extra=("--strategy", "fsdp", "--source", "direct"),
                            prefixes={1: host1})
        for rc, out, err, report in results:
            assert rc == 0, err
        read = sum(report["bytes_read"] for _, _, _, report in results)
        tensor_bytes = sum(t.numel() * 4 for t in tensors.values())
        assert read == tensor_bytes  # each rank read its half, once
        headers = sum(8 + int.from_bytes(f.read_bytes()[:8], "little") for f in (back / "m").glob("*.safetensors"))
        stats = json.loads((mount / ".throttlefs-stats").read_text())
        assert stats["mounts"][1]["bytes"] > 0  # rank 1 did read through its own mount
        storage = stats["bytes"] - served
        # Page granularity: each of the 48 pieces (24 tensors x 2 ranks) may start and end inside a
        # page another piece shares (0.39 MB at most; the read-ahead added 4.8 MB).
        assert storage <= read + 2 * headers + 48 * 2 * 4096, (storage, read, headers, stats)
    finally:
        fs.terminate()
        assert fs.wait(timeout=20) == 0
