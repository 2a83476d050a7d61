"""Read once per node, once per cluster (issue 38, item 3): ranks of a node whose daemon has the
model registered from `s3://` get every byte through that daemon, never from the bucket, and
the bucket serves the checkpoint's bytes once, however many ranks and replicas load it.

The real S3 server (moto, s3_server.py) sits behind the fault proxy, which counts the object
bytes it passes (s3_fault_proxy.py): the daemons' bucket. The ranks are handed credentials
too, and an endpoint of their own — a second proxy in front of the same server — so that a
rank that read the bucket itself would succeed and be counted there: it must count nothing.
"""
import pytest

from checkpoints import checkpoint_bytes, llama_like_config, llama_like_tensors, save_sharded, tensor_sha256
from conftest import metactl
from ranks import run_ranks
from s3_fault_proxy import s3_fault_proxy  # noqa: F401 (a fixture)
from s3_server import s3_server  # noqa: F401 (a fixture: moto on loopback)

SHAPE = {"hidden": 128, "intermediate": 352, "vocab": 1024}  # ~2 MB in 3 files: bytes to count
HEADS = {"heads": 8, "kv_heads": 2}


@pytest.fixture
def bucket(tmp_path, s3_server, s3_fault_proxy):
    """The checkpoint on disk (the oracle) and in s3://models/tiny; the daemons' proxy and the
    ranks' proxy, both in front of the server; the environment of each."""
    tensors = llama_like_tensors(kv=2 * SHAPE["hidden"] // HEADS["heads"], **SHAPE)
    folder = save_sharded(tensors, tmp_path / "tiny", shards=3, config=llama_like_config(**SHAPE, **HEADS))
    s3_server.create_bucket("models")
    url = s3_server.upload_folder(folder, "models", "tiny")
    server_address = s3_server.endpoint.removeprefix("http://")
    daemons_proxy = s3_fault_proxy(server_address, name="daemons")
    ranks_proxy = s3_fault_proxy(server_address, name="ranks")
    return {"tensors": tensors, "folder": folder, "url": url, "proxy": daemons_proxy, "ranks_proxy": ranks_proxy,
            "daemon_env": s3_server.env(AWS_ENDPOINT_URL=daemons_proxy.endpoint),
            "rank_env": s3_server.env(AWS_ENDPOINT_URL=ranks_proxy.endpoint)}


def register(daemon, b):
    metactl("register", "tiny", "--checkpoint", b["url"], "--daemon", daemon.address, check=0)
    b["proxy"].reset_stats()  # what registration read (headers, digests) is not the load's
    b["ranks_proxy"].reset_stats()


def check_bit_exact(results, tensors):
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\n{out}\n{err}"
        for t in report["tensors"]:
            if t["source"].startswith("buffer:"):  # computed (rotary inv_freq), not read
                continue
            assert t["filled"], (rank, t)
            src = tensors[t["name"]]
            s = t.get("slice")
            part = src if s is None else src.narrow(s["dim"], s["start"], s["length"])
            assert t["sha256"] == tensor_sha256(part), f"rank {rank}: {t['name']} {s} differs from the source"


def bucket_ratio(b):
    served = b["proxy"].stats()["body_bytes"]
    ratio = served / checkpoint_bytes(b["folder"])
    print(f"bucket bytes {served:,} / checkpoint bytes {checkpoint_bytes(b['folder']):,} = {ratio:.3f}")
    return ratio


def test_four_ranks_of_one_node_read_the_bucket_once_through_their_daemon(tmp_path, daemons, bucket):
    a = daemons("a", ["s3://models"], gpus=4, env=bucket["daemon_env"])
    register(a, bucket)
    env = {rank: bucket["rank_env"] for rank in range(4)}
    results = run_ranks(tmp_path, "tiny", [a] * 4, extra=["--strategy", "tp", "--tp", "4"], env_of_rank=env)
    check_bit_exact(results, bucket["tensors"])
    for rank, (_, _, _, report) in enumerate(results):
        sources = {t["source"] for t in report["tensors"] if not t["source"].startswith(("fanout:", "buffer:"))}
        assert sources == {"stream:a"}, f"rank {rank} read from {sources}"
    assert bucket["ranks_proxy"].stats()["requests"] == 0, "a rank read the bucket itself"
    assert bucket_ratio(bucket) <= 1.05


def test_four_replicas_on_one_node_read_the_bucket_once_and_fan_out_to_their_node_mates(tmp_path, daemons,
                                                                                          bucket):
    """On files, a node's replicas each read a piece from the page cache its reader filled; a
    daemon keeps no cache of a bucket, so node-mates receive it over Gloo instead."""
    a = daemons("a", ["s3://models"], gpus=4, env=bucket["daemon_env"])
    register(a, bucket)
    env = {rank: bucket["rank_env"] for rank in range(4)}
    results = run_ranks(tmp_path, "tiny", [a] * 4, extra=["--strategy", "replicate"], env_of_rank=env)
    check_bit_exact(results, bucket["tensors"])
    total = checkpoint_bytes(bucket["folder"])
    assert sum(report["bytes_read"] for _, _, _, report in results) == total
    for rank, (_, _, _, report) in enumerate(results):
        assert report["bytes_read"] + report["fanout_received_bytes"] == total, rank
    assert bucket["ranks_proxy"].stats()["requests"] == 0, "a rank read the bucket itself"
    assert bucket_ratio(bucket) <= 1.05


def test_source_direct_still_has_every_rank_read_the_bucket_itself(tmp_path, daemons, bucket):
    a = daemons("a", ["s3://models"], gpus=4, env=bucket["daemon_env"])
    register(a, bucket)
    env = {rank: bucket["rank_env"] for rank in range(4)}
    results = run_ranks(tmp_path, "tiny", [a] * 4, extra=["--strategy", "tp", "--tp", "4", "--source", "direct"],
                        env_of_rank=env)
    check_bit_exact(results, bucket["tensors"])
    assert bucket["proxy"].stats()["body_bytes"] == 0, "the daemon streamed nothing"
    read = sum(report["bytes_read"] for _, _, _, report in results)
    assert bucket["ranks_proxy"].stats()["body_bytes"] >= read


def test_two_nodes_replicating_read_the_bucket_once_for_the_cluster(tmp_path, daemons, bucket):
    a = daemons("a", ["s3://models"], gpus=2, env=bucket["daemon_env"])
    b = daemons("b", ["s3://models"], gpus=2, coordinator=a.address, env=bucket["daemon_env"])
    register(a, bucket)
    env = {rank: bucket["rank_env"] for rank in range(4)}
    results = run_ranks(tmp_path, "tiny", [a, a, b, b], extra=["--strategy", "replicate"], env_of_rank=env)
    check_bit_exact(results, bucket["tensors"])
    for rank, (_, _, _, report) in enumerate(results):
        assert len(report["tensors"]) >= len(bucket["tensors"]), f"rank {rank} holds a whole replica"
    assert bucket["ranks_proxy"].stats()["requests"] == 0, "a rank read the bucket itself"
    assert bucket_ratio(bucket) <= 1.05


def test_the_daemon_streams_ranges_and_never_holds_an_object(tmp_path, daemons, s3_server, s3_fault_proxy):
    """A 48 MiB tensor streamed to a rank through the daemon (3 streams of 16 MiB): the daemon's
    peak resident memory grows by far less than the object — chunks of 1 MiB, two per stream,
    and parts of 2 MiB fetched ahead within a 4 MiB budget plus the part each stream waits for
    (docs/object-storage.md "Read once per node") — the bucket sees GETs of whole parts, and
    serves the tensor's bytes once."""
    import torch
    from safetensors.torch import save_file

    from conftest import SANITIZED, proc_status

    tensor = torch.randint(0, 255, (48 << 20,), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    folder = tmp_path / "big"
    folder.mkdir()
    save_file({"big.weight": tensor}, str(folder / "model.safetensors"))
    s3_server.create_bucket("models")
    url = s3_server.upload_folder(folder, "models", "big")
    proxy = s3_fault_proxy(s3_server.endpoint.removeprefix("http://"))
    a = daemons("a", ["s3://models"], env=s3_server.env(AWS_ENDPOINT_URL=proxy.endpoint,
                                                        METALOAD_S3_PART_SIZE="2MiB", METALOAD_S3_READ_AHEAD="4MiB"))
    metactl("register", "big", "--checkpoint", url, "--no-digest", "--daemon", a.address, check=0)
    proxy.reset_stats()
    before = proc_status(a.proc.pid)["VmHWM"]
    rc, out, err, report = run_ranks(tmp_path, "big", [a])[0]
    assert rc == 0, f"{out}\n{err}"
    assert report["tensors"][0]["sha256"] == tensor_sha256(tensor)
    grown = proc_status(a.proc.pid)["VmHWM"] - before
    print(f"daemon peak RSS grew {grown / 2**20:.1f} MiB streaming a 48 MiB object")
    if not SANITIZED:
        assert grown < 24 << 20, f"the daemon's peak grew {grown / 2**20:.1f} MiB for a 48 MiB object"
    assert proxy.stats()["body_bytes"] <= 1.05 * tensor.numel()
    # Whole parts, not the streams' 1 MiB chunks: the rank's 3 pieces of 16 MiB, each 8 GETs of
    # 2 MiB ("" counts the HEADs).
    ranges = proxy.stats()["by_key"]["/models/big/model.safetensors"]["ranges"]
    sizes = [int(r.split("-")[1]) - int(r.split("=")[1].split("-")[0]) + 1 for r in ranges if r]
    print(f"{len(sizes)} ranged GETs of {set(sizes)} bytes")
    assert sizes == [2 << 20] * 24, sorted(ranges)
