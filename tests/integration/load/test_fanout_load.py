"""Read once, fan out, in `metactl load` (issue 22): where the plan gives ranks on several nodes
the same bytes (`replicate`, tp groups repeated across replicas, norms every rank of a tp group
holds), each byte leaves storage once: one rank reads it, the ranks of its node read it too
(from that node's page cache), and the ranks of the other nodes receive it down a chain on one
Gloo group of the job (reader, then the holders in rank order, each passing it on). Real metad
nodes and real rank processes: every tensor's bytes equal the file's, each tensor is read on one
node only, and what was sent was received. On one node nothing is fanned out (a copy from the
page cache beats a Gloo transfer there). A reader killed mid-way (SIGKILL after its first
fan-out chunks, METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS) leaves its group to read the rest from
storage, bit-exact, and exit 3 (verification names the rank that is gone). metaload.load() in
four Python ranks of one process group fans out the same way.
"""
import pytest

from checkpoints import llama_like_config, llama_like_tensors, save_sharded, tensor_sha256
from conftest import metactl, wait_for
from metrics_scrape import METRICS_ON_ANY_PORT, metrics, value
from ranks import run_ranks


def checkpoint_in(tmp_path):
    root = tmp_path / "storage"
    tensors = llama_like_tensors(layers=2)
    ckpt = save_sharded(tensors, root / "tiny", shards=2, config=llama_like_config(layers=2))
    return root, ckpt, tensors


@pytest.fixture
def two_nodes(tmp_path, daemons):
    """Nodes a and b, 2 GPUs each, both serving the checkpoint: ranks 0, 1 on a, 2, 3 on b."""
    root, ckpt, tensors = checkpoint_in(tmp_path)
    a = daemons("a", [root], gpus=2, extra=[METRICS_ON_ANY_PORT])  # the coordinator: counts GetPlan
    b = daemons("b", [root], gpus=2, coordinator=a.address)
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address).stdout, what="node b to join")
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    return [a, a, b, b], tensors


def checkpoint_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors.values())


def start_ranks(tmp_path, daemons_of_ranks, extra, env_of_rank=None, timeout_s=60):
    return run_ranks(tmp_path, "tiny", daemons_of_ranks, extra=extra, load_timeout=timeout_s,
                     env_of_rank=env_of_rank)


NODE_OF_RANK = ["a", "a", "b", "b"]


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


def held_bytes(t, tensors):
    """What a rank's report entry holds, in bytes (its slice of the file's tensor)."""
    src = tensors[t["name"]]
    s = t.get("slice")
    part = src if s is None else src.narrow(s["dim"], s["start"], s["length"])
    return part.numel() * part.element_size()


def bytes_read_for_others(reports, tensors, node_of_rank):
    """Per rank, the bytes of the pieces it read for the other nodes' ranks, from what a rank of
    another node says it received from it (under replicate every rank receives them all)."""
    read_by = {}
    for reader, node in enumerate(node_of_rank):
        other = next(r for r in reports if node_of_rank[r["rank"]] != node)
        read_by[reader] = sum(held_bytes(t, tensors) for t in other["tensors"]
                              if t["source"] == f"fanout:rank {reader}")
    assert all(read_by.values()), read_by
    return read_by


def chain_sent(read_by, node_of_rank):
    """What each rank sends when every piece travels from its reader up through the ranks of the
    other nodes in ascending order, wrapped around (every holder but the chain's last sends it on)."""
    sent = {r: 0 for r in range(len(node_of_rank))}
    for reader, size in read_by.items():
        holders = sorted([reader] + [r for r, n in enumerate(node_of_rank) if n != node_of_rank[reader]])
        at = holders.index(reader)
        chain = holders[at:] + holders[:at]
        for r in chain[:-1]:
            sent[r] += size
    return sent


def format_bytes(n):
    """util/units.h FormatBytes: "0 B", "1.50 KiB"."""
    if n < 1024:
        return f"{n} B"
    value, unit = float(n), 0
    while value >= 1024 and unit < 6:
        value, unit = value / 1024, unit + 1
    return f"{value:.2f} {['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'][unit]}"


