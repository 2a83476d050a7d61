"""The results of bench/run_bench.py: the issue's keys (ratios measured in the same run)
with their targets and verdicts, the absolute numbers beside them, and the printed table.
`summarize` reads the samples that Bench.run_rounds collected: per measurement, one dict a
round with at least "seconds" and "bytes" (rank scenarios add "ranks" and daemon figures).
"""
import statistics

GIB = 2**30

# The table: key -> (comparison, target). EXTRA_KEYS are reported beside them.
TARGETS = {
    "direct_vs_cat": (">=", 0.8),
    "direct_4ranks_vs_cat": (">=", 0.8),
    "stream_vs_tcp": (">=", 0.9),
    "stream_4ranks_vs_tcp": (">=", 0.9),
    "vs_torch_load": (">=", 3.0),
    "vs_safetensors": (">=", 3.0),
    "vs_transformers": (">=", 3.0),
    "rank_rss_growth_over_shard": ("<=", 1.1),
    "daemon_peak_rss_mib": ("<=", 256.0),
    "planner_405b_1024_ms": ("<=", 100.0),
    "getplan_1024_ranks_s": ("<=", 2.0),
    "coordinator_peak_rss_mib_1024": ("<=", 256.0),
}
EXTRA_KEYS = {
    "vs_safetensors_pread": "vs load_file(backend=\"pread\"): bytes copied into owned memory, unlike the "
                            "default mmap backend whose touched pages stay page-cache mappings",
    "stream_4ranks_1daemon_vs_tcp": "four ranks streaming from one daemon (the daemon_peak_rss_mib run)",
    "direct_4ranks_vs_cat_by_max_rank": "aggregate as bytes / slowest rank's seconds, ignoring that ranks "
                                        "start at different times and may not overlap",
    "stream_4ranks_vs_tcp_by_max_rank": "the same for stream_4",
    "direct_vs_pread_fresh": "one rank direct vs bench_pread_baseline (preads into fresh memory, no loader)",
    "direct_4ranks_vs_pread_fresh": "four ranks direct (aggregate) vs the same",
}

# How each number was taken, written into bench.json beside them.
NOTES = {
    "metaload_seconds": "a rank's report \"seconds\": plan received -> every byte in its tensors; process start, "
                        "LibTorch loading, the plan request, the report's sha256 and verification are outside it "
                        "(samples[*].ranks[*].phases_s has them)",
    "aggregate": "four ranks: tensor bytes / (first rank's load start .. last rank's load end)",
    "python_loaders_seconds": "in-process, imports before the clock, from just before the call until every page "
                              "of every tensor was read (--touch sum: every byte); a fresh process each",
    "memory_mapped_loaders": "safetensors' default mmap backend and transformers 5 return tensors backed by the "
                             "page cache: touched, they are resident but no byte was copied into memory the "
                             "process owns (absolute[*].result_memory); vs_safetensors_pread is the owned case",
    "cat": "cat SHARDS > /dev/null: 128 KiB reads into one reused buffer",
    "pread": "bench_pread_baseline: 16 MiB preads from 2 threads into fresh anonymous memory, nothing else: "
             "the limit of loading into memory a process owns (cat never pays for fresh pages)",
    "tcp": "bench_tcp_baseline: 1 MiB preads sent over one loopback connection, received into fresh memory",
    "rank_rss_growth_over_shard": "max over the ranks of the four-rank runs (direct and stream) of the median "
                                  "(rss_peak_bytes - rss_before_bytes) / bytes_read",
    "daemon_peak_rss_mib": "the daemon serving all four streaming ranks of stream_4_1d: max of VmRSS sampled "
                           "every 10 ms and VmHWM",
    "getplan_1024_ranks_s": "bench_getplan_1024: 1,024 GetPlan calls for their own part of a Llama-3.1-405B-shaped "
                            "plan, all in flight at once, half through each of two node agents, to a coordinator "
                            "of 128 members x 8 GPUs; first request -> last rank holding its part, the slower of "
                            "tp 8 x pp 16 and fsdp (every process on this one machine)",
    "coordinator_peak_rss_mib_1024": "the coordinator's VmHWM after both strategies of bench_getplan_1024",
}

