"""bench/simulate.py, the cluster-scale simulation: its numbers for a 2-node case computed here
by hand from a hand-made bench.json, and its refusals of input that makes no sense (exit 2)."""
import json
import pathlib
import subprocess
import sys

import pytest

SIMULATE = pathlib.Path(__file__).resolve().parents[3] / "bench" / "simulate.py"

# A Llama of 1 layer, hidden 128, intermediate 256, 2 heads (head_dim 64), 1 KV head, vocab 1000,
# untied, BF16. Per layer q+o 2*128*128 = 32768, k+v 2*128*64 = 16384, gate+up+down 3*128*256 =
# 98304, two norms 256: 147712; embeddings + lm_head 2*1000*128 = 256000; final norm 128.
PARAMS = 147712 + 256000 + 128
C = 2 * PARAMS  # 807680 tensor bytes
MODEL = ["--layers", "1", "--hidden", "128", "--intermediate", "256", "--heads", "2", "--kv-heads", "1",
         "--vocab", "1000"]
# 2 nodes x 2 ranks; storage 1e6 B/s, 1 ms a request; NIC 0.016 Gb/s = 2e6 B/s; metaload's pieces
# 64 KiB, 2 in flight a rank; mmap 4 KiB, 1 in flight a rank.
CLUSTER = ["--nodes", "2", "--gpus-per-node", "2", "--replicas", "2", "--storage-gbps", "0.001",
           "--storage-latency-ms", "1", "--nic-gbit", "0.016", "--metaload-request-mib", "0.0625",
           "--metaload-inflight-per-rank", "2", "--mmap-request-kib", "4", "--mmap-inflight-per-rank", "1"]
# pread 2e9 B/s, TCP 1e9 B/s; e2e seconds per 1e9 bytes: hf 5, hf_dist 3, dcp 4, broadcast 6, metaload 2.
BENCH = {"absolute": {"pread": {"gb_per_s": 2.0}, "tcp": {"gb_per_s": 1.0}},
         "e2e": {"data": {"tensor_bytes": 1e9},
                 "absolute": {c: {"median_s": s} for c, s in
                              (("hf", 5.0), ("hf_dist", 3.0), ("dcp", 4.0), ("broadcast", 6.0), ("metaload", 2.0))}}}


