"""The end-to-end FSDP2 case of bench/run_bench.py (`--only e2e`): four CPU ranks (Gloo, the
environment torchrun gives: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) get an
FSDP2-sharded Llama-shaped model from one safetensors checkpoint, one way per case
(bench/e2e_fsdp.py runs each rank; its docstring says what each case does and how time, bytes
and memory are measured). Every round warms the page cache, then runs every case once, in an
order rotated by one each round; each run is four fresh processes. Summarized by
summary.summarize_e2e.
"""
import json
import pathlib
import time

import checkpoint_data
import peer_loaders
import processes
from processes import Daemon, run_timed

BENCH_DIR = pathlib.Path(__file__).resolve().parent
# The runai* and fastsafetensors* cases are the file-system peers of bench/peer_loaders.py (each a
# bench/e2e_fsdp.py case and the environment its ranks get).
E2E_CASES = ("hf", "hf_dist", "dcp", "dcp_threads", "broadcast", "runai", "runai_dist", "fastsafetensors",
             "fastsafetensors_buffered", "metaload", "metaload_daemon", "limit")
WORLD = 4
MODEL = "e2e"
GIB = 2**30


def rank_lines(label, results):
    """Each rank's JSON line (bench/e2e_fsdp.py), with its process's wall time and peak RSS;
    raises naming the rank that failed by itself (not one wait_all killed because of it), a
    rank without a line, or one whose --check found wrong bytes."""
    failed = [rank for rank, r in enumerate(results) if r["rc"] != 0]
    if failed:
        rank = next((i for i in failed if results[i]["rc"] != -9), failed[0])
        raise RuntimeError(f"{label} rank {rank} exited {results[rank]['rc']}:\n{results[rank]['stderr'][-3000:]}")
    ranks = []
    for rank, r in enumerate(results):
        line = next((line for _, line in reversed(r["stdout_lines"]) if line.startswith("{")), None)
        if line is None:
            raise RuntimeError(f"{label} rank {rank}: no JSON line:\n{r['stderr'][-3000:]}")
        result = json.loads(line)
        if result.get("check_problems"):
            raise RuntimeError(f"{label} rank {rank}: wrong bytes: {result['check_problems'][:5]}")
        result["process_wall_s"] = r["wall_s"]
        result["process_maxrss_bytes"] = r["maxrss_bytes"]
        ranks.append(result)
    return ranks


def interleaved_rounds(names, repeats, check_first, before_round, measure, record, errors, label, width,
                       error_key=lambda name: name, detail=lambda sample: ""):
    """`repeats` rounds of `measure(name, check)` over every name, each round starting one name
    later than the last (no case always runs first, after the cache warm-up `before_round`);
    `check` only in round 1 when `check_first`. A name that fails once is left out of later
    rounds, its error kept in `errors[error_key(name)]`; each sample gets its "round" and goes
    to `record(name, sample)`."""
    for round_index in range(repeats):
        before_round()
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            if error_key(name) in errors:
                continue
            check = round_index == 0 and check_first
            where = f"  {label} round {round_index + 1}/{repeats} {name:<{width}}"
            t = time.monotonic()
            try:
                sample = measure(name, check)
            except (RuntimeError, TimeoutError, OSError, ValueError, KeyError) as e:
                errors[error_key(name)] = f"round {round_index + 1}: {e}"
                print(f"{where} FAILED: {e}", flush=True)
                continue
            sample["round"] = round_index
            record(name, sample)
            print(f"{where} {sample['seconds']:7.3f} s{detail(sample)} "
                  f"(harness {time.monotonic() - t:5.1f} s{', checked' if check else ''})", flush=True)