LOADERS = ("torch_load", "safetensors", "safetensors_pread", "transformers")
ORDER = ("cat", "pread", "tcp", "direct_1", "direct_4", "stream_1", "stream_4", "stream_4_1d", *LOADERS)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def spread(values):
    return [min(values), max(values)] if values else None


def summarize(samples):
    """The issue's keys, the absolute numbers beside them, and pass/fail per key."""
    s = samples
    med = lambda name, key="seconds": median([x[key] for x in s[name]])  # noqa: E731
    gbps = lambda name, key="seconds": (s[name][0]["bytes"] / med(name, key) / 1e9) if s[name] else None  # noqa: E731
    ratio = lambda a, b: a / b if a is not None and b else None  # noqa: E731

    absolute = {}
    for name in ORDER:
        if not s[name]:
            continue
        seconds = [x["seconds"] for x in s[name]]
        absolute[name] = {"median_s": med(name), "min_max_s": spread(seconds), "gb_per_s": gbps(name),
                          "bytes": s[name][0]["bytes"]}
        if "max_rank_seconds" in s[name][0]:
            absolute[name]["seconds_are"] = s[name][0]["seconds_are"]
            absolute[name]["median_max_rank_s"] = med(name, "max_rank_seconds")
        if "result_memory" in s[name][0]:
            absolute[name]["result_memory"] = s[name][0]["result_memory"]
    single = med("direct_1") if s["direct_1"] else None
    keys = {
        "direct_vs_cat": ratio(gbps("direct_1"), gbps("cat")),
        "direct_4ranks_vs_cat": ratio(gbps("direct_4"), gbps("cat")),
        "direct_vs_pread_fresh": ratio(gbps("direct_1"), gbps("pread")),
        "direct_4ranks_vs_pread_fresh": ratio(gbps("direct_4"), gbps("pread")),
        "stream_vs_tcp": ratio(gbps("stream_1"), gbps("tcp")),
        "stream_4ranks_vs_tcp": ratio(gbps("stream_4"), gbps("tcp")),
        "stream_4ranks_1daemon_vs_tcp": ratio(gbps("stream_4_1d"), gbps("tcp")),
        "direct_4ranks_vs_cat_by_max_rank": ratio(gbps("direct_4", "max_rank_seconds"), gbps("cat")),
        "stream_4ranks_vs_tcp_by_max_rank": ratio(gbps("stream_4", "max_rank_seconds"), gbps("tcp")),
    }
    for loader in LOADERS:
        keys[f"vs_{loader}"] = ratio(med(loader), single) if s[loader] else None
    growth = {}
    for scenario in ("direct_4", "stream_4", "stream_4_1d"):
        for rank in range(4):
            per_run = [(x["ranks"][rank]["rss_peak_bytes"] - x["ranks"][rank]["rss_before_bytes"]) /
                       x["ranks"][rank]["bytes"] for x in s[scenario]]
            if per_run:
                growth[f"{scenario}/rank{rank}"] = median(per_run)
    keys["rank_rss_growth_over_shard"] = max(growth.values()) if growth else None
    peaks = [max(x["daemon_peak_rss_kib_polled"], x["daemon_vmhwm_kib"]) for x in s["stream_4_1d"]]
    keys["daemon_peak_rss_mib"] = max(peaks) / 1024 if peaks else None
    return keys, absolute, growth


def verdicts(keys, targets=TARGETS):
    out = {}
    for key, (op, target) in targets.items():
        value = keys.get(key)
        passed = None if value is None else (value >= target if op == ">=" else value <= target)
        out[key] = {"value": value, "target": f"{op} {target:g}", "pass": passed}
    return out