def simulate(tmp_path, *extra, bench=BENCH):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(bench))
    r = subprocess.run([sys.executable, str(SIMULATE), *MODEL, *CLUSTER, "--bench-json", str(path), "--json", "-",
                        *extra], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["model"]["tensor_bytes"] == C
    return {(row["regime"], row["loader"]): row for row in result["rows"]}, result


def test_hsdp_two_nodes_storage_bytes_and_times_match_the_hand_computation(tmp_path):
    rows, result = simulate(tmp_path, "--regimes", "hsdp")
    assert result["host_cost_sources"]["pread_gbps"].endswith("absolute.pread.gb_per_s")
    # 2 replicas x fsdp 2: each node is one replica and holds the whole checkpoint.
    storage = {"hf": 2 * C, "hf_dist": 2 * C, "dcp": 2 * C, "broadcast": C, "metaload": 2 * C, "metaload_fanout": C}
    for loader, nbytes in storage.items():
        assert rows[("hsdp", loader)]["storage_bytes"] == nbytes, loader
    # dcp: storage 2C / 1e6 beats latency (C / 4096 requests x 1 ms / 2), NIC (C / 2e6), host (C x 4e-9).
    assert rows[("hsdp", "dcp")]["seconds"] == pytest.approx(2 * C / 1e6)
    assert rows[("hsdp", "dcp")]["bound"] == "storage"
    # fan-out: each node reads C/2 and receives C/2: storage C / 1e6.
    assert rows[("hsdp", "metaload_fanout")]["seconds"] == pytest.approx(C / 1e6)
    assert rows[("hsdp", "dcp")]["over_fanout"] == pytest.approx(2.0)
    # broadcast: rank 0 reads C (storage C / 1e6 beats latency C / 4096 x 1 ms), then C over each NIC.
    assert rows[("hsdp", "broadcast")]["seconds"] == pytest.approx(C / 1e6 + C / 2e6)
    assert rows[("hsdp", "broadcast")]["bound"] == "storage + nic"


def test_host_costs_set_the_time_when_storage_and_nics_are_fast(tmp_path):
    rows, _ = simulate(tmp_path, "--regimes", "hsdp", "--storage-gbps", "1000", "--nic-gbit", "8000",
                       "--storage-latency-ms", "0")
    # A node holds C: its loader's e2e cost C x (seconds / 1e9).
    assert rows[("hsdp", "dcp")]["seconds"] == pytest.approx(C * 4e-9)
    assert rows[("hsdp", "metaload_fanout")]["seconds"] == pytest.approx(C * 2e-9)
    assert rows[("hsdp", "metaload_fanout")]["bound"] == "host"
    # broadcast: rank 0's pread C / 2e9 (storage C / 1e12), then the held bytes C x 6e-9.
    assert rows[("hsdp", "broadcast")]["seconds"] == pytest.approx(C / 2e9 + C * 6e-9)


def test_dcp_thread_count_divides_its_request_latency(tmp_path):
    # Fast storage and NICs, no host costs: a node's C / 4096 requests x 1 ms over 2 ranks x threads.
    fast = ["--regimes", "hsdp", "--storage-gbps", "1000", "--nic-gbit", "8000", "--no-host-costs"]
    rows, _ = simulate(tmp_path, *fast, "--dcp-thread-count", "4")
    assert rows[("hsdp", "dcp")]["seconds"] == pytest.approx(C / 4096 * 1e-3 / 8)
    assert rows[("hsdp", "dcp")]["bound"] == "latency"
    assert rows[("hsdp", "hf_dist")]["seconds"] == pytest.approx(C / 4096 * 1e-3 / 2)


def test_noshared_peers_pay_for_the_copy_and_metaload_streams(tmp_path):
    rows, _ = simulate(tmp_path, "--regimes", "noshared")
    # fsdp over 4 ranks: a node holds C/2. Peers: node 0 reads C and sends it to node 1 (storage
    # C / 1e6), then node 1 loads its half from the local copy (C/2 x 4e-9 for dcp).
    assert rows[("noshared", "dcp")]["storage_bytes"] == C
    assert rows[("noshared", "dcp")]["seconds"] == pytest.approx(C / 1e6 + C / 2 * 4e-9)
    # metaload: node 0's daemon reads C and streams node 1's half: storage C / 1e6.
    assert rows[("noshared", "metaload")]["storage_bytes"] == C
    assert rows[("noshared", "metaload")]["seconds"] == pytest.approx(C / 1e6)


def test_defaults_are_llama_3_1_405b_bf16(tmp_path):
    r = subprocess.run([sys.executable, str(SIMULATE), "--json", "-", "--regimes", "hsdp"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    # 126 x (2*16384^2 + 2*16384*1024 + 3*16384*53248 + 2*16384) + 2*128256*16384 + 16384
    assert result["model"]["params"] == 405_853_388_800
    assert result["model"]["tensor_bytes"] == 811_706_777_600
    assert result["host_cost_sources"]["pread_gbps"].startswith("default")
    rows = {row["loader"]: row for row in result["rows"]}
    assert rows["dcp"]["storage_over_checkpoint"] == 16 and rows["metaload_fanout"]["storage_over_checkpoint"] == 1


def test_the_markdown_table_has_a_row_per_regime_and_loader_and_says_where_costs_came_from(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"absolute": {"tcp": {"gb_per_s": 0.9}}}))
    r = subprocess.run([sys.executable, str(SIMULATE), "--bench-json", str(path), "--json", str(tmp_path / "o.json")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ") and not line.startswith("| regime")]
    assert len(rows) == 5 * 6
    assert "| hsdp | dcp | 12.7 | 12,987.3 | 16.00 |" in r.stdout
    assert f"tcp_gbps: {path}: absolute.tcp.gb_per_s" in r.stdout
    assert "pread_gbps: default (measured on the benchmark VM)" in r.stdout
    assert "Assumptions:" in r.stdout
    assert len(json.loads((tmp_path / "o.json").read_text())["rows"]) == 30


@pytest.mark.parametrize("args, message", [
    (["--storage-gbps", "-1"], "--storage-gbps must be > 0, got -1.0"),
    (["--nic-gbit", "0"], "--nic-gbit must be > 0, got 0.0"),
    (["--storage-latency-ms", "-0.5"], "--storage-latency-ms must be >= 0, got -0.5"),
    (["--nodes", "128", "--replicas", "3"], "--replicas 3 does not divide --nodes 128"),
    (["--regimes", "moon"], "--regimes: unknown moon"),
    (["--e2e-s", "dcp=fast"], "--e2e-s 'dcp=fast': not CASE=SECONDS"),
])
def test_nonsense_flags_are_refused_with_exit_2(args, message):
    r = subprocess.run([sys.executable, str(SIMULATE), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout
    assert message in r.stderr
    assert r.stdout == ""


def test_nonsense_bench_json_is_refused_with_exit_2(tmp_path):
    bad = json.loads(json.dumps(BENCH))
    bad["absolute"]["tcp"]["gb_per_s"] = -0.7
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(bad))
    r = subprocess.run([sys.executable, str(SIMULATE), "--bench-json", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert f"{path}: absolute.tcp.gb_per_s must be > 0, got -0.7" in r.stderr
    path.write_text("{not json")
    r = subprocess.run([sys.executable, str(SIMULATE), "--bench-json", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and f"--bench-json {path}:" in r.stderr


def test_replicate_host_page_cache_decides_what_the_ranks_of_a_node_read(tmp_path):
    # Every one of the 4 ranks holds C. With the page cache a node's 2 ranks read C between them;
    # without it each reads its own C. Fan-out reads C once in both.
    rows, _ = simulate(tmp_path, "--regimes", "replicate")
    assert [rows[("replicate", x)]["storage_bytes"] for x in ("hf", "dcp", "metaload", "metaload_fanout")] == \
        [2 * C, 2 * C, 2 * C, C]
    rows, _ = simulate(tmp_path, "--regimes", "replicate", "--no-host-page-cache")
    assert [rows[("replicate", x)]["storage_bytes"] for x in ("hf", "dcp", "metaload", "metaload_fanout")] == \
        [4 * C, 4 * C, 4 * C, C]