def check_read_once(results, tensors):
    reports = [r for _, _, _, r in results]
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\n{out}\n{err}"
        check_bytes(report, tensors)
        assert report["fanout_notes"] == [], report["fanout_notes"]
    # Each stored byte left storage on one node only (its ranks share the page cache), and
    # everything sent arrived.
    read_on = {}
    for r in reports:
        for t in r["tensors"]:
            if t["source"] == "direct":
                key = (t["name"], repr(t.get("slice")))
                read_on.setdefault(key, set()).add(NODE_OF_RANK[r["rank"]])
    assert read_on and all(len(nodes) == 1 for nodes in read_on.values()), read_on
    assert sum(r["fanout_sent_bytes"] for r in reports) == sum(r["fanout_received_bytes"] for r in reports) > 0
    for r in reports:
        fanned = {t["source"] for t in r["tensors"] if t["source"].startswith("fanout:")}
        assert fanned, f"rank {r['rank']} received nothing"
        senders = {int(s.split()[-1]) for s in fanned}
        assert all(NODE_OF_RANK[s] != NODE_OF_RANK[r["rank"]] for s in senders), \
            f"rank {r['rank']} received from its own node: {senders}"
    return reports


def test_replicate_reads_every_byte_on_one_node(tmp_path, two_nodes):
    nodes, tensors = two_nodes
    results = start_ranks(tmp_path, nodes, ["--strategy", "replicate"])
    reports = check_read_once(results, tensors)
    # Every rank holds everything: it received what the other node's ranks read, and read the
    # rest with its node-mate.
    for r in reports:
        assert r["bytes_read"] + r["fanout_received_bytes"] == checkpoint_bytes(tensors), r["rank"]
    assert sum(r["bytes_read"] for r in reports) == 2 * checkpoint_bytes(tensors)
    # Each piece enters the other node once, down a chain: its reader sends it to the first rank
    # there (0 or 2), which passes it on to its node-mate (1 or 3), where the chain ends; a
    # broadcast would have the reader send it to both.
    read_by = bytes_read_for_others(reports, tensors, NODE_OF_RANK)
    sent = {r["rank"]: r["fanout_sent_bytes"] for r in reports}
    assert sent == {0: read_by[0] + read_by[2] + read_by[3], 1: read_by[1],
                    2: read_by[2] + read_by[0] + read_by[1], 3: read_by[3]}, (sent, read_by)
    assert sent == chain_sent(read_by, NODE_OF_RANK)
    assert all("verified (gloo): 0 tensors on meta or unfilled across 4 ranks" in out for _, out, _, _ in results)
    # Each rank's line counts what it received by fan-out (was: only what it read or streamed,
    # and a rank that received everything read "0 B ... 0 MB/s").
    for _, out, _, r in results:
        line = next(line for line in out.split("\n") if line.startswith(f"rank {r['rank']}/4 node "))
        assert f": {len(r['tensors'])} tensors, {format_bytes(checkpoint_bytes(tensors))} (direct " in line, line
        assert f", received by fan-out {format_bytes(r['fanout_received_bytes'])}) in " in line, line
    # Without fan-out every rank reads all of it.
    alone = start_ranks(tmp_path, nodes, ["--strategy", "replicate", "--no-fan-out"])
    for rc, out, err, report in alone:
        assert rc == 0, err
        check_bytes(report, tensors)
        assert report["bytes_read"] == checkpoint_bytes(tensors)
        assert report["fanout_received_bytes"] == report["fanout_sent_bytes"] == 0


def test_three_nodes_relay_each_piece_through_every_other_node_once(tmp_path, daemons):
    # Nodes a, b, c with 2 ranks each under replicate: a piece read on b goes 2 or 3 -> 4 -> 5 ->
    # 0 -> 1, up from its reader and around; every rank ends with the file's bytes, each node
    # receives each piece once over its link, and each rank sends exactly what its places in the
    # chains say.
    root, ckpt, tensors = checkpoint_in(tmp_path)
    a = daemons("a", [root], gpus=2)
    b = daemons("b", [root], gpus=2, coordinator=a.address)
    c = daemons("c", [root], gpus=2, coordinator=a.address)
    wait_for(lambda: all(f"{n} " in metactl("status", "--daemon", a.address).stdout for n in "bc"),
             what="nodes b and c to join")
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    node_of_rank = ["a", "a", "b", "b", "c", "c"]
    results = run_ranks(tmp_path, "tiny", [a, a, b, b, c, c], extra=["--strategy", "replicate"],
                        env_of_rank={r: {"METALOAD_FANOUT_TEST_CHUNK_BYTES": "4096"} for r in range(6)})
    reports = []
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\n{out}\n{err}"
        check_bytes(report, tensors)
        assert report["fanout_notes"] == [], report["fanout_notes"]
        assert report["bytes_read"] + report["fanout_received_bytes"] == checkpoint_bytes(tensors), rank
        reports.append(report)
    read_by = bytes_read_for_others(reports, tensors, node_of_rank)
    sent = {r["rank"]: r["fanout_sent_bytes"] for r in reports}
    assert sent == chain_sent(read_by, node_of_rank), (sent, read_by)
    # Rank 1 ends the chains of node b's pieces (2 or 3 -> 4 -> 5 -> 0 -> 1) and passes on node
    # c's (4 or 5 -> 0 -> 1 -> 2 -> 3): it sends what it read and what c read, nothing of b's.
    assert sent[1] == read_by[1] + read_by[4] + read_by[5], (sent, read_by)


