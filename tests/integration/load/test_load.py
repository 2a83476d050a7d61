"""End to end: two real metad nodes, real rank processes, bytes compared to the source.

Node "a" (coordinator) can read the checkpoint; node "b" cannot: its ranks run where the
checkpoint folder is hidden (conftest.blind_to), so they stream their shards from a. Every
loaded tensor's sha256 must equal the sha256 the safetensors library computes for it.
"""
import json

import pytest
from safetensors.torch import load_file

from checkpoints import header_offsets, llama_like_tensors, save_sharded, tensor_sha256
from conftest import metactl
from ranks import check_reports, run_ranks


@pytest.fixture
def cluster(tmp_path, daemons):
    """A checkpoint under node a's root; node b has only an empty root of its own."""
    root_a = tmp_path / "storage-a"
    root_b = tmp_path / "storage-b"
    root_b.mkdir()
    tensors = llama_like_tensors()
    ckpt = save_sharded(tensors, root_a / "llama-tiny", shards=3)
    a = daemons("a", [root_a])
    b = daemons("b", [root_b], coordinator=a.address)
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    # b joins asynchronously: wait until the coordinator lists it.
    from conftest import wait_for
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address).stdout, what="node b to join")
    return {"a": a, "b": b, "ckpt": ckpt, "tensors": tensors, "root_a": root_a}


def test_four_ranks_two_nodes_direct_and_stream(tmp_path, cluster):
    a, b = cluster["a"], cluster["b"]
    hidden = cluster["root_a"]
    results = run_ranks(tmp_path, "tiny", [a, a, b, b], blind={2: hidden, 3: hidden})
    check_reports(results, cluster["tensors"])
    for rank, (rc, out, err, report) in enumerate(results):
        sources = {t["source"] for t in report["tensors"]}
        expected = {"direct"} if rank < 2 else {"stream:a"}
        assert sources == expected, f"rank {rank} used {sources}"
        assert "verified (gloo): 0 tensors on meta or unfilled across 4 ranks" in out
        assert report["bytes_read"] == sum(cluster["tensors"][t["name"]].numel() *
                                           cluster["tensors"][t["name"]].element_size() for t in report["tensors"])


def test_auto_reads_directly_whatever_the_server_list_says(tmp_path, cluster):
    # Node b's daemon cannot serve the checkpoint, but its ranks can open the files: --source
    # auto reads them directly (issue 9: it streamed because b was not in the server list).
    a, b = cluster["a"], cluster["b"]
    results = run_ranks(tmp_path, "tiny", [a, a, b, b])
    check_reports(results, cluster["tensors"])
    for rank, (rc, out, err, report) in enumerate(results):
        assert {t["source"] for t in report["tensors"]} == {"direct"}, rank


def test_plan_from_the_daemon_is_the_plan_ranks_load(tmp_path, cluster):
    a, b = cluster["a"], cluster["b"]
    plan = json.loads(metactl("plan", "tiny", "--daemon", b.address, "--gpus", "4", "--format", "json",
                              check=0).stdout)
    assert [r["node"] for r in plan["ranks"]] == ["a", "a", "b", "b"]
    results = run_ranks(tmp_path, "tiny", [a, a, b, b])
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, err
        assert [t["name"] for t in report["tensors"]] == [i["tensor"] for i in plan["ranks"][rank]["items"]]
    table = metactl("plan", "tiny", "--daemon", a.address, check=0).stdout
    assert "plan from the coordinator (asked a at" in table
    bad = metactl("plan", "tiny", "--daemon", a.address, "--nodes", "2", check=2)
    assert "--nodes is for offline planning" in bad.stderr


@pytest.mark.parametrize("source,expected", [("stream", "stream:a"), ("direct", "direct")])
def test_forced_source_gives_the_same_bytes(tmp_path, cluster, source, expected):
    a = cluster["a"]
    results = run_ranks(tmp_path, "tiny", [a, a], extra=["--source", source])
    check_reports(results, cluster["tensors"])
    for rc, out, err, report in results:
        assert {t["source"] for t in report["tensors"]} <= {expected}


def test_source_file_agrees_with_safetensors_library(cluster):
    # The oracle itself: what the safetensors library reads back equals what we wrote.
    loaded = {}
    for f in sorted(cluster["ckpt"].glob("*.safetensors")):
        loaded.update(load_file(str(f)))
    assert {k: tensor_sha256(v) for k, v in loaded.items()} == \
        {k: tensor_sha256(v) for k, v in cluster["tensors"].items()}