def print_table(result):
    m, data = result["machine"], result["data"]
    print(f"\nmetaload benchmark: {data['tensor_bytes'] / GIB:.2f} GiB Llama-shaped bf16 checkpoint "
          f"({data['dims']['layers']} layers, hidden {data['dims']['hidden']}, {data['shards']} shards), "
          f"median of {result['repeats']} rounds")
    print(f"machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB memory, Linux {m['kernel']}, "
          f"THP {m['transparent_hugepage']}")
    print(f"sharing: load average {m['load_average_at_start'][0]:.1f} at start, "
          f"{result['load_average_at_end'][0]:.1f} at end; other processes used "
          f"{result['other_processes_cpu_s']:.0f} of the {result['machine_cpu_capacity_s']:.0f} CPU-seconds")
    labels = {"cat": "cat shards > /dev/null", "pread": "pread into fresh memory, 2 threads",
              "tcp": "TCP loopback, 1 connection",
              "direct_1": "metaload direct, 1 rank", "direct_4": "metaload direct, 4 ranks (aggregate*)",
              "stream_1": "metaload stream, 1 rank / 1 daemon",
              "stream_4": "metaload stream, 4 ranks / 2 daemons (agg*)",
              "stream_4_1d": "metaload stream, 4 ranks / 1 daemon (agg*)",
              "torch_load": "torch.load(.bin)", "safetensors": "safetensors load_file (mmap)",
              "safetensors_pread": "safetensors load_file(backend=pread)",
              "transformers": "transformers from_pretrained"}
    print(f"\n  {'measurement':<44} {'median s':>9} {'min-max s':>15} {'GB/s':>7}  result memory")
    for name, a in result["absolute"].items():
        lo, hi = a["min_max_s"]
        memory = a.get("result_memory", "owned" if name not in ("cat", "pread", "tcp") else "")
        print(f"  {labels[name]:<44} {a['median_s']:9.3f} {lo:7.3f}-{hi:<7.3f} {a['gb_per_s']:7.2f}  {memory}")
    print("  * bytes / (first rank's load start .. last rank's load end)")
    print(f"  Python loaders: timed until {'one byte of every page' if result['python_loaders_touch'] == 'page' else 'every byte'}"
          f" of every tensor was read (--touch {result['python_loaders_touch']})")
    print_verdicts(result["targets"])
    for key in EXTRA_KEYS:
        value = "n/a" if result.get(key) is None else f"{result[key]:.3g}"
        print(f"  {key:<34} {value:>9}  (extra)")


