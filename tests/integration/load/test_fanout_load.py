"""Read once, fan out, in `metactl load` (issue 22): where the plan gives several ranks the same
bytes (`replicate`, tp groups repeated across replicas, norms every rank of a tp group holds),
each byte leaves storage once and the other holders receive it over Gloo. Real metad and real
rank processes: every tensor's bytes equal the file's, the ranks together read exactly the
checkpoint's tensor bytes, and what was sent was received. A reader killed mid-way (SIGKILL
after its first fan-out chunks, METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS) leaves its group to
read the rest from storage, bit-exact, and exit 3 (verification names the rank that is gone).
"""
import pytest

from checkpoints import llama_like_config, llama_like_tensors, save_sharded, tensor_sha256
from conftest import metactl
from ranks import run_ranks


@pytest.fixture
def node_a(tmp_path, daemons):
    root = tmp_path / "storage"
    tensors = llama_like_tensors(layers=2)
    ckpt = save_sharded(tensors, root / "tiny", shards=2, config=llama_like_config(layers=2))
    a = daemons("a", [root], gpus=4)
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    return a, tensors


def checkpoint_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors.values())


def start_ranks(tmp_path, daemon, world, extra, env_of_rank=None, timeout_s=60):
    return run_ranks(tmp_path, "tiny", [daemon] * world, extra=extra, load_timeout=timeout_s, env_of_rank=env_of_rank)


def check_bytes(report, tensors):
    """Every tensor of a rank's report holds the file's bytes (its slice of them)."""
    for t in report["tensors"]:
        if t["source"].startswith("buffer:"):
            continue
        src = tensors[t["name"]]
        s = t.get("slice")
        part = src if s is None else src.narrow(s["dim"], s["start"], s["length"])
        assert t["filled"], (report["rank"], t)
        assert t["sha256"] == tensor_sha256(part), f"rank {report['rank']}: {t['name']} differs from the file"


def check_read_once(results, tensors):
    reports = [r for _, _, _, r in results]
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\n{out}\n{err}"
        check_bytes(report, tensors)
        assert report["fanout_notes"] == [], report["fanout_notes"]
    # Each stored byte left storage once, and everything sent arrived.
    assert sum(r["bytes_read"] for r in reports) == checkpoint_bytes(tensors)
    assert sum(r["fanout_sent_bytes"] for r in reports) == sum(r["fanout_received_bytes"] for r in reports) > 0
    for r in reports:
        fanned = {t["source"] for t in r["tensors"] if t["source"].startswith("fanout:")}
        assert fanned, f"rank {r['rank']} received nothing"
        assert f"fanout:rank {r['rank']}" not in fanned, "a rank never receives from itself"
    return reports


def test_replicate_reads_every_byte_once(tmp_path, node_a):
    a, tensors = node_a
    results = start_ranks(tmp_path, a, 4, ["--strategy", "replicate"])
    reports = check_read_once(results, tensors)
    # Every rank holds everything: it received what the other three read.
    for r in reports:
        assert r["bytes_read"] + r["fanout_received_bytes"] == checkpoint_bytes(tensors), r["rank"]
    assert all("verified (gloo): 0 tensors on meta or unfilled across 4 ranks" in out for _, out, _, _ in results)
    # Without fan-out every rank reads all of it.
    alone = start_ranks(tmp_path, a, 4, ["--strategy", "replicate", "--no-fan-out"])
    for rc, out, err, report in alone:
        assert rc == 0, err
        check_bytes(report, tensors)
        assert report["bytes_read"] == checkpoint_bytes(tensors)
        assert report["fanout_received_bytes"] == report["fanout_sent_bytes"] == 0


def test_tp_with_two_replicas_reads_every_byte_once(tmp_path, node_a):
    a, tensors = node_a
    # tp 2 x pp 1 x 2 replicas, in 1 KiB chunks so that pieces take several collectives.
    results = start_ranks(tmp_path, a, 4, ["--strategy", "tp", "--tp", "2", "--pp", "1"],
                          env_of_rank={r: {"METALOAD_FANOUT_TEST_CHUNK_BYTES": "1024"} for r in range(4)})
    reports = check_read_once(results, tensors)
    # A slice of rank 0 comes from rank 2 (its replica) or is read by rank 0; never from rank 1 or 3
    # unless every rank holds it whole (the norms).
    for r in reports:
        for t in r["tensors"]:
            if t["source"].startswith("fanout:rank ") and "slice" in t:
                sender = int(t["source"].split()[-1])
                assert sender % 2 == r["rank"] % 2, (r["rank"], t["name"], t["source"])


def test_a_reader_killed_mid_way_leaves_its_group_to_read_from_storage(tmp_path, node_a):
    a, tensors = node_a
    kill = {"METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS": "3", "METALOAD_FANOUT_TEST_CHUNK_BYTES": "1024"}
    env = {r: {"METALOAD_FANOUT_TEST_CHUNK_BYTES": "1024"} for r in range(4)}
    env[1] = kill
    results = start_ranks(tmp_path, a, 4, ["--strategy", "replicate"], env_of_rank=env, timeout_s=8)
    rc1, out1, err1, _ = results[1]
    assert rc1 == -9, f"rank 1 should have been killed by its hook: {rc1}\n{err1}"
    for rank in (0, 2, 3):
        rc, out, err, report = results[rank]
        assert rc == 3, f"rank {rank}: {rc}\n{out}\n{err}"
        # Rank 0 hosts the store and names rank 1 exactly; the others may lose the store first.
        assert ("rank 1 never joined" if rank == 0 else "never joined") in err, err
        check_bytes(report, tensors)  # bit-exact, everything filled
        assert any("read from storage instead" in n for n in report["fanout_notes"]), report["fanout_notes"]
        # What rank 1 should have sent was read from storage: nothing is left unfilled.
        assert report["bytes_read"] + report["fanout_received_bytes"] == checkpoint_bytes(tensors), rank
