"""The real planner at cluster scale (tests/bench/plan_scale_bench.cc) through bench/simulate.py
--planner, at its smallest points: 405B on 8 nodes x 8 GPUs under every strategy, and the
671B-shaped checkpoint's size on 1 node. Each byte leaves storage once (at most 5% over), no
rank's fan-out part is over 64 MiB, the JSON has every key the table and docs/performance.md
read, an assignment over --max-assign-gib is skipped saying why, and a missing program is exit 2."""
import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
SIMULATE = REPO / "bench" / "simulate.py"
BENCH = pathlib.Path(os.environ.get("METALOAD_BENCH_PLAN_SCALE", REPO / "build" / "tests" / "bench_plan_scale"))

COST_KEYS = {"storage_bytes", "storage_over_checkpoint", "storage_bytes_per_rank", "storage_bytes_per_node",
             "recv_bytes_per_node", "send_bytes_per_node", "recv_bytes_node", "send_bytes_node", "groups", "pieces",
             "assign_ms", "held_bytes", "bound_bytes", "assign_peak_rss_bytes", "assign_peak_estimate_bytes", "part",
             "max_rank_fanout_state_bytes", "rank_fanout_state_ok"}
PART_KEYS = {"wire_bytes", "memory_bytes", "groups", "neighbours", "pieces", "ms_all_ranks", "ms_max", "wire_bytes_to_ranks_asking"}
MIB = 2**20


def planner(*args):
    r = subprocess.run([sys.executable, str(SIMULATE), "--planner", str(BENCH), "--planner-models", "405b",
                        "--planner-nodes", "8", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_405b_on_8_nodes_reads_each_byte_once_and_no_rank_holds_the_whole_assignment():
    points = json.loads(planner("--json", "-"))["planner"]["points"]
    assert [p["strategy"] for p in points] == ["fsdp", "tp", "replicate"]
    for p in points:
        assert p["params"] == 405_853_388_800 and p["checkpoint_bytes"] == 811_706_777_600
        assert (p["nodes"], p["world"]) == (8, 64)
        fan = p["fanout"]
        assert fan["run"] and fan["scope"] == "across-nodes"
        assert COST_KEYS <= fan.keys() and PART_KEYS <= fan["part"].keys()
        assert 1.0 <= fan["storage_over_checkpoint"] <= 1.05, (p["strategy"], fan)
        assert sum(fan["storage_bytes_per_node"]) == fan["storage_bytes"]
        assert len(fan["recv_bytes_per_node"]) == len(fan["send_bytes_per_node"]) == 8
        # A chain: every byte into a node left another.
        assert sum(fan["recv_bytes_per_node"]) == sum(fan["send_bytes_per_node"])
        # The coordinator holds the whole assignment (at most what the plan cache counts for it); a
        # rank only its part, far under the 64 MiB target.
        assert 0 < fan["held_bytes"] <= fan["bound_bytes"]
        assert fan["max_rank_fanout_state_bytes"] == fan["part"]["memory_bytes"]["max"]
        assert fan["max_rank_fanout_state_bytes"] <= 64 * MIB and fan["rank_fanout_state_ok"]
        assert fan["part"]["memory_bytes"]["max"] < fan["held_bytes"]
        assert p["sent_bytes_all_ranks"] == p["answer_bytes_all_ranks"] + fan["part"]["wire_bytes_to_ranks_asking"]
        assert p["before"]["whole_plan_wire_bytes"] == p["answer_bytes_all_ranks"]
        assert p["before"]["expanded_plan_bytes_estimate"] > 0 and p["answer_bytes_per_rank"]["max"] > 0
        assert p["time_model"]["planned_s"] > 0 and p["peak_rss_bytes"] > 0
    fsdp, tp, replicate = points
    # fsdp: 64 dim-0 chunks, nothing shared, and no rank asks for a part (nor fetched the whole plan before).
    assert fsdp["fanout"]["pieces"] == 0 and fsdp["fanout"]["recv_bytes_node"]["max"] == 0
    assert [p["ranks_asking_fanout"] for p in points] == [0, 64, 64]
    assert [p["before"]["ranks_fetching_whole_plan"] for p in points] == [0, 64, 64]
    assert fsdp["fanout"]["part"]["wire_bytes_to_ranks_asking"] == 0
    # tp 8 x pp 4: 2 replicas; replicate: every rank all, each reader's group the holders off its node.
    assert tp["replicas"] == 2 and tp["fanout"]["pieces"] > 0 and tp["fanout"]["part"]["groups"]["max"] > 0
    assert replicate["held_bytes_per_rank"]["max"] >= replicate["checkpoint_bytes"]
    assert replicate["fanout"]["groups"] == 64 and replicate["fanout"]["part"]["groups"]["max"] == 57
    # ... yet the chains the pieces travel down give a rank at most 8 + 2 ranks to talk to: a node's
    # first rank receives from every reader of the node before and sends to its node-mate and, for
    # what it reads, to the next node's first rank; most ranks talk to 3 (before, after, the next node).
    assert replicate["fanout"]["part"]["neighbours"] == {"max": 10, "median": 3}
    # A node's link carries each piece once in, and once out unless its node ends the chain.
    ckpt = replicate["checkpoint_bytes"]
    assert all(b <= ckpt for b in replicate["fanout"]["recv_bytes_per_node"]), replicate["fanout"]


def test_the_markdown_tables_have_a_row_per_point():
    out = planner("--planner-strategies", "tp")
    assert "| llama-3.1-405b | 8 x 8 | tp 8 x pp 4 x 2 replicas | 812 | 1.000 | 25.50 | 288 | 48 | 64 |" in out
    assert "| llama-3.1-405b | 8 | tp | hsdp (2) |" in out


def test_an_assignment_over_the_memory_limit_is_skipped_saying_why():
    points = json.loads(planner("--planner-strategies", "tp", "--planner-max-assign-gib", "0", "--json", "-"))
    p = points["planner"]["points"][0]
    assert not p["fanout"]["run"] and "over --max-assign-gib 0" in p["fanout"]["skipped"]
    assert p["fanout"]["assign_peak_estimate_bytes"] > 0 and p["time_model"] is None
    out = planner("--planner-strategies", "tp", "--planner-max-assign-gib", "0")
    assert "| 64 | not run (~" in out and "| llama-3.1-405b | 8 | tp | — | fan-out not assigned |" in out


def test_the_671b_shape_counts_671b_parameters_and_its_two_forms():
    sizes = {}
    for form in ([], ["--fp8"]):
        r = subprocess.run([str(BENCH), "--models", "671b", "--nodes", "1", "--strategies", "replicate", *form],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        p = json.loads(r.stdout)
        assert p["params"] == 671_026_419_200 and p["tensors"] > 45_000
        assert p["fanout"]["storage_over_checkpoint"] == 1
        sizes[p["form"].split()[0]] = p["checkpoint_bytes"]
    # BF16: 2 bytes a parameter but the router's F32 bias; FP8: 1 byte a quantized value, its scales.
    assert sizes["bf16"] == 1_342_052_868_096
    assert 0.50 < sizes["fp8"] / sizes["bf16"] < 0.51


def test_a_missing_planner_is_exit_2(tmp_path):
    r = subprocess.run([sys.executable, str(SIMULATE), "--planner", str(tmp_path / "none")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert f"no planner benchmark at {tmp_path / 'none'}" in r.stderr