# ---- the end-to-end FSDP2 case (bench/e2e.py, `--only e2e`) -------------------------------------
E2E_TARGETS = {
    "e2e_fsdp_vs_hf": (">=", 1.5),  # issue 22's targets (issue 5 asked 3 and 2)
    "e2e_fsdp_vs_dcp": (">=", 1.2),
    "e2e_fsdp_vs_broadcast": (">=", 2.0),
    "e2e_fsdp_vs_hf_dist": (">=", 1.2),
    "e2e_fsdp_vs_limit": (">=", 0.8),
    "e2e_onehost_vs_runai": (">=", 1.0),  # issue 39: the Run:ai Model Streamer, the faster of its two modes
    "e2e_bytes_read_over_checkpoint": ("<=", 1.05),
    "e2e_rank_peak_rss_over_shard": ("<=", 1.2),
}
E2E_LABELS = {
    "hf": "from_pretrained + fully_shard (every rank)",
    "hf_dist": "from_pretrained(distributed_config=DistributedConfig(fsdp_size))",
    "dcp": "meta + fully_shard + dcp.load(HuggingFaceStorageReader)",
    "dcp_threads": "the same, HuggingFaceStorageReader(thread_count=shard files)",
    "broadcast": "meta + fully_shard + set_model_state_dict(broadcast_from_rank0)",
    "runai": "meta + fully_shard + Run:ai SafetensorsStreamer, every rank",
    "runai_dist": "the same, its distributed mode (RUNAI_STREAMER_DIST=1)",
    "fastsafetensors": "meta + fully_shard + fastsafetensors get_sharded (O_DIRECT)",
    "fastsafetensors_buffered": "the same, FASTSAFETENSORS_ODIRECT=0 (buffered reads)",
    "metaload": "meta + fully_shard + metaload.materialize(checkpoint=)",
    "metaload_daemon": "meta + fully_shard + metaload.materialize(daemon=)",
    "limit": "limit: meta + fully_shard + each rank's bytes pread into fresh memory",
}
E2E_NOTES = {
    "e2e_seconds": "per rank, from a barrier after imports, process-group init, the device mesh and a meta-model "
                   "warm-up (transformers imports the model's module lazily) until a barrier after the load "
                   "(metaload's own Gloo verification inside); model construction and fully_shard are inside; "
                   "a case's time is its slowest rank's, its median over the rounds is reported",
    "e2e_ratios": "e2e_fsdp_vs_X: median seconds of X / median seconds of metaload (checkpoint mode); a peer "
                  "measured at its defaults and at its best documented setting (dcp and dcp_threads) counts with "
                  "the faster of the two; e2e_fsdp_vs_limit: the limit case (what every case pays: the meta model, "
                  "fully_shard and each rank's own bytes pread into fresh memory) / metaload; e2e_onehost_vs_runai: "
                  "the faster of the Run:ai Model Streamer's single (runai) and distributed (runai_dist) modes / "
                  "metaload",
    "e2e_touch": "every case touches one byte per page of every local shard inside the clock, as a first "
                 "training step would (loaders whose tensors are lazy mmap views pay for mapping them there)",
    "e2e_bytes_read_over_checkpoint": "metaload: sum over the ranks of LoadReport.bytes_read / the checkpoint's "
                                      "tensor bytes (file headers excluded)",
    "e2e_bytes": "file_tensor_bytes per rank is counted at each loader: LoadReport.bytes_read; dcp's read items "
                 "(HuggingFaceStorageReader, safe_open get_slice on an mmap); rank 0's load_file tensors for "
                 "broadcast; the whole state_dict for from_pretrained; every tensor the Run:ai streamer yielded "
                 "(runai), this rank's part of its partition (runai_dist: its internals); the tensors of the files "
                 "fastsafetensors read whole on this rank. rchar (/proc/self/io) is reported beside "
                 "it: it counts read()/pread() syscall bytes and misses what mmap-based loaders touch",
    "e2e_rank_peak_rss_over_shard": "metaload: max over the ranks of (VmHWM at the end - VmRSS at the start) / "
                                    "the rank's shard bytes, VmHWM reset with `5 > /proc/self/clear_refs` at the "
                                    "start; mapped file pages count as RSS",
}


def print_verdicts(targets, width=34):
    print(f"\n  {'key':<{width}} {'value':>9}  {'target':<8} pass")
    for key, v in targets.items():
        value = "n/a" if v["value"] is None else f"{v['value']:.3g}"
        passed = {True: "yes", False: "NO", None: "-"}[v["pass"]]
        print(f"  {key:<{width}} {value:>9}  {v['target']:<8} {passed}")


def e2e_absolute(samples, tensor_bytes):
    """Per case of an e2e-style run, the medians over its rounds (read/ckpt over `tensor_bytes`)."""
    med = lambda case, f: median([f(x) for x in samples.get(case, [])])  # noqa: E731
    absolute = {}
    for case, runs in samples.items():
        if not runs:
            continue
        world = len(runs[0]["ranks"])
        absolute[case] = {
            "median_s": med(case, lambda x: x["seconds"]),
            "min_max_s": spread([x["seconds"] for x in runs]),
            "rounds": len(runs),
            "median_bytes_read_all_ranks": med(case, lambda x: x["bytes_read_all_ranks"]),
            "median_rchar_all_ranks": med(case, lambda x: x["rchar_all_ranks"]),
            "bytes_read_over_checkpoint": med(case, lambda x: x["bytes_read_all_ranks"]) / tensor_bytes,
            "median_max_peak_rss_growth_over_shard": med(case, lambda x: x["max_peak_rss_growth_over_shard"]),
            "median_peak_rss_growth_bytes_by_rank": [med(case, lambda x, r=r: x["ranks"][r]["peak_rss_growth_bytes"])
                                                     for r in range(world)],
            "median_load_s_by_rank": [med(case, lambda x, r=r: x["ranks"][r]["seconds"]) for r in range(world)],
        }
    return absolute