def test_a_rank_asks_once_for_its_plan_and_its_fan_out_part(tmp_path, two_nodes):
    """Each rank's plan and its part of the fan-out come in one GetPlan (node b forwards its
    ranks' to the coordinator, a): 4 calls for 4 ranks, whether the plan shares (replicate) or
    not (fsdp: no part is assigned or sent). A rank asked twice before, its plan and then its
    part, when its plan could share: 8."""
    nodes, tensors = two_nodes
    coordinator = nodes[0]

    def get_plans():
        return value(metrics(coordinator), "metaload_rpc_handled_total", default=0, method="GetPlan", code="OK")
    for strategy in ("replicate", "fsdp"):
        before = get_plans()
        results = start_ranks(tmp_path, nodes, ["--strategy", strategy])
        for rc, out, err, report in results:
            assert rc == 0, f"{out}\n{err}"
            check_bytes(report, tensors)
            assert report["fanout_notes"] == [], report["fanout_notes"]
        received = sum(report["fanout_received_bytes"] for _, _, _, report in results)
        assert (received > 0) == (strategy == "replicate"), (strategy, received)
        assert get_plans() - before == 4, strategy


def test_one_node_fans_out_nothing(tmp_path, daemons):
    root, ckpt, tensors = checkpoint_in(tmp_path)
    a = daemons("a", [root], gpus=4)
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    results = start_ranks(tmp_path, [a] * 4, ["--strategy", "replicate"])
    for rc, out, err, report in results:
        assert rc == 0, f"{out}\n{err}"
        check_bytes(report, tensors)
        assert {t["source"] for t in report["tensors"] if not t["source"].startswith("buffer:")} == {"direct"}
        assert report["bytes_read"] == checkpoint_bytes(tensors)
        assert report["fanout_received_bytes"] == report["fanout_sent_bytes"] == 0
        assert report["fanout_notes"] == []


def test_tp_with_two_replicas_reads_every_byte_on_one_node(tmp_path, two_nodes):
    nodes, tensors = two_nodes
    # tp 2 x pp 1 x 2 replicas (one per node), in 1 KiB chunks so that pieces take several
    # collectives.
    results = start_ranks(tmp_path, nodes, ["--strategy", "tp", "--tp", "2", "--pp", "1"],
                          env_of_rank={r: {"METALOAD_FANOUT_TEST_CHUNK_BYTES": "1024"} for r in range(4)})
    reports = check_read_once(results, tensors)
    # A slice of rank 0 comes from rank 2 (its replica) or is read by rank 0; never from rank 1 or 3
    # unless every rank holds it whole (the norms).
    for r in reports:
        for t in r["tensors"]:
            if t["source"].startswith("fanout:rank ") and "slice" in t:
                sender = int(t["source"].split()[-1])
                assert sender % 2 == r["rank"] % 2, (r["rank"], t["name"], t["source"])


def test_a_reader_killed_mid_way_leaves_its_group_to_read_from_storage(tmp_path, two_nodes):
    nodes, tensors = two_nodes
    kill = {"METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS": "3", "METALOAD_FANOUT_TEST_CHUNK_BYTES": "1024"}
    env = {r: {"METALOAD_FANOUT_TEST_CHUNK_BYTES": "1024"} for r in range(4)}
    env[1] = kill
    results = start_ranks(tmp_path, nodes, ["--strategy", "replicate"], env_of_rank=env, timeout_s=8)
    rc1, out1, err1, _ = results[1]
    assert rc1 == -9, f"rank 1 should have been killed by its hook: {rc1}\n{err1}"
    for rank in (0, 2, 3):
        rc, out, err, report = results[rank]
        assert rc == 3, f"rank {rank}: {rc}\n{out}\n{err}"
        # Rank 0 hosts the store and names rank 1 exactly; the others may lose the store first.
        assert ("rank 1 never joined" if rank == 0 else "never joined") in err, err
        check_bytes(report, tensors)  # bit-exact, everything filled
        # What rank 1 should have sent was read from storage: nothing is left unfilled.
        assert report["bytes_read"] + report["fanout_received_bytes"] == checkpoint_bytes(tensors), rank
    # Rank 1 sends only to node b's ranks (its node-mate reads for itself): they finish from storage.
    for rank in (2, 3):
        notes = results[rank][3]["fanout_notes"]
        assert any("read from storage instead" in n for n in notes), (rank, notes)