class E2E:
    label = "e2e"
    rank_flags = ()  # more arguments of every bench/e2e_fsdp.py rank

    def __init__(self, bench, args, reaper):
        self.bench, self.args, self.reaper = bench, args, reaper
        self.cases = args.e2e_cases
        self.samples = {case: [] for case in self.cases}
        self.errors = {}
        self.prep = {}
        self.daemon = None

    def prepare(self, work):
        self.prepare_checkpoint(work)
        if "metaload_daemon" in self.cases:
            self.daemon = Daemon(self.bench.metad, self.run_dir, "node-e2e", [self.checkpoint.parent], WORLD,
                                 self.reaper)
            run_timed([self.bench.metactl, "register", MODEL, "--checkpoint", self.checkpoint, "--daemon",
                       self.daemon.address], 120)

    def prepare_checkpoint(self, work):
        """The checkpoint: the main benchmark's when it was made at the same size, else its own
        (`metactl synth`, Llama-shaped BF16, 4 shards, config.json that LlamaForCausalLM builds from;
        --e2e-dims: that shape, whatever --e2e-size-gib says)."""
        size_bytes = int(self.args.e2e_size_gib * GIB)
        dims = self.args.e2e_dims or checkpoint_data.llama_dims(size_bytes)
        if self.args.e2e_dims:
            per_layer, outside_layers = checkpoint_data.llama_bytes(dims)
            size_bytes = dims["layers"] * per_layer + outside_layers
        main = getattr(self.bench, "checkpoint", None)
        if main is not None and int(self.args.size_gib * GIB) == size_bytes and not self.args.e2e_dims:
            self.checkpoint = main
            self.prep["reused"] = "the main benchmark's checkpoint"
        else:
            self.checkpoint = work / "e2e" / "llama"
            stamp = work / "e2e" / "stamp.json"
            wanted = {"size_bytes": size_bytes, "dims": dims}
            if stamp.exists() and json.loads(stamp.read_text()).get("wanted") == wanted:
                self.prep["reused"] = str(self.checkpoint)
            else:
                t = time.monotonic()
                checkpoint_data.synthesize(self.bench.metactl, self.checkpoint, size_bytes, dims=dims)
                self.prep["synth_s"] = time.monotonic() - t
                stamp.write_text(json.dumps({"wanted": wanted}))
        self.run_dir = work / "e2e" / "run"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.dims = dims
        self.describe_checkpoint()
        self.model_bytes = self.tensor_bytes  # what the ranks hold together: the checkpoint, in its dtype

    def describe_checkpoint(self):
        """Its shard files, tensor bytes (headers excluded), file bytes, and the files to warm."""
        self.shards = checkpoint_data.shard_files(self.checkpoint)
        self.tensor_bytes = sum(sum(e["data_offsets"][1] - e["data_offsets"][0] for e in
                                    checkpoint_data.read_header(f)[1].values()) for f in self.shards)
        self.file_bytes = sum(f.stat().st_size for f in self.shards)
        self.warm_files = [*self.shards, *self.checkpoint.glob("*.json")]

    def data_summary(self):
        return {"checkpoint": str(self.checkpoint), "dims": self.dims, "dtype": "bf16", "shards": len(self.shards),
                "tensor_bytes": self.tensor_bytes, "shard_file_bytes": self.file_bytes, "prepare": self.prep,
                "world": WORLD, "cases": list(self.cases), "repeats": self.args.e2e_repeats}

    def measure(self, case, check):
        rank_case, env = peer_loaders.rank_case(case)
        cmd = [self.bench.python, BENCH_DIR / "e2e_fsdp.py", rank_case, self.checkpoint, "--name", MODEL,
               *self.rank_flags]
        if case == "metaload_daemon":
            cmd += ["--daemon", self.daemon.address]
        if check:
            cmd.append("--check")
        results = processes.run_ranks(cmd, WORLD, self.args.timeout, self.reaper, TOKENIZERS_PARALLELISM="false",
                                      **env)
        ranks = rank_lines(case, results)
        if sum(x["shard_bytes"] for x in ranks) != self.model_bytes:
            raise RuntimeError(f"{case}: the ranks hold {sum(x['shard_bytes'] for x in ranks)} bytes of shards, "
                               f"the model {self.model_bytes}")
        return {"seconds": max(x["seconds"] for x in ranks), "seconds_are": "slowest rank, barrier to barrier",
                "checked": check,
                "bytes_read_all_ranks": sum(x["file_tensor_bytes"] or 0 for x in ranks),
                "rchar_all_ranks": sum(x["rchar_bytes"] for x in ranks),
                "max_peak_rss_growth_over_shard": max(x["peak_rss_growth_bytes"] / x["shard_bytes"] for x in ranks),
                "ranks": ranks}

    def before_round(self):
        checkpoint_data.warm_page_cache(self.warm_files)

    def run_rounds(self):
        interleaved_rounds(list(self.cases), self.args.e2e_repeats, not self.args.e2e_no_check,
                           before_round=self.before_round,
                           measure=self.measure, record=lambda case, sample: self.samples[case].append(sample),
                           errors=self.errors, label=self.label, width=24)