def summarize_e2e(samples, tensor_bytes):
    """The e2e keys, and per case the medians the ratios come from."""
    absolute = e2e_absolute(samples, tensor_bytes)
    ours = absolute.get("metaload", {}).get("median_s")
    ratio = lambda case: absolute[case]["median_s"] / ours if ours and case in absolute else None  # noqa: E731

    def best(*cases):
        found = [r for r in map(ratio, cases) if r is not None]
        return min(found) if found else None

    keys = {
        "e2e_fsdp_vs_hf": ratio("hf"),
        "e2e_fsdp_vs_dcp": best("dcp", "dcp_threads"),
        "e2e_fsdp_vs_hf_dist": ratio("hf_dist"),
        "e2e_fsdp_vs_limit": ratio("limit"),
        "e2e_fsdp_vs_broadcast": ratio("broadcast"),
        "e2e_onehost_vs_runai": best("runai", "runai_dist"),
        "e2e_bytes_read_over_checkpoint": absolute.get("metaload", {}).get("bytes_read_over_checkpoint"),
        "e2e_rank_peak_rss_over_shard": absolute.get("metaload", {}).get("median_max_peak_rss_growth_over_shard"),
        "e2e_fsdp_daemon_vs_checkpoint": ratio("metaload_daemon"),
    }
    return keys, absolute


def e2e_verdicts(keys):
    return verdicts(keys, E2E_TARGETS)


def print_e2e_rows(absolute, labels, tensor_bytes):
    print(f"\n  {'case':<64} {'median s':>9} {'min-max s':>15} {'read/ckpt':>9} {'rchar/ckpt':>10} {'peak RSS/shard':>14}")
    for case, a in absolute.items():
        lo, hi = a["min_max_s"]
        print(f"  {labels.get(case, case):<64} {a['median_s']:9.3f} {lo:7.3f}-{hi:<7.3f} "
              f"{a['bytes_read_over_checkpoint']:9.2f} {a['median_rchar_all_ranks'] / tensor_bytes:10.2f} "
              f"{a['median_max_peak_rss_growth_over_shard']:14.2f}")
    print("  read/ckpt: tensor bytes the loader took from the files, all ranks / checkpoint; rchar: read() syscalls"
          " only (mmap not counted); peak RSS/shard: worst rank")


def print_e2e_table(e2e):
    data = e2e["data"]
    print(f"\nend-to-end FSDP2, {data['world']} CPU ranks (Gloo): {data['tensor_bytes'] / GIB:.2f} GiB Llama-shaped "
          f"bf16 checkpoint ({data['dims']['layers']} layers, hidden {data['dims']['hidden']}, {data['shards']} "
          f"shards), median of {data['repeats']} rounds")
    print_e2e_rows(e2e["absolute"], E2E_LABELS, data["tensor_bytes"])
    print_verdicts(e2e["targets"])
    value = e2e.get("e2e_fsdp_daemon_vs_checkpoint")
    print(f"  {'e2e_fsdp_daemon_vs_checkpoint':<34} {'n/a' if value is None else f'{value:.3g}':>9}  (extra)")
    for case, why in e2e.get("errors", {}).items():
        print(f"  {case}: could not measure: {why.splitlines()[0] if why else why}")


