#!/usr/bin/env python3
"""Issue 22's cluster-scale simulation: how many bytes each loader reads from storage, and how
long it takes until every rank holds its shards, for regimes larger than the benchmark's one
machine can emulate. Nothing is run: the numbers follow from the model below and from per-byte
host costs measured by bench/run_bench.py (`--bench-json bench.json`), or, without one, from
defaults measured on the benchmark's 2-core VM (the output says which).

    .venv/bin/python bench/simulate.py                          # Llama-3.1-405B, 128 x 8, markdown
    .venv/bin/python bench/simulate.py --bench-json bench.json --json out.json
    .venv/bin/python bench/simulate.py --nodes 16 --replicas 4 --storage-gbps 10 --regimes hsdp
    .venv/bin/python bench/simulate.py --planner                # the real planner: 405B, 671B x 8-128 nodes

--planner [BIN] (default build/tests/bench_plan_scale) runs the real planner and the coordinator's
fan-out assignment (tests/bench/plan_scale_bench.cc) for each model and node count under fsdp, tp
(HSDP-like replicas) and replicate, and prints what they measured (storage bytes, per-rank memory,
plan sizes, the coordinator's assignment and each rank's part of it, bytes over each node's link,
the planner's time and memory) with the time the model below gives for the planned bytes
(docs/performance.md "The real planner at cluster scale").

The model (docs/performance.md "Simulation" states it in prose, with what it gets wrong):
- A checkpoint of C tensor bytes, computed from a Llama config (header bytes ignored). N nodes of
  G ranks (W = N*G), R replicas of an FSDP group of F = W/R ranks (whole nodes each). A rank holds
  C/F bytes (replicate: F = 1, the whole model).
- Shared storage serves S bytes/s in aggregate, each request costs a latency of L; a host has
  `inflight` requests outstanding, so it needs at least requests * L / inflight seconds. With
  the host page cache (default), the ranks of one host read each distinct byte once.
- Each node has one NIC of B bytes/s each way; storage traffic crosses it (network storage).
- Per-byte host costs, per host: bytes read into fresh memory at the pread rate, bytes
  received over the network at the TCP rate, and each loader's whole one-host pipeline (model
  construction, fully_shard, the load) at its measured e2e seconds per byte held.
- A phase takes the max of its storage, NIC and host times (everything overlaps); phases that
  one loader runs one after the other (broadcast's read then send; a copy before loading) add.
Exit status 2 on input that makes no sense (a message says which).
"""
import argparse
import copy
import json
import math
import pathlib
import subprocess
import sys

GB = 1e9
MIB = 2**20
REPO = pathlib.Path(__file__).resolve().parents[1]
PLANNER_DEFAULT = REPO / "build" / "tests" / "bench_plan_scale"

# Measured on the benchmark's machine (2-core AMD EPYC VM, Debian 12): README.md "Performance"
# (2026-11-29) for pread and tcp, issue 22's quiet-machine e2e run (2026-12-01, 1 GiB, 4 CPU ranks,
# Gloo, page cache warm) for the loaders. hf_dist: the middle of its 0.56-1.00 s range.
DEFAULT_COSTS = {
    "pread_gbps": 3.11, "tcp_gbps": 0.70, "e2e_tensor_bytes": 1073819648,
    "e2e_s": {"hf": 1.22, "hf_dist": 0.78, "dcp": 0.94, "broadcast": 2.64, "metaload": 0.70},
}
# bench.json key -> cost (docs/performance.md repeats this).
COST_KEYS = {
    "pread_gbps": ("absolute", "pread", "gb_per_s"),
    "tcp_gbps": ("absolute", "tcp", "gb_per_s"),
    "e2e_tensor_bytes": ("e2e", "data", "tensor_bytes"),
}
E2E_CASE_OF = {"hf": "hf", "hf_dist": "hf_dist", "dcp": "dcp", "broadcast": "broadcast",
               "metaload": "metaload", "metaload_fanout": "metaload"}

LOADERS = {
    "hf": "from_pretrained + fully_shard (every rank reads the whole model)",
    "hf_dist": "from_pretrained(distributed_config) (each rank its shard; replicas re-read)",
    "dcp": "DCP + HuggingFaceStorageReader (each rank its shard; replicas re-read)",
    "broadcast": "broadcast from rank 0 (rank 0 reads, then full tensors to every rank)",
    "metaload": "metaload, no fan-out (each rank its shard; streamed where storage is unseen)",
    "metaload_fanout": "metaload, fan-out (each byte read once, then the replica group's collective)",
}
REGIMES = {
    "one_host": "one host (its G ranks, FSDP over them)",
    "hosts": "N hosts over shared storage (FSDP over all W ranks)",
    "noshared": "N hosts, only node 0 sees the checkpoint (FSDP over all W ranks)",
    "hsdp": "N hosts over shared storage, R replicas x FSDP W/R (HSDP)",
    "replicate": "N hosts over shared storage, every rank a replica of the whole model",
}

