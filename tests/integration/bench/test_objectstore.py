"""bench/run_bench.py --only objectstore at its smallest shape, one round: one host (no root,
no namespaces) of 2 ranks, a 7 MB checkpoint in the real S3 server behind the fault proxy (the
cloud bucket's shape), every loader once. Asserts the table and the keys, that every rank's
shards were checked against the files, and that the bytes the proxy counted are exactly what
each loader says it asked for."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "bench" / "cluster"), str(ROOT / "tests" / "integration")]
import checkpoint_data  # noqa: E402
import objectstore  # noqa: E402
from s3_server import require_moto  # noqa: E402

# 1 layer, hidden 512, intermediate 1024, vocab 1024: 7,343,104 tensor bytes in one object.
DIMS = "layers=1,hidden=512,intermediate=1024,heads=4,kv_heads=4,vocab=1024"
TENSOR_BYTES = 7_343_104


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    require_moto()
    for module in ("runai_model_streamer", "runai_model_streamer_s3", "s3fs"):
        pytest.importorskip(module, reason="`pip install -r scripts/requirements.txt` (the benchmark's peers)")
    tmp = tmp_path_factory.mktemp("objectstore")
    build = pathlib.Path(os.environ.get("METALOAD_BUILD_DIR", ROOT / "build"))
    out = tmp / "bench.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "run_bench.py"), "--build-dir", str(build),
                        "--only", "objectstore", "--objectstore-shape", "1x2", "--e2e-dims", DIMS,
                        "--objectstore-repeats", "1", "--timeout", "300", "--work-dir", str(tmp), "--out", str(out)],
                       capture_output=True, text=True, timeout=900)
    return r, (json.loads(out.read_text()) if out.exists() else None)


def test_every_loader_runs_and_the_keys_are_written(run):
    r, result = run
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    lines = r.stdout.splitlines()
    assert ("objectstore (1 hosts x 2 ranks, 0.01 GiB in 1 objects; bucket 30 ms first byte, 100 MB/s a "
            "connection, 1500 MB/s in all)") in lines, r.stdout
    for loader in objectstore.LOADERS:
        assert any(line.startswith(f"  {loader} ") for line in lines), (loader, r.stdout)
    for key in (*objectstore.TARGETS, *objectstore.EXTRA_KEYS):
        assert isinstance(result[key], float), (key, result[key])
    for key in objectstore.TARGETS:
        assert any(line.startswith(f"  {key} ") for line in lines), (key, r.stdout)
    cap = f" MiB (its streaming cap {objectstore.DAEMON_STREAMING_CAP_MIB:.0f} MiB)"  # 870 on 2 cores
    assert any(line.startswith("  metad peak RSS growth in a load ") and line.endswith(cap) for line in lines), r.stdout
    summary = result["objectstore"]
    assert summary["errors"] == {}
    assert summary["data"]["tensor_bytes"] == TENSOR_BYTES
    assert summary["best_peer"] in set(objectstore.LOADERS) - {"metaload"}
    # metaload reads the bucket once (one host, one replica: each byte once), its daemon in its cap.
    assert summary["keys"]["e2e_objectstore_storage_over_checkpoint"] <= 1.05
    assert summary["keys"]["e2e_objectstore_daemon_peak_rss_over_cap"] <= 1.0


def test_every_rank_was_checked_against_the_files(run):
    _, result = run
    for loader, samples in result["objectstore"]["samples"].items():
        assert len(samples) == 1 and samples[0]["checked"] is True, loader
        ranks = samples[0]["ranks"]
        assert len(ranks) == 2, loader
        assert [x["check_problems"] for x in ranks] == [[], []], loader
        assert sum(x["shard_bytes"] for x in ranks) == TENSOR_BYTES, loader


def test_the_proxy_counted_what_each_loader_asked_for(run):
    _, result = run
    samples = {x: s[0] for x, s in result["objectstore"]["samples"].items()}
    data = result["objectstore"]["data"]
    file_bytes = data["shard_file_bytes"]
    headers = file_bytes - TENSOR_BYTES
    # The peers say what they asked for: each rank the whole object (runai, boto3), one copy per
    # host (dcp_s3fs: its first rank; the folder's JSON files too, so bucket_bytes).
    for loader, ranks_that_read in (("runai", 2), ("runai_tuned", 2), ("boto3", 2)):
        s = samples[loader]
        assert s["loader_s3_bytes"] == s["bucket_bytes"] == s["bucket_tensor_file_bytes"] == ranks_that_read * file_bytes
    s = samples["dcp_s3fs"]
    assert s["loader_s3_bytes"] == s["bucket_bytes"] and s["bucket_tensor_file_bytes"] == file_bytes
    assert [x["s3_bytes"] for x in s["ranks"]] == [s["bucket_bytes"], 0]
    # Distributed mode: every rank reads the headers, the node's ranks split the tensors.
    for loader in ("runai_dist", "runai_dist_tuned"):
        s = samples[loader]
        assert s["loader_s3_bytes"] is None
        assert s["bucket_bytes"] == 2 * headers + TENSOR_BYTES, loader
    # metaload: the ranks' bytes came through the daemon; the bucket served each once.
    s = samples["metaload"]
    said = sum(x["metaload_report"]["bytes_read"] for x in s["ranks"])
    assert said == TENSOR_BYTES
    # The ranks had no credentials: every byte was streamed from the daemon, none read directly.
    assert [x["metaload_report"]["direct_bytes"] for x in s["ranks"]] == [0, 0]
    assert sum(x["metaload_report"]["streamed_bytes"] for x in s["ranks"]) == TENSOR_BYTES
    assert s["bucket_tensor_file_bytes"] == TENSOR_BYTES, s["bucket_tensor_file_bytes"]


def test_shape_and_flags_are_checked():
    assert objectstore.parse_shape("4x2") == (4, 2)
    for bad in ("4", "0x2", "4x17", "axb", "4x2x1", ""):
        with pytest.raises(ValueError, match="HOSTSxRANKS|from 1 to 16"):
            objectstore.parse_shape(bad)
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "run_bench.py"), "--only", "objectstore",
                        "--objectstore-loaders", "metaload,nope"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "--objectstore-loaders: a subset of metaload,runai,runai_tuned,runai_dist,runai_dist_tuned,dcp_s3fs,boto3" \
        in r.stderr, r.stderr
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "run_bench.py"), "--only", "objectstore",
                        "--objectstore-shape", "0x2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--objectstore-shape: '0x2': hosts and ranks per host from 1 to 16" in r.stderr, \
        r.stderr
    assert checkpoint_data.parse_dims(DIMS)["hidden"] == 512