# ---- the FP8 variant (bench/e2e_fp8.py, `--only e2e-fp8`) ----------------------------------------
E2E_FP8_TARGETS = {  # issue 36 item 5
    "e2e_fp8_vs_hf_dist": (">=", 1.5),
    "e2e_fp8_materialize_vs_hf_dist": (">=", 1.5),
    "e2e_fp8_rank_peak_rss_over_bf16_shard": ("<=", 1.2),
    "e2e_fp8_materialize_rank_peak_rss_over_bf16_shard": ("<=", 1.2),
    "e2e_fp8_bytes_read_over_checkpoint": ("<=", 1.05),
}
E2E_FP8_LABELS = {
    "hf_dist": "transformers from_pretrained(distributed_config) dequantizing",
    "metaload_hf_dist": "metaload.from_pretrained(distributed_config, dequantize=True)",
    "metaload": "meta + fully_shard + metaload.materialize(dequantize=True)",
}
E2E_FP8_NOTES = {
    "e2e_fp8_vs_hf_dist": "median seconds of transformers' from_pretrained(distributed_config=DistributedConfig("
                          "fsdp_size=4)) on the FP8 checkpoint / those of metaload.from_pretrained(same, "
                          "dequantize=True); _materialize_: / those of materialize(dequantize=True) into a "
                          "from_config + fully_shard model",
    "peak_rss": "(VmHWM at the end - VmRSS at the start) / the rank's BF16 shard bytes, worst rank, median",
    "read_over_checkpoint": "bytes the loader took from the files, all ranks / the FP8 checkpoint's tensor bytes",
    "loaders_agree": "round 1: every rank's local shards, sha256 at the same global offset and shape, equal "
                     "across the three loaders; each also equals DeepSeek's dequantization of the file's codes",
}


def summarize_e2e_fp8(samples, tensor_bytes):
    """The FP8 variant's keys and per case the medians they come from."""
    absolute = e2e_absolute(samples, tensor_bytes)
    seconds = lambda case: absolute.get(case, {}).get("median_s")  # noqa: E731
    over = lambda a, b: a / b if a is not None and b else None  # noqa: E731
    rss = lambda case: absolute.get(case, {}).get("median_max_peak_rss_growth_over_shard")  # noqa: E731
    keys = {
        "e2e_fp8_vs_hf_dist": over(seconds("hf_dist"), seconds("metaload_hf_dist")),
        "e2e_fp8_materialize_vs_hf_dist": over(seconds("hf_dist"), seconds("metaload")),
        "e2e_fp8_rank_peak_rss_over_bf16_shard": rss("metaload_hf_dist"),
        "e2e_fp8_materialize_rank_peak_rss_over_bf16_shard": rss("metaload"),
        "e2e_fp8_bytes_read_over_checkpoint": absolute.get("metaload_hf_dist", {}).get("bytes_read_over_checkpoint"),
    }
    return keys, absolute


def print_e2e_fp8_table(fp8):
    data = fp8["data"]
    print(f"\nFP8 dequantize on load, FSDP2, {data['world']} CPU ranks (Gloo): {data['tensor_bytes'] / GIB:.2f} GiB "
          f"FP8 checkpoint of the {data['bf16_model_bytes'] / GIB:.2f} GiB bf16 Llama ({data['dims']['layers']} "
          f"layers, hidden {data['dims']['hidden']}), median of {data['repeats']} rounds")
    print_e2e_rows(fp8["absolute"], E2E_FP8_LABELS, data["tensor_bytes"])
    print("  peak RSS/shard: over the rank's bf16 shard; read/ckpt: over the FP8 checkpoint")
    agree = fp8["loaders_agree"]
    verdict = {True: "yes", False: "NO", None: "not compared"}[agree["equal"]]
    print(f"  loaders agree bit for bit: {verdict}" + (
        f" ({', '.join(agree['loaders'])}; {agree['ranks']} ranks x {agree['tensors_per_rank']} tensors, round 1)"
        if agree["equal"] else f": {agree['why']}"))
    print_verdicts(fp8["targets"], width=50)
    for case, why in fp8.get("errors", {}).items():
        print(f"  {case}: could not measure: {why.splitlines()[0] if why else why}")