# Printed with every table and written into the JSON (docs/performance.md explains each).
ASSUMPTIONS = (
    "checkpoint: tensor bytes of the Llama config, safetensors headers left out",
    "a replica is whole nodes; a rank holds checkpoint / fsdp bytes (replicate: the whole model)",
    "storage: one aggregate bandwidth shared by all hosts, no per-client limit, no metadata cost; its "
    "traffic crosses the node's NIC",
    "latency: a host needs requests x latency / requests in flight; mmap readers wait for one read-ahead "
    "window a fault, one fault in flight a rank; metaload: 16 MiB pieces, 2 a rank (flags change each)",
    "host page cache: the ranks of one host read each distinct byte once (unless --no-host-page-cache)",
    "network: one NIC a node, full duplex; a broadcast or collective crosses each NIC once (pipelined); "
    "inside a node transfers are free",
    "host costs are per host and scale with bytes: pread (read into fresh memory), TCP (received), and "
    "each loader's one-host e2e seconds per byte held, fixed costs included",
    "inside a phase everything overlaps (the max of its terms); a loader's phases add",
    "noshared: peers copy the checkpoint to every host first (--peer-copy), then load it warm; metaload's "
    "metad on node 0 streams; fan-out streams each byte once, then the replica group's collective",
    "not modelled: failures, stragglers, GPU memory, host-to-GPU copies, checksums, congestion",
)


def llama_tensor_bytes(a):
    """Exact tensor bytes of a Llama checkpoint (q, k, v, o, gate, up, down and two norms per
    layer; embeddings, final norm, lm_head unless tied); rotary buffers are not saved."""
    head_dim = a.hidden // a.heads
    per_layer = (2 * a.hidden * a.hidden + 2 * a.hidden * a.kv_heads * head_dim +
                 3 * a.hidden * a.intermediate + 2 * a.hidden)
    params = a.layers * per_layer + a.vocab * a.hidden * (1 if a.tied else 2) + a.hidden
    return params, params * a.dtype_bytes


class Inputs(Exception):
    """Input that makes no sense: exit 2 with this message."""