def test_a_reader_that_hangs_costs_its_neighbours_one_timeout_and_no_bytes(tmp_path, two_nodes):
    # Rank 1 stops for 1.5 x --timeout after its first fan-out chunks, as a hung rank would, then
    # goes on. Rank 2, next in its chains, waits --timeout for a chunk, then gives up: its wait
    # closes every connection of its fan-out (Gloo does so on a timeout), so it and the ranks it
    # talks to read what is left from storage. Every rank ends with the file's bytes, and once
    # rank 1 is back the verification passes (it waits --timeout for each rank, as long again).
    nodes, tensors = two_nodes
    env = {r: {"METALOAD_FANOUT_TEST_CHUNK_BYTES": "1024"} for r in range(4)}
    env[1]["METALOAD_FANOUT_TEST_STALL_AFTER_CHUNKS"] = "3"
    results = start_ranks(tmp_path, nodes, ["--strategy", "replicate"], env_of_rank=env, timeout_s=8)
    assert "stalls after 3 fan-out chunks" in results[1][2], results[1][2]
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank}: {rc}\n{out}\n{err}"
        check_bytes(report, tensors)
        assert report["bytes_read"] + report["fanout_received_bytes"] == checkpoint_bytes(tensors), rank
    notes = results[2][3]["fanout_notes"]
    assert any(n.startswith("fan-out with rank 1 stopped (a receive: Timed out") and n.endswith(
        "read from storage instead") for n in notes), notes


PY_RANK = """
import hashlib, json, sys, torch, torch.distributed as dist, metaload
dist.init_process_group("gloo")
tensors = metaload.load("tiny", daemon=sys.argv[1], strategy="replicate", device="cpu")
r = tensors.report
json.dump({"rank": dist.get_rank(), "bytes_read": r.bytes_read, "received": r.fanout_received_bytes,
           "sent": r.fanout_sent_bytes, "notes": r.fanout_notes, "sources": r.sources,
           "verified": r.verified_tensors,
           "sha": {n: hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
                   for n, t in tensors.items()}}, open(sys.argv[2], "w"))
dist.destroy_process_group()
"""


def test_python_load_fans_out_as_metactl_load_does(tmp_path, two_nodes):
    # metaload.load() is metactl load in the user's process: the same plan, the same fan-out
    # (Gloo groups on the store of the user's own process group), the same bytes.
    import subprocess
    import sys

    from conftest import BUILD_DIR, free_port
    nodes, tensors = two_nodes
    script = tmp_path / "py_rank.py"
    script.write_text(PY_RANK)
    port = free_port()
    env = {**__import__("os").environ, "PYTHONPATH": str(BUILD_DIR / "python"), "OMP_NUM_THREADS": "1",
           "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    procs = [subprocess.Popen([sys.executable, str(script), nodes[r].address, str(tmp_path / f"py{r}.json")],
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r % 2)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(4)]
    outs = [p.communicate(timeout=180) for p in procs]
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r}: {outs[r][1][-3000:]}"
    import json
    results = [json.loads((tmp_path / f"py{r}.json").read_text()) for r in range(4)]
    want = {name: tensor_sha256(t) for name, t in tensors.items()}
    total = checkpoint_bytes(tensors)
    for r in results:
        # Every stored tensor holds the file's bytes (the rest are buffers the plan computes).
        assert {n: r["sha"].get(n) for n in want} == want, f"rank {r['rank']}: bytes differ from the file"
        assert r["notes"] == [], r["notes"]
        assert r["bytes_read"] + r["received"] == total, r
        fanned = {s for s in r["sources"].values() if s.startswith("fanout:rank ")}
        assert fanned and all(NODE_OF_RANK[int(s.split()[-1])] != NODE_OF_RANK[r["rank"]] for s in fanned), r
        assert r["verified"] == 4 * len(r["sha"])  # every rank's tensors, counted on every rank
    # Each byte left storage on one node only: twice in all (two ranks a node read it), as metactl.
    assert sum(r["bytes_read"] for r in results) == 2 * total
    assert sum(r["sent"] for r in results) == sum(r["received"] for r in results) > 0