def test_truncated_shard_fails_every_rank_naming_tensor_and_rank(tmp_path, cluster):
    a, b = cluster["a"], cluster["b"]
    last = sorted(cluster["ckpt"].glob("*.safetensors"))[-1]
    offsets = header_offsets(last)
    victim = max(offsets, key=lambda name: offsets[name][1])  # the tensor at the end of the file
    data = last.read_bytes()
    last.write_bytes(data[:len(data) - 100])  # its tail is gone
    results = run_ranks(tmp_path, "tiny", [a, b])
    # The file no longer is what was registered: every tensor stored in it fails, on the rank
    # that holds it, and no other tensor does.
    unfilled = {rank: sorted(t["name"] for t in r[3]["tensors"] if not t["filled"]) for rank, r in enumerate(results)}
    assert sorted(sum(unfilled.values(), [])) == sorted(offsets), unfilled
    assert victim in sum(unfilled.values(), [])
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 3, f"rank {rank} exited {rc}\n{err}"
        assert "verification failed (gloo): " in err, err
        assert any(f"rank {r}: {name}: not filled" in err for r, names in unfilled.items() for name in names), err
        # Both the direct reader (rank 0) and the daemon streaming to rank 1 compare the file with
        # its registered size and mtime before reading a byte.
        assert f"{last} changed since it was registered: size {len(data) - 100} bytes, registered {len(data)}" in err, err
        # bytes_read counts what arrived: not the victim's bytes.
        arrived = sum(cluster["tensors"][t["name"]].numel() * cluster["tensors"][t["name"]].element_size()
                      for t in report["tensors"] if t["filled"])
        assert report["bytes_read"] == arrived, (rank, report["bytes_read"], arrived)


def test_register_refuses_skeleton_tensor_missing_from_checkpoint(tmp_path, cluster):
    a = cluster["a"]
    skeleton = json.loads(metactl("skeleton", cluster["ckpt"], check=0).stdout)
    skeleton["tensors"].append({"name": "score.weight", "shape": [2, 64], "dtype": "F32"})
    path = tmp_path / "model.json"
    path.write_text(json.dumps(skeleton))
    proc = metactl("register", "tiny-with-head", "--checkpoint", cluster["ckpt"], "--skeleton", path,
                   "--daemon", a.address, check=2)
    assert "score.weight is in the skeleton but not in the checkpoint" in proc.stderr
    assert "would stay on meta" in proc.stderr


def test_register_outside_roots_is_refused(tmp_path, cluster):
    b = cluster["b"]
    proc = metactl("register", "x", "--checkpoint", cluster["ckpt"], "--daemon", b.address, check=2)
    assert "is not under this daemon's roots" in proc.stderr


def test_unknown_model_is_bad_input(cluster):
    proc = metactl("load", "nope", "--daemon", cluster["a"].address, check=2)
    assert 'no model "nope" is registered (registered: tiny)' in proc.stderr


def test_unknown_strategy_is_bad_input(cluster):
    proc = metactl("load", "tiny", "--daemon", cluster["a"].address, "--strategy", "pipeline", check=2)
    assert 'unknown strategy "pipeline"' in proc.stderr


def test_unreachable_daemon_fails_with_1(cluster):
    proc = metactl("load", "tiny", "--daemon", "127.0.0.1:1", "--timeout", "5", check=1)
    assert "127.0.0.1:1" in proc.stderr


def test_world_larger_than_cluster_is_refused(tmp_path, cluster):
    results = run_ranks(tmp_path, "tiny", [cluster["a"]], world=5)
    rc, out, err, report = results[0]
    assert rc == 2, err
    assert "world size 5 is larger than the 4 GPU slots of the 2 joined nodes" in err


def test_registering_a_name_again_needs_replace_and_unregister_forgets_it(tmp_path, cluster):
    a = cluster["a"]
    other = save_sharded(llama_like_tensors(layers=1), cluster["root_a"] / "other", shards=1)
    metactl("register", "tiny", "--checkpoint", cluster["ckpt"], "--daemon", a.address, check=0)  # the same: fine
    refused = metactl("register", "tiny", "--checkpoint", other, "--daemon", a.address, check=2)
    assert f'model "tiny" is already registered from {cluster["ckpt"]}' in refused.stderr
    assert "pass --replace" in refused.stderr
    metactl("register", "tiny", "--checkpoint", other, "--daemon", a.address, "--replace", check=0)
    status = metactl("status", "--daemon", a.address, check=0).stdout
    assert str(other) in status and str(cluster["ckpt"]) not in status
    metactl("unregister", "tiny", "--daemon", cluster["b"].address, check=0)  # through a node agent
    again = metactl("unregister", "tiny", "--daemon", a.address, check=2)
    assert 'no model "tiny" is registered' in again.stderr
    gone = metactl("load", "tiny", "--daemon", a.address, check=2)
    assert 'no model "tiny" is registered' in gone.stderr