def positive(name, value, allow_zero=False):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value) or \
            value < 0 or (value == 0 and not allow_zero):
        raise Inputs(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return value


def host_costs(args):
    """Per-byte host costs: flags over bench.json over the defaults; and where each came from."""
    costs = {k: v for k, v in DEFAULT_COSTS.items() if k != "e2e_s"}
    e2e_s = dict(DEFAULT_COSTS["e2e_s"])
    source = {k: "default (measured on the benchmark VM)" for k in [*costs, *(f"e2e_s.{c}" for c in e2e_s)]}
    if args.bench_json:
        try:
            bench = json.loads(pathlib.Path(args.bench_json).read_text())
        except (OSError, ValueError) as e:
            raise Inputs(f"--bench-json {args.bench_json}: {e}") from e
        if not isinstance(bench, dict):
            raise Inputs(f"--bench-json {args.bench_json}: not a JSON object")

        def dig(path):
            node = bench
            for part in path:
                node = node.get(part) if isinstance(node, dict) else None
            return node
        found = {k: (dig(p), ".".join(p)) for k, p in COST_KEYS.items()}
        found.update({f"e2e_s.{c}": (dig(("e2e", "absolute", c, "median_s")), f"e2e.absolute.{c}.median_s")
                      for c in e2e_s})
        for key, (value, path) in found.items():
            if value is None:
                continue
            positive(f"{args.bench_json}: {path}", value)
            if key.startswith("e2e_s."):
                e2e_s[key[6:]] = value
            else:
                costs[key] = value
            source[key] = f"{args.bench_json}: {path}"
    for key, flag in (("pread_gbps", args.pread_gbps), ("tcp_gbps", args.tcp_gbps)):
        if flag is not None:
            costs[key], source[key] = positive(f"--{key.replace('_', '-')}", flag), "flag"
    for item in args.e2e_s or []:
        case, _, seconds = item.partition("=")
        if case not in e2e_s:
            raise Inputs(f"--e2e-s {item!r}: the case must be one of {', '.join(e2e_s)}")
        try:
            e2e_s[case] = positive(f"--e2e-s {case}", float(seconds))
        except ValueError as e:
            raise Inputs(f"--e2e-s {item!r}: not CASE=SECONDS") from e
        source[f"e2e_s.{case}"] = "flag"
    costs["e2e_s_per_byte"] = {c: s / costs["e2e_tensor_bytes"] for c, s in e2e_s.items()}
    costs["e2e_s"] = e2e_s
    return costs, source


class Regime:
    """N nodes of G ranks, R replicas of F = W/R ranks, storage seen by all or by node 0 only."""

    def __init__(self, name, nodes, gpus, replicas, shared):
        self.name, self.nodes, self.gpus, self.replicas, self.shared = name, nodes, gpus, replicas, shared
        self.world = nodes * gpus
        self.fsdp = self.world // replicas


def regimes(args):
    if args.nodes % args.replicas:
        raise Inputs(f"--replicas {args.replicas} does not divide --nodes {args.nodes}: a replica is whole nodes")
    world = args.nodes * args.gpus_per_node
    made = {"one_host": Regime("one_host", 1, args.gpus_per_node, 1, True),
            "hosts": Regime("hosts", args.nodes, args.gpus_per_node, 1, True),
            "noshared": Regime("noshared", args.nodes, args.gpus_per_node, 1, False),
            "hsdp": Regime("hsdp", args.nodes, args.gpus_per_node, args.replicas, True),
            "replicate": Regime("replicate", args.nodes, args.gpus_per_node, world, True)}
    return [made[r] for r in args.regimes]


class Phase:
    """One step every host takes at once: per host, bytes from storage (and its requests), bytes
    put into fresh memory, bytes received and sent over the NIC, and the bytes its ranks hold
    at the end (for the loader's e2e cost; 0 in a step that is not the loader's own load)."""

    def __init__(self, name, nodes):
        self.name = name
        self.storage = [0.0] * nodes
        self.requests = [0.0] * nodes
        self.inflight = [1.0] * nodes
        self.land = [0.0] * nodes
        self.recv = [0.0] * nodes
        self.send = [0.0] * nodes
        self.held = [0.0] * nodes
        self.e2e_case = None

    def read(self, host, nbytes, request_bytes, inflight):
        self.storage[host] += nbytes
        self.land[host] += nbytes
        self.requests[host] += nbytes / request_bytes
        self.inflight[host] = inflight


def phases_for(loader, rg, c, a):
    """The phases of `loader` in regime `rg` for a checkpoint of `c` bytes."""
    n, g, f, r = rg.nodes, rg.gpus, rg.fsdp, rg.replicas
    held = g * c / f                                   # bytes a host's ranks hold, duplicates included
    group_distinct = c * min(g, f) / f                 # what the host holds without duplicates
    distinct = group_distinct if a.host_page_cache else held    # what the host's ranks read
    mmap = (a.mmap_request_kib * 1024, g * a.mmap_inflight_per_rank)
    large = (a.metaload_request_mib * MIB, g * a.metaload_inflight_per_rank)
    phases = []

    def phase(name, e2e_case=None):
        p = Phase(name, n)
        p.e2e_case = e2e_case
        p.held = [held] * n if e2e_case else [0.0] * n
        phases.append(p)
        return p

    if not rg.shared and loader in ("hf", "hf_dist", "dcp"):
        # The checkpoint is first copied to every other host (a chain: each forwards what it
        # got, or a star: node 0 sends every copy), then loaded there with the cache warm.
        p = phase("copy to every host")
        p.read(0, c, *large)
        for h in range(1, n):
            p.recv[h] += c
            if a.peer_copy == "chain" and h < n - 1:
                p.send[h] += c
        p.send[0] += c * (n - 1 if a.peer_copy == "star" else min(1, n - 1))
        phase("load from the local copy", E2E_CASE_OF[loader])
        return phases
    if loader == "broadcast":
        p = phase("rank 0 reads the checkpoint")
        p.read(0, c, mmap[0], a.mmap_inflight_per_rank)
        p = phase("broadcast full tensors", "broadcast")
        for h in range(n):                        # a pipelined broadcast crosses each NIC once
            p.recv[h] += c if h else 0.0
            p.send[h] += c if h < n - 1 else 0.0
        return phases
    p = phase("load", E2E_CASE_OF[loader])
    if loader == "hf":
        for h in range(n):
            p.read(h, c if a.host_page_cache else g * c, *mmap)
    elif loader in ("hf_dist", "dcp"):
        threads = a.dcp_thread_count if loader == "dcp" else 1   # HuggingFaceStorageReader(thread_count=)
        for h in range(n):
            p.read(h, distinct, mmap[0], mmap[1] * threads)
    elif loader == "metaload" and rg.shared:
        for h in range(n):
            p.read(h, distinct, *large)
    elif loader == "metaload":                    # node 0's daemon streams every other host's bytes
        p.read(0, distinct if n == 1 else c * (1 if a.host_page_cache else r), *large)
        for h in range(1, n):
            p.recv[h] += distinct
            p.send[0] += distinct
    else:                                         # fan-out: C/N read per host, the rest from the group
        for h in range(n):
            if rg.shared:
                p.read(h, c / n, *large)
            else:
                p.recv[h] += c / n if h else 0.0
                p.send[0] += c / n if h else 0.0
            p.recv[h] += group_distinct - c / n
            p.send[h] += group_distinct - c / n
        if not rg.shared:
            p.read(0, c, *large)
    return phases


def phase_times(p, rg, costs, a):
    """(seconds, {term: seconds}) of one phase: the max of its storage bandwidth, request latency,
    NIC and host terms."""
    storage_bps, nic_bps = a.storage_gbps * GB, a.nic_gbit * GB / 8
    latency = max(p.requests[h] * a.storage_latency_ms / 1000 / p.inflight[h] for h in range(rg.nodes))
    spb = costs["e2e_s_per_byte"][p.e2e_case] if p.e2e_case else 0.0
    terms = {
        "storage": sum(p.storage) / storage_bps,
        "latency": latency,
        "nic": max(max(p.storage[h] + p.recv[h], p.send[h]) / nic_bps for h in range(rg.nodes)),
        "host": 0.0 if not a.host_costs else
        max(max(p.land[h] / (costs["pread_gbps"] * GB), p.recv[h] / (costs["tcp_gbps"] * GB), p.held[h] * spb)
            for h in range(rg.nodes)),
    }
    return max(terms.values()), terms


def simulate(a):
    params, c = llama_tensor_bytes(a)
    costs, source = host_costs(a)
    rows = []
    for rg in regimes(a):
        for loader in a.loaders:
            phases = phases_for(loader, rg, c, a)
            timed = [(p, *phase_times(p, rg, costs, a)) for p in phases]
            storage = sum(sum(p.storage) for p in phases)
            rows.append({
                "regime": rg.name, "loader": loader, "nodes": rg.nodes, "ranks": rg.world,
                "replicas": rg.replicas, "fsdp": rg.fsdp, "rank_bytes": c / rg.fsdp,
                "storage_bytes": storage, "storage_over_checkpoint": storage / c,
                "seconds": sum(t for _, t, _ in timed),
                "bound": " + ".join(max(terms, key=terms.get) for _, _, terms in timed),
                "phases": [{"name": p.name, "seconds": t, "terms_s": terms} for p, t, terms in timed],
            })
    fanout = {r["regime"]: r["seconds"] for r in rows if r["loader"] == "metaload_fanout"}
    for row in rows:
        row["over_fanout"] = row["seconds"] / fanout[row["regime"]] if row["regime"] in fanout else None
    return {"model": {"params": params, "tensor_bytes": c, "layers": a.layers, "hidden": a.hidden,
                      "intermediate": a.intermediate, "heads": a.heads, "kv_heads": a.kv_heads,
                      "vocab": a.vocab, "tied": a.tied, "dtype_bytes": a.dtype_bytes},
            "cluster": {"nodes": a.nodes, "gpus_per_node": a.gpus_per_node, "replicas": a.replicas,
                        "storage_gbps": a.storage_gbps, "storage_latency_ms": a.storage_latency_ms,
                        "nic_gbit": a.nic_gbit, "host_page_cache": a.host_page_cache,
                        "peer_copy": a.peer_copy},
            "io": {"metaload_request_mib": a.metaload_request_mib,
                   "metaload_inflight_per_rank": a.metaload_inflight_per_rank,
                   "mmap_request_kib": a.mmap_request_kib, "mmap_inflight_per_rank": a.mmap_inflight_per_rank,
                   "dcp_thread_count": a.dcp_thread_count},
            "host_costs": {k: v for k, v in costs.items() if k != "e2e_s_per_byte"}, "host_cost_sources": source,
            "host_costs_used": a.host_costs, "assumptions": list(ASSUMPTIONS),
            "rows": rows}


def markdown(result):
    m, cl, hc = result["model"], result["cluster"], result["host_costs"]
    c = m["tensor_bytes"]
    lines = [
        f"Checkpoint: {m['params']:,} parameters, {c:,} tensor bytes ({c / 1e12:.3f} TB); "
        f"{cl['nodes']} nodes x {cl['gpus_per_node']} ranks, {cl['replicas']} replicas (hsdp); storage "
        f"{cl['storage_gbps']:g} GB/s aggregate, {cl['storage_latency_ms']:g} ms a request; NIC "
        f"{cl['nic_gbit']:g} Gb/s a node; host page cache shared by a host's ranks: "
        f"{'yes' if cl['host_page_cache'] else 'no'}; peers' copy: {cl['peer_copy']}.",
        ("Host costs: left out (--no-host-costs). " if not result["host_costs_used"] else "") +
        f"Host costs: pread {hc['pread_gbps']:g} GB/s, TCP {hc['tcp_gbps']:g} GB/s, e2e s per "
        f"{hc['e2e_tensor_bytes']:,} bytes: " + ", ".join(f"{k} {v:g}" for k, v in hc["e2e_s"].items()) + ".",
        "Sources: " + "; ".join(f"{k}: {v}" for k, v in result["host_cost_sources"].items()) + ".",
        "",
        "| regime | loader | rank GB | storage GB | storage / ckpt | time to loaded s | x fan-out | bound |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        over = "" if r["over_fanout"] is None else f"{r['over_fanout']:.2f}"
        lines.append(f"| {r['regime']} | {r['loader']} | {r['rank_bytes'] / 1e9:.1f} | "
                     f"{r['storage_bytes'] / 1e9:,.1f} | {r['storage_over_checkpoint']:.2f} | {r['seconds']:.1f} | "
                     f"{over} | {r['bound']} |")
    lines += ["", "Regimes: " + "; ".join(f"{k}: {v}" for k, v in REGIMES.items()) + ".",
              "Loaders: " + "; ".join(f"{k}: {v}" for k, v in LOADERS.items()) + ".",
              "rank GB: what one rank holds. x fan-out: time / metaload_fanout's in the same regime. bound: the "
              "term that sets each phase's time (storage: aggregate bandwidth; latency: a host's requests x "
              "latency / in flight; nic: the busiest node's NIC; host: the per-byte host costs).",
              "", "Assumptions:", *(f"- {x}" for x in result["assumptions"])]
    return "\n".join(lines)


# The planner's strategies as the model's regimes: fsdp over every rank is `hosts`; tp 8 x pp P with
# replicas of P nodes is `hsdp` (R = its replicas); every rank a replica is `replicate`.
REGIME_OF_STRATEGY = {"fsdp": "hosts", "tp": "hsdp", "replicate": "replicate"}
PLANNER_ASSUMPTIONS = (
    "checkpoints: a Llama-3.1-405B- and a DeepSeek-V3-671B-shaped skeleton (tests/bench/llama_405b.cc, "
    "deepseek_v3.cc), laid out in ~4.3 GB shards as the releases are; nothing is read",
    "real: MakeCompactPlan, each rank's GetPlan answer as the coordinator serializes it (RankAnswerBytes), "
    "the coordinator's fan-out (PlanFanout: AssignFanout on the compact plan once per plan, FanoutScope::"
    "kAcrossNodes, every node serving every file) and each rank's part of it (PartOf, FanoutPartToProto)",
    "node links: a piece enters each node with a receiving rank once and travels a chain from its reader's node "
    "(NCCL's ring); transfers inside a node cross no link",
    "time: the model above (storage, latency, NIC, host terms) on the planned bytes per node: storage bytes its "
    "ranks read (node-mates of a reader read from its page cache), bytes in and out over its link, the bytes its "
    "ranks hold (the loader's e2e cost); the model's own row assumes C / N read and the rest received per node",
    "replicate is planned on 4 TiB GPUs (no GPU holds the model): its rows show how bytes scale",
)


class PlannerMissing(Exception):
    """The planner benchmark is not built: exit 2 with this message."""


class PlannerFailed(Exception):
    """The planner benchmark failed at a point (a plan that does not fit, say): exit 1 with its words."""


def run_planner(a):
    """Runs the planner benchmark; its JSON objects, one a point."""
    binary = pathlib.Path(a.planner) if a.planner else PLANNER_DEFAULT
    if not binary.is_file():
        raise PlannerMissing(f"--planner: no planner benchmark at {binary} (build it: ninja -C build "
                             "bench_plan_scale, or give its path: --planner BIN)")
    cmd = [str(binary), "--models", a.planner_models, "--nodes", a.planner_nodes, "--strategies",
           a.planner_strategies, "--gpus-per-node", str(a.gpus_per_node), "--pp", str(a.planner_pp),
           "--max-assign-gib", str(a.planner_max_assign_gib), *(["--fp8"] if a.planner_fp8 else [])]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode == 2:
        raise Inputs(f"{binary}: {r.stderr.strip()}")
    if r.returncode != 0:
        raise PlannerFailed(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()], cmd


def planner_time(point, a, costs):
    """Seconds to loaded for one planned point: the model's own fan-out row for its regime, the same
    model fed the planned bytes per node, and DCP's (each replica reads its shards) for contrast.
    None where the fan-out was not assigned (its bytes per node are unknown)."""
    if not point["fanout"]["run"]:
        return None
    n, g, c = point["nodes"], point["gpus_per_node"], point["checkpoint_bytes"]
    replicas = {"fsdp": 1, "tp": point["replicas"], "replicate": point["world"]}[point["strategy"]]
    regime = REGIME_OF_STRATEGY[point["strategy"]]
    rg = Regime(regime, n, g, replicas, True)
    m = copy.copy(a)
    m.nodes, m.replicas = n, min(replicas, n * g)
    fan = point["fanout"]
    out = {"regime": regime, "replicas": replicas}
    # The fan-out load as one phase: per node, what the planner says it reads, receives, sends, holds.
    p = Phase("load (planned bytes)", n)
    p.e2e_case = "metaload"
    p.held = [float(b) for b in point["held_bytes_per_node"]]
    large = (m.metaload_request_mib * MIB, g * m.metaload_inflight_per_rank)
    for h in range(n):
        p.read(h, float(fan["storage_bytes_per_node"][h]), *large)
        p.recv[h] = float(fan["recv_bytes_per_node"][h])
        p.send[h] = float(fan["send_bytes_per_node"][h])
    out.update({"planned_storage_bytes_node_max": max(fan["storage_bytes_per_node"]),
                "planned_recv_bytes_node_max": max(fan["recv_bytes_per_node"])})
    # With the host costs (unless --no-host-costs) and without: the two ends a real cluster lies between.
    for key, with_host in (("", a.host_costs), ("_no_host", False)):
        m.host_costs = with_host
        seconds, terms = phase_times(p, rg, costs, m)
        out.update({f"planned{key}_s": seconds, f"planned{key}_bound": max(terms, key=terms.get),
                    f"planned{key}_terms_s": terms})
        for loader in ("metaload_fanout", "dcp"):
            timed = [phase_times(q, rg, costs, m) for q in phases_for(loader, rg, c, m)]
            out[f"model_{loader}{key}_s"] = sum(t for t, _ in timed)
            out[f"model_{loader}{key}_bound"] = " + ".join(max(terms, key=terms.get) for _, terms in timed)
    return out


def planner_result(a):
    costs, source = host_costs(a)
    points, cmd = run_planner(a)
    for point in points:
        point["time_model"] = planner_time(point, a, costs)
    return {"planner": {"command": cmd, "points": points,
                        "cluster": {"storage_gbps": a.storage_gbps, "storage_latency_ms": a.storage_latency_ms,
                                    "nic_gbit": a.nic_gbit, "host_page_cache": a.host_page_cache},
                        "host_costs": {k: v for k, v in costs.items() if k != "e2e_s_per_byte"},
                        "host_cost_sources": source, "host_costs_used": a.host_costs,
                        "assumptions": list(PLANNER_ASSUMPTIONS) + [
                            x for x in ASSUMPTIONS if not x.startswith(("checkpoint:", "a replica is", "noshared:"))]}}


def planner_markdown(result):
    r = result["planner"]
    mib, kib = 2**20, 2**10
    lines = [
        "Measured by the real planner (`" + " ".join(pathlib.Path(x).name if i == 0 else x
                                                      for i, x in enumerate(r["command"])) + "`):",
        "",
        "| model | nodes x GPUs | strategy | ckpt GB | storage / ckpt | held GB / rank | items / rank | "
        "answer KiB / rank | ranks asking | assign ms | assignment MiB: held / peak | part KiB / rank: wire / "
        "memory | neighbours: most a rank talks to (holder sets: a rank's / all) | sent MiB: answers + parts | before: plan MiB a rank fetched, wire / "
        "expanded | link GB in / out a node | plan ms | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in r["points"]:
        f, b = p["fanout"], p["before"]
        before = (f"{b['whole_plan_wire_bytes'] / mib:,.0f} / ~{b['expanded_plan_bytes_estimate'] / mib:,.0f}"
                  if b["ranks_fetching_whole_plan"] else "— (none)")
        if f["run"]:
            part = f["part"]
            over = "" if f["rank_fanout_state_ok"] else " (> 64 MiB)"
            cells = [f"{f['storage_over_checkpoint']:.3f}", f"{f['assign_ms']:,.0f}",
                     f"{f['held_bytes'] / mib:,.1f} / {f['assign_peak_rss_bytes'] / mib:,.0f}",
                     f"{part['wire_bytes']['max'] / kib:,.0f} / {part['memory_bytes']['max'] / kib:,.0f}{over}",
                     f"{part['neighbours']['max']:,} ({part['groups']['max']:,} / {f['groups']:,})",
                     f"{p['answer_bytes_all_ranks'] / mib:,.0f} + {part['wire_bytes_to_ranks_asking'] / mib:,.0f}",
                     f"{f['recv_bytes_node']['max'] / GB:,.0f} / {f['send_bytes_node']['max'] / GB:,.0f}"]
        else:
            cells = ["—", f"not run (~{f['assign_peak_estimate_bytes'] / mib:,.0f} MiB)", "—", "—", "—",
                     f"{p['answer_bytes_all_ranks'] / mib:,.0f} + —", "—"]
        replicas = "" if p["replicas"] in (1, p["world"]) else f" x {p['replicas']} replicas"
        lines.append(
            f"| {p['model']} | {p['nodes']} x {p['gpus_per_node']} | {p['label']}{replicas} | "
            f"{p['checkpoint_bytes'] / GB:,.0f} | {cells[0]} | {p['held_bytes_per_rank']['max'] / GB:,.2f} | "
            f"{p['plan']['refs_per_rank']['max']:,} | {p['answer_bytes_per_rank']['max'] / kib:,.0f} | "
            f"{p['ranks_asking_fanout']:,} | " + " | ".join(cells[1:6]) + f" | {before} | {cells[6]} | "
            f"{p['plan']['wall_ms']:,.0f} | {p['peak_rss_bytes'] / mib:,.0f} |")
    hc = r["host_costs"]
    cl = r["cluster"]
    lines += [
        "",
        "storage / ckpt: the bytes all ranks read from storage over the checkpoint's, from the coordinator's "
        "assignment. held: the most one rank holds. answer: the largest rank's GetPlan answer as the coordinator "
        "serializes it. ranks asking: those whose plan may share bytes, which ask the coordinator for their part "
        "(fsdp shares nothing: none ask, and the coordinator assigns nothing). assign: the coordinator's "
        "AssignFanout on the compact plan, once per plan (not run: its estimated peak is over "
        "--planner-max-assign-gib); held: the FanoutAssignment it keeps with the plan; peak: the RSS it added. "
        "part: the largest rank's part (PartOf) on the wire (in its GetPlan answer) and in memory: a rank's whole "
        "fan-out state, which the target keeps under 64 MiB. neighbours: the most ranks one rank sends to or "
        "receives from as the pieces travel down their chains (one group of the job, pairs connected on first use: "
        "client/load/fanout_chain.h); holder sets: the most sets of holders one rank is in (each was a Gloo group of "
        "its own before the chains), and all of the assignment's. sent: what the coordinator sends all ranks, answers and the parts of the ranks asking. "
        "before: the whole plan each asking rank fetched, and assigned itself, before the coordinator assigned "
        "(on the wire about the sum of every rank's answer; expanded estimated from rank 0's). link: the busiest "
        "node's bytes in and out.",
        "",
        f"Time to loaded (s), the model above with storage {cl['storage_gbps']:g} GB/s and "
        f"{cl['storage_latency_ms']:g} ms a request, NIC {cl['nic_gbit']:g} Gb/s, host costs "
        + ("left out" if not r["host_costs_used"] else
           f"pread {hc['pread_gbps']:g} GB/s, TCP {hc['tcp_gbps']:g} GB/s, metaload e2e "
           f"{hc['e2e_s']['metaload']:g} s per {hc['e2e_tensor_bytes']:,} bytes") + ":",
        "",
        "| model | nodes | strategy | regime (replicas) | storage GB, busiest node | in GB, busiest node | "
        "planned bytes s | model's fan-out s | DCP s (model) | no host costs: planned s | model's fan-out s | "
        "DCP s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in r["points"]:
        t = p["time_model"]
        if t is None:
            lines.append(f"| {p['model']} | {p['nodes']} | {p['strategy']} | — | fan-out not assigned | — |" +
                         " — |" * 6)
            continue
        cells = [f"{t[f'{x}_s']:,.1f} ({t[f'{x}_bound']})" for x in (
            "planned", "model_metaload_fanout", "model_dcp", "planned_no_host", "model_metaload_fanout_no_host",
            "model_dcp_no_host")]
        lines.append(
            f"| {p['model']} | {p['nodes']} | {p['strategy']} | {t['regime']} ({t['replicas']}) | "
            f"{t['planned_storage_bytes_node_max'] / GB:,.1f} | {t['planned_recv_bytes_node_max'] / GB:,.1f} | "
            + " | ".join(cells) + " |")
    lines += ["", "Sources: " + "; ".join(f"{k}: {v}" for k, v in r["host_cost_sources"].items()) + ".",
              "", "Assumptions:", *(f"- {x}" for x in r["assumptions"])]
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    model = p.add_argument_group("model (default: Llama-3.1-405B, BF16)")
    for flag, default in (("layers", 126), ("hidden", 16384), ("intermediate", 53248), ("heads", 128),
                          ("kv-heads", 8), ("vocab", 128256), ("dtype-bytes", 2)):
        model.add_argument(f"--{flag}", type=int, default=default)
    model.add_argument("--tied", action="store_true", help="tied embeddings (no lm_head in the checkpoint)")
    cluster = p.add_argument_group("cluster")
    cluster.add_argument("--nodes", type=int, default=128)
    cluster.add_argument("--gpus-per-node", type=int, default=8, help="ranks per node")
    cluster.add_argument("--replicas", type=int, default=16, help="HSDP replicas (the hsdp regime); divides --nodes")
    cluster.add_argument("--storage-gbps", type=float, default=50.0, help="shared storage, GB/s aggregate")
    cluster.add_argument("--storage-latency-ms", type=float, default=1.0, help="per request")
    cluster.add_argument("--nic-gbit", type=float, default=400.0, help="NIC per node, Gb/s each way")
    cluster.add_argument("--no-host-page-cache", dest="host_page_cache", action="store_false",
                         help="ranks of one host do not share what another read (e.g. a FUSE mount with direct_io)")
    cluster.add_argument("--peer-copy", choices=("chain", "star"), default="chain",
                         help="noshared: how peers copy the checkpoint to every host (chain: each host forwards)")
    io = p.add_argument_group("requests")
    io.add_argument("--metaload-request-mib", type=float, default=16.0, help="metaload's pread piece")
    io.add_argument("--metaload-inflight-per-rank", type=int, default=2, help="metaload's read threads")
    io.add_argument("--mmap-request-kib", type=float, default=128.0, help="readahead of mmap'd reads")
    io.add_argument("--mmap-inflight-per-rank", type=int, default=1, help="a faulting thread waits for each")
    io.add_argument("--dcp-thread-count", type=int, default=1,
                    help="HuggingFaceStorageReader's thread_count (its default: 1): mmap readers a rank")
    costs = p.add_argument_group("per-byte host costs (default: bench.json, else measured defaults)")
    costs.add_argument("--bench-json", help="bench.json written by bench/run_bench.py")
    costs.add_argument("--pread-gbps", type=float, help="bytes into fresh memory on a host, GB/s")
    costs.add_argument("--tcp-gbps", type=float, help="bytes received over the network on a host, GB/s")
    costs.add_argument("--e2e-s", action="append", metavar="CASE=SECONDS",
                       help="a loader's one-host e2e seconds for the e2e checkpoint (repeatable)")
    costs.add_argument("--no-host-costs", dest="host_costs", action="store_false",
                       help="leave the host term out: the bound when hosts keep up with storage and NICs")
    p.add_argument("--regimes", default=",".join(REGIMES), help=f"comma-separated: {', '.join(REGIMES)}")
    p.add_argument("--loaders", default=",".join(LOADERS), help=f"comma-separated: {', '.join(LOADERS)}")
    planner = p.add_argument_group("the real planner (--planner)")
    planner.add_argument("--planner", nargs="?", const="", default=None, metavar="BIN",
                         help=f"run the planner benchmark (default {PLANNER_DEFAULT.relative_to(REPO)}) instead "
                              "of the Llama-config model alone")
    planner.add_argument("--planner-models", default="405b,671b", help="405b, 671b (comma-separated)")
    planner.add_argument("--planner-nodes", default="8,32,128", help="node counts (comma-separated)")
    planner.add_argument("--planner-strategies", default="fsdp,tp,replicate", help="fsdp, tp, replicate")
    planner.add_argument("--planner-pp", type=int, default=4, help="tp's pipeline stages: a replica is PP nodes")
    planner.add_argument("--planner-fp8", action="store_true", help="671b as released: FP8 codes and scales")
    planner.add_argument("--planner-max-assign-gib", type=float, default=8.0,
                         help="run the coordinator's AssignFanout only where its estimated peak fits this")
    p.add_argument("--json", metavar="PATH", help="also write the result as JSON ('-': stdout, no table)")
    a = p.parse_args(argv)
    a.regimes, a.loaders = a.regimes.split(","), a.loaders.split(",")
    try:
        for name, known in (("regimes", REGIMES), ("loaders", LOADERS)):
            unknown = [x for x in getattr(a, name) if x not in known]
            if unknown:
                raise Inputs(f"--{name}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
        for flag in ("layers", "hidden", "intermediate", "heads", "kv_heads", "vocab", "dtype_bytes", "nodes",
                     "gpus_per_node", "replicas", "storage_gbps", "nic_gbit", "metaload_request_mib",
                     "metaload_inflight_per_rank", "mmap_request_kib", "mmap_inflight_per_rank", "dcp_thread_count"):
            positive(f"--{flag.replace('_', '-')}", getattr(a, flag))
        positive("--storage-latency-ms", a.storage_latency_ms, allow_zero=True)
        if a.hidden % a.heads or a.heads % a.kv_heads:
            raise Inputs(f"--heads {a.heads} must divide --hidden {a.hidden}, --kv-heads {a.kv_heads} --heads")
    except Inputs as e:
        p.error(str(e))
    return p, a


def main(argv=None):
    parser, args = parse_args(argv)
    try:
        result = simulate(args) if args.planner is None else planner_result(args)
    except Inputs as e:
        parser.error(str(e))
    except PlannerMissing as e:
        print(f"simulate.py: {e}", file=sys.stderr)
        return 2
    except PlannerFailed as e:
        print(f"simulate.py: {e}", file=sys.stderr)
        return 1
    if args.json == "-":
        print(json.dumps(result, indent=1))
        return 0
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result) if args.planner is None else planner_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
