#!/usr/bin/env python3
"""Issue 5's benchmark: metaload against this machine's limits and against the loaders users
have today, side by side in one run (these machines are shared: every target is a ratio of
two numbers measured in the same run, round by round).

    .venv/bin/python bench/run_bench.py --build-dir build --out bench.json             # ~1 GiB, 5 rounds
    .venv/bin/python bench/run_bench.py --build-dir build --size-gib 0.25 --repeats 3  # quick
    ... --keep [--work-dir DIR]     keep the data (reused by the next --keep run of that size)
    ... --only cat,direct_1,planner  a subset (names below; "planner" runs bench_plan_405b,
                                     "getplan" bench_getplan_1024, "e2e" the FSDP2 case below)
    .venv/bin/python bench/run_bench.py --build-dir build --only e2e --e2e-size-gib 1 --e2e-repeats 3
    .venv/bin/python bench/run_bench.py --build-dir build --only e2e-fp8 # FP8 dequantize on load, bench/e2e_fp8.py
    .venv/bin/python bench/run_bench.py --build-dir build --only scale   # 100k tensors, bench/scale.py
    .venv/bin/python bench/run_bench.py --build-dir build --only cluster # emulated hosts, bench/cluster/
    .venv/bin/python bench/run_bench.py --build-dir build --only objectstore  # an S3 bucket, bench/cluster/objectstore.py

Needs build/{daemon/metad, client/metactl, tests/bench_plan_405b, tests/bench_getplan_1024,
tests/bench_tcp_baseline, tests/bench_pread_baseline}
and, in .venv, torch, safetensors, transformers and accelerate.

What it does: writes a Llama-shaped BF16 checkpoint with `metactl synth` (sharded safetensors,
index, config.json) and the same weights as pytorch_model.bin; warms the page cache (every
file read once, again before each round); then, `--repeats` rounds, each measuring once:

  cat            `cat SHARDS > /dev/null`
  pread          bench_pread_baseline: preads from 2 threads into fresh memory, nothing else
  tcp            bench_tcp_baseline: one loopback TCP connection, pread+send -> recv into fresh memory
  direct_1       one `metactl load` rank, world 1, --source direct (whole checkpoint)
  direct_4       four ranks, world 4 (layers plan), direct
  stream_1       one rank, --source stream from one metad that reads the files
  stream_4       four ranks streaming from two metad (ranks 0-1 ask one, 2-3 the other)
  stream_4_1d    four ranks streaming from one metad; its RSS is sampled every 10 ms
  torch_load, safetensors, safetensors_pread, transformers
                 bench/python_loaders.py, a fresh process each

and then (unless --only leaves it out) the end-to-end FSDP2 case, bench/e2e.py: four CPU ranks
(Gloo) fill an FSDP2-sharded Llama model from the same checkpoint (when --e2e-size-gib is
--size-gib, else its own) with from_pretrained, torch.distributed.checkpoint's
HuggingFaceStorageReader, set_model_state_dict(broadcast_from_rank0), the Run:ai Model Streamer,
fastsafetensors (bench/peer_loaders.py) and metaload.materialize, interleaved round by round
(--e2e-repeats, default 3); bench/e2e_fsdp.py says how. `e2e-cold` is the same with the
checkpoint's pages dropped from the page cache before every run (bench/e2e_cold.py); `e2e-fp8` is its FP8 variant
(bench/e2e_fp8.py): the same model quantized to FP8 blocks, dequantized on load by transformers
and by metaload.

A rank's time is its report's "seconds" (plan received -> every byte in place; falls back to
the "in X.XX s" line of stdout); the Python loaders are timed in-process from just before the
call until every byte of every tensor has been summed (--touch page: one byte per page).
Four ranks' aggregate is bytes over the span from the first rank's load start to the last
one's end (stdout lines are time-stamped as they arrive): ranks start up to seconds apart,
so dividing by the slowest rank's own time would count loads that never overlapped as
parallel (that figure is kept too, as *_by_max_rank). Ranks verify with a Gloo all-reduce, and every tensor's sha256 in
their reports is checked against the files. Medians are reported, with min-max. Every
process started is stopped, and the data removed (unless --keep), however the run ends.
Exit status 1 if a measurement could not be made; failing targets are results, not errors.
"""
import argparse
import json
import os
import pathlib
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import checkpoint_data  # noqa: E402
import processes  # noqa: E402
from processes import Daemon, Reaper, RssPoller, Timed, free_port, last_json_line, run_timed  # noqa: E402
from summary import EXTRA_KEYS, LOADERS, NOTES, ORDER, TARGETS, print_table, summarize, verdicts  # noqa: E402
from summary import E2E_LABELS, E2E_NOTES, E2E_TARGETS, e2e_verdicts, print_e2e_table, summarize_e2e  # noqa: E402
from summary import print_e2e_rows  # noqa: E402
from summary import E2E_FP8_NOTES, E2E_FP8_TARGETS, print_e2e_fp8_table, summarize_e2e_fp8  # noqa: E402
from e2e import E2E, E2E_CASES  # noqa: E402
from e2e_fp8 import E2EFp8  # noqa: E402
from e2e_cold import E2ECold, cold_keys  # noqa: E402
from scale import Scale, print_scale_table  # noqa: E402
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "cluster"))
import objectstore  # noqa: E402
import regimes  # noqa: E402

SOURCE_DIR = pathlib.Path(__file__).resolve().parents[1]
MODEL = "bench"
GIB = 2**30

RANK_SCENARIOS = {  # name -> (daemon of each rank, source)
    "direct_1": (["a"], "direct"),
    "direct_4": (["a"] * 4, "direct"),
    "stream_1": (["a"], "stream"),
    "stream_4": (["p", "p", "q", "q"], "stream"),
    "stream_4_1d": (["s"] * 4, "stream"),
}
assert ORDER == ("cat", "pread", "tcp", *RANK_SCENARIOS, *LOADERS)
# The cases with their own data and processes, run after the main part (each its own module).
CASES_APART = ("e2e", "e2e-cold", "e2e-fp8", "scale", "cluster", "objectstore")

LOAD_LINE = re.compile(r"^rank \d+/\d+ .* in ([0-9.]+) s = ")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=str(SOURCE_DIR / "build"))
    parser.add_argument("--out", default="bench.json", help="where to write the results (JSON)")
    parser.add_argument("--size-gib", type=float, default=1.0, help="checkpoint size (default 1)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds; medians are reported (default 5)")
    parser.add_argument("--work-dir", default=tempfile.gettempdir(), help="parent of the data folder")
    parser.add_argument("--keep", action="store_true", help="keep (and reuse) the data folder")
    parser.add_argument("--read-threads", type=int, help="passed to `metactl load` (default: its own)")
    # The issue's own example is a sum: with the page cache warm, touching one byte per page of
    # a memory-mapped result maps pages without reading them, which is the lazy mapping the
    # issue says must not be mistaken for loading.
    parser.add_argument("--touch", choices=("page", "sum"), default="sum",
                        help="after a Python loader returns: sum every byte of every tensor (default), or "
                             "read one byte of every page; timed either way (see bench/python_loaders.py)")
    parser.add_argument("--only", help="comma-separated subset of: " + ",".join((*ORDER, "planner", "getplan",
                                                                                   *CASES_APART)))
    parser.add_argument("--timeout", type=float, default=600, help="seconds any one process may take")
    parser.add_argument("--e2e-size-gib", type=float, help="checkpoint size of the e2e case (default: --size-gib, "
                                                           "whose checkpoint it then reuses)")
    parser.add_argument("--e2e-repeats", type=int, default=3, help="rounds of the e2e case (default 3)")
    parser.add_argument("--e2e-dims", help="the e2e model's shape instead of --e2e-size-gib's: layers=N,hidden=N,"
                                           "intermediate=N,heads=N,kv_heads=N,vocab=N (head_dim 128)")
    parser.add_argument("--e2e-cases", default=",".join(E2E_CASES),
                        help=f"comma-separated subset of {','.join(E2E_CASES)} (default all; metaload is the "
                             "reference of every ratio)")
    parser.add_argument("--e2e-no-check", action="store_true",
                        help="skip comparing every rank's shards with the files after the first round's runs")
    parser.add_argument("--scale-repeats", type=int, default=3, help="rounds of the 100k-tensor case (default 3)")
    parser.add_argument("--scale-ranks", type=int, default=2, help="CPU ranks of its materialize (default 2)")
    cluster = parser.add_argument_group("the cluster regimes (--only cluster: bench/cluster/regimes.py; needs root)")
    cluster.add_argument("--cluster-regimes", default=",".join(regimes.REGIMES),
                         help=f"comma-separated subset of {','.join(regimes.REGIMES)} (default all)")
    cluster.add_argument("--cluster-loaders", default=",".join(regimes.LOADERS),
                         help=f"comma-separated subset of {','.join(regimes.LOADERS)} (default all)")
    cluster.add_argument("--cluster-repeats", type=int, default=2, help="rounds (default 2)")
    cluster.add_argument("--cluster-storage-mb-per-s", type=int, default=1000,
                         help="the emulated storage's aggregate bandwidth, shared by every host (default 1000)")
    cluster.add_argument("--cluster-storage-latency-us", type=int, default=1000,
                         help="its latency per read request (default 1000)")
    cluster.add_argument("--cluster-read-ahead-kib", type=int, default=4096,
                         help="the kernel's read-ahead per file on the storage mounts (default 4096, like an NFS "
                              "client with rsize 1M and a raised read_ahead_kb; FUSE's own default is 128)")
    cluster.add_argument("--cluster-link-gbit", type=float, default=10.0,
                         help="each emulated host's network link, each way (default 10)")
    cluster.add_argument("--cluster-hosts", type=int, default=regimes.HOSTS,
                         help=f"emulated hosts, one rank each: an even number from 2 to 16 (default {regimes.HOSTS}; "
                              "8 checks bench/simulate.py's model at a second point)")
    bucket = parser.add_argument_group("the objectstore regime (--only objectstore: bench/cluster/objectstore.py; "
                                       "root past one host)")
    bucket.add_argument("--objectstore-shape", default="4x2",
                        help="HOSTSxRANKS: emulated hosts x ranks on each (default 4x2; 1xR: one host, no root)")
    bucket.add_argument("--objectstore-loaders", default=",".join(objectstore.LOADERS),
                        help="comma-separated subset (default: all)")
    bucket.add_argument("--objectstore-repeats", type=int, default=2, help="rounds (default 2)")
    bucket.add_argument("--objectstore-first-byte-ms", type=float, default=30.0,
                        help="the bucket's first-byte latency of every response (default 30)")
    bucket.add_argument("--objectstore-connection-mb-per-s", type=float, default=100.0,
                        help="the bucket's bandwidth per connection (default 100)")
    bucket.add_argument("--objectstore-aggregate-mb-per-s", type=float, default=1500.0,
                        help="the bucket's bandwidth in all (default 1500)")
    bucket.add_argument("--objectstore-shard-mb", type=float, default=512.0,
                        help="the checkpoint's largest object in MB (default 512)")
    bucket.add_argument("--objectstore-daemon-cap-mib", type=float,
                        help="what a metad may grow by in a load (default: its streaming memory cap at the "
                             "node-config defaults, docs/node-config.md)")
    args = parser.parse_args()
    everything = {*ORDER, "planner", "getplan", *CASES_APART}
    args.only = set(args.only.split(",")) if args.only else everything
    unknown = args.only - everything
    if unknown:
        parser.error(f"--only: unknown {sorted(unknown)}")
    if args.repeats < 1 or args.size_gib <= 0:
        parser.error("--repeats and --size-gib must be positive")
    args.e2e_size_gib = args.e2e_size_gib or args.size_gib
    args.e2e_cases = [c for c in args.e2e_cases.split(",") if c]
    try:
        args.e2e_dims = checkpoint_data.parse_dims(args.e2e_dims) if args.e2e_dims else None
    except ValueError as e:
        parser.error(f"--e2e-dims: {e}")
    if set(args.e2e_cases) - set(E2E_CASES) or args.e2e_repeats < 1 or args.e2e_size_gib <= 0:
        parser.error(f"--e2e-cases: a subset of {','.join(E2E_CASES)}; --e2e-repeats, --e2e-size-gib positive")
    if args.scale_repeats < 1 or args.scale_ranks < 1:
        parser.error("--scale-repeats and --scale-ranks must be positive")
    args.cluster_regimes = [r for r in args.cluster_regimes.split(",") if r]
    args.cluster_loaders = [x for x in args.cluster_loaders.split(",") if x]
    if not args.cluster_regimes or set(args.cluster_regimes) - set(regimes.REGIMES):
        parser.error(f"--cluster-regimes: a subset of {','.join(regimes.REGIMES)}")
    if "metaload" not in args.cluster_loaders or set(args.cluster_loaders) - set(regimes.LOADERS):
        parser.error(f"--cluster-loaders: a subset of {','.join(regimes.LOADERS)} with metaload (the reference)")
    if (args.cluster_repeats < 1 or args.cluster_storage_mb_per_s < 1 or args.cluster_storage_latency_us < 0
            or not args.cluster_link_gbit > 0 or not 4 <= args.cluster_read_ahead_kib <= 1 << 20):
        parser.error("--cluster-repeats, --cluster-storage-mb-per-s, --cluster-link-gbit must be positive, "
                     "--cluster-storage-latency-us not negative, --cluster-read-ahead-kib from 4 to 1048576")
    if not (2 <= args.cluster_hosts <= 16 and args.cluster_hosts % 2 == 0):
        parser.error(f"--cluster-hosts {args.cluster_hosts}: an even number from 2 to 16 (hsdp is 2 replicas)")
    args.objectstore_loaders = [x for x in args.objectstore_loaders.split(",") if x]
    try:
        args.objectstore_shape = objectstore.parse_shape(args.objectstore_shape)
    except ValueError as e:
        parser.error(f"--objectstore-shape: {e}")
    if not args.objectstore_loaders or set(args.objectstore_loaders) - set(objectstore.LOADERS):
        parser.error(f"--objectstore-loaders: a subset of {','.join(objectstore.LOADERS)}")
    if (args.objectstore_repeats < 1 or args.objectstore_first_byte_ms < 0 or not args.objectstore_shard_mb >= 1
            or not args.objectstore_connection_mb_per_s > 0 or not args.objectstore_aggregate_mb_per_s > 0
            or (args.objectstore_daemon_cap_mib is not None and not args.objectstore_daemon_cap_mib > 0)):
        parser.error("--objectstore-repeats, -connection-mb-per-s, -aggregate-mb-per-s, -daemon-cap-mib must be "
                     "positive, --objectstore-first-byte-ms not negative, --objectstore-shard-mb at least 1")
    return args


class Bench:
    def __init__(self, args, reaper):
        self.args, self.reaper = args, reaper
        build = pathlib.Path(args.build_dir).resolve()
        self.metactl = build / "client" / "metactl"
        self.metad = build / "daemon" / "metad"
        self.plan_bench = build / "tests" / "bench_plan_405b"
        self.getplan_bench = build / "tests" / "bench_getplan_1024"
        self.tcp_bench = build / "tests" / "bench_tcp_baseline"
        self.pread_bench = build / "tests" / "bench_pread_baseline"
        needed = [self.metactl, self.metad]
        if args.only - set(CASES_APART):  # the main part and the planner
            needed += [self.plan_bench, self.tcp_bench, self.pread_bench]
        for binary in needed:
            if not binary.exists():
                raise SystemExit(f"run_bench: {binary} is missing: build it first (ninja -C {build})")
        # Every Python child (the e2e, scale and cluster ranks) imports the package of this
        # build: the venv's .pth names one build folder only, which another --build-dir is not.
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(build / "python"), os.environ.get("PYTHONPATH", "")) if p)
        self.python = SOURCE_DIR / ".venv" / "bin" / "python"
        if not self.python.exists():
            self.python = pathlib.Path(sys.executable)
        self.stdbuf = shutil.which("stdbuf")
        self.samples = {name: [] for name in ORDER}
        self.errors = {}  # measurement -> why it could not be made (it is skipped from then on)
        self.daemons = {}
        self.prep = {}

    # ---- data -------------------------------------------------------------------------------
    def prepare(self, work):
        self.work = work
        self.storage = work / "storage"
        self.checkpoint = self.storage / "llama"
        self.bin_path = work / "bin" / "pytorch_model.bin"
        self.run_dir = work / "run"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        size_bytes = int(self.args.size_gib * GIB)
        stamp = work / "stamp.json"
        wanted = {"size_bytes": size_bytes, "dims": checkpoint_data.llama_dims(size_bytes)}
        if stamp.exists() and json.loads(stamp.read_text()).get("wanted") == wanted and self.bin_path.exists():
            self.prep["reused"] = str(work)
        else:
            t = time.monotonic()
            checkpoint_data.synthesize(self.metactl, self.checkpoint, size_bytes)
            self.prep["synth_s"] = time.monotonic() - t
            t = time.monotonic()
            self.bin_path.parent.mkdir(parents=True, exist_ok=True)
            checkpoint_data.write_pytorch_bin(self.python, checkpoint_data.shard_files(self.checkpoint),
                                              self.bin_path)
            self.prep["write_bin_s"] = time.monotonic() - t
            stamp.write_text(json.dumps({"wanted": wanted}))
        self.dims = wanted["dims"]
        self.shards = checkpoint_data.shard_files(self.checkpoint)
        t = time.monotonic()
        self.digests, self.tensor_bytes = checkpoint_data.tensor_digests(self.shards)
        self.prep["digests_s"] = time.monotonic() - t
        self.file_bytes = sum(f.stat().st_size for f in self.shards)
        self.warm_files = [*self.shards, *self.checkpoint.glob("*.json"), self.bin_path]
        t = time.monotonic()
        checkpoint_data.warm_page_cache(self.warm_files)
        self.prep["warm_s"] = time.monotonic() - t

    def data_summary(self):
        return {"checkpoint": str(self.checkpoint), "dims": self.dims, "dtype": "bf16",
                "shards": len(self.shards), "tensors": len(self.digests), "tensor_bytes": self.tensor_bytes,
                "shard_file_bytes": self.file_bytes, "pytorch_model_bin_bytes": self.bin_path.stat().st_size,
                "prepare": self.prep}

    # ---- daemons ------------------------------------------------------------------------------
    def start_daemons(self):
        """a: one node with 4 slots (direct_*, stream_1); p+q: two nodes of 2 slots, both able to
        read the files (stream_4); s: a node of 4 slots used only by stream_4_1d, so that its
        peak RSS is that of serving four streaming ranks."""
        roots = [self.storage]
        new = lambda name, gpus, coordinator=None: Daemon(self.metad, self.run_dir, name, roots, gpus,  # noqa: E731
                                                          self.reaper, coordinator)
        needed = {d for s in RANK_SCENARIOS if s in self.args.only for d in RANK_SCENARIOS[s][0]}
        if "a" in needed:
            self.daemons["a"] = new("node-a", 4)
        if "p" in needed:
            self.daemons["p"] = new("node-p", 2)
            self.daemons["q"] = new("node-q", 2, coordinator=self.daemons["p"].address)
        if "s" in needed:
            self.daemons["s"] = new("node-s", 4)
        for key in ("a", "p", "s"):
            if key in self.daemons:
                run_timed([self.metactl, "register", MODEL, "--checkpoint", self.checkpoint, "--daemon",
                           self.daemons[key].address], 120)
        if "q" in self.daemons:
            deadline = time.monotonic() + 30
            status = [self.metactl, "status", "--daemon", self.daemons["p"].address]
            while not any("node-q " in line for _, line in run_timed(status, 30)["stdout_lines"]):
                if time.monotonic() > deadline:
                    raise RuntimeError("node-q did not join node-p")
                time.sleep(0.1)
        self.daemon_idle_rss_kib = {k: d.rss_kib()["VmRSS"] for k, d in self.daemons.items()}
        # What a rank holds right before allocating tensors, for reports without rss_before_bytes:
        # a `metactl load` that stops when the daemon answers "no such model".
        if self.daemons:
            any_daemon = next(iter(self.daemons.values()))
            probe = Timed([self.metactl, "load", "no-such-model", "--daemon", any_daemon.address],
                          reaper=self.reaper).result(self.args.timeout)
            self.rank_baseline_rss_bytes = probe["maxrss_bytes"]

    # ---- measurements -------------------------------------------------------------------------
    def measure_cat(self):
        r = run_timed(["cat", *self.shards], self.args.timeout, discard_stdout=True)
        return {"seconds": r["wall_s"], "bytes": self.file_bytes, "user_s": r["user_s"], "sys_s": r["sys_s"]}

    def measure_pread(self):
        return last_json_line(run_timed([self.pread_bench, "--threads", "2", *self.shards], self.args.timeout))

    def measure_tcp(self):
        return last_json_line(run_timed([self.tcp_bench, *self.shards], self.args.timeout))

    def measure_loader(self, kind):
        path = self.bin_path if kind == "torch_load" else self.checkpoint
        r = run_timed([self.python, SOURCE_DIR / "bench" / "python_loaders.py", kind, path, self.args.touch],
                      self.args.timeout)
        sample = last_json_line(r)
        if sample["bytes"] < self.tensor_bytes:
            raise RuntimeError(f"{kind} returned {sample['bytes']} bytes of tensors, not {self.tensor_bytes}")
        sample["process_wall_s"] = r["wall_s"]
        sample["result_memory"] = ("owned (anonymous)" if sample["anon_growth_bytes"] >= 0.9 * self.tensor_bytes
                                   else "page-cache mapping (file-backed)")
        return sample

    def measure_ranks(self, scenario):
        daemon_keys, source = RANK_SCENARIOS[scenario]
        world = len(daemon_keys)
        port = free_port()
        serving = sorted({k for k in daemon_keys if source == "stream"})
        cpu_before = {k: processes.proc_cpu_seconds(self.daemons[k].pid) for k in serving}
        poller = RssPoller(self.daemons["s"].pid) if scenario == "stream_4_1d" else None
        started = []
        try:
            for rank, key in enumerate(daemon_keys):
                report = self.run_dir / f"{scenario}-rank{rank}.json"
                report.unlink(missing_ok=True)
                env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=str(port))
                cmd = [self.metactl, "load", MODEL, "--daemon", self.daemons[key].address, "--rank", rank,
                       "--world", world, "--source", source, "--device", "cpu", "--report", report,
                       "--timeout", int(self.args.timeout)]
                if self.args.read_threads:
                    cmd += ["--read-threads", self.args.read_threads]
                if self.stdbuf:  # line-buffered stdout: each line is time-stamped when printed
                    cmd = [self.stdbuf, "-oL", *cmd]
                started.append((rank, report, Timed(cmd, env=env, reaper=self.reaper)))
            results = processes.wait_all([timed for _, _, timed in started], self.args.timeout)
            ranks = [self.rank_result(rank, report, timed, r) for (rank, report, timed), r in zip(started, results)]
        finally:
            for _, _, timed in started:
                processes.stop(timed.proc)
            daemon_peak_kib = poller.stop() if poller else None
        if sum(r["bytes"] for r in ranks) != self.tensor_bytes:
            raise RuntimeError(f"{scenario}: ranks read {sum(r['bytes'] for r in ranks)} bytes, "
                               f"the checkpoint holds {self.tensor_bytes}")
        slowest = max(r["seconds"] for r in ranks)
        sample = {"seconds": slowest, "max_rank_seconds": slowest, "seconds_are": "slowest rank",
                  "bytes": self.tensor_bytes, "ranks": ranks}
        if all("load_window" in r for r in ranks):
            begin = min(r["load_window"][0] for r in ranks)
            end = max(r["load_window"][1] for r in ranks)
            sample.update(seconds=end - begin, span_s=end - begin, seconds_are="first start to last end")
            for r in ranks:  # relative to the first rank's start, for reading
                r["load_window"] = [r["load_window"][0] - begin, r["load_window"][1] - begin]
        for k in serving:
            user, system = processes.proc_cpu_seconds(self.daemons[k].pid)
            sample.setdefault("daemon_cpu", {})[k] = {"user_s": user - cpu_before[k][0],
                                                      "sys_s": system - cpu_before[k][1]}
        if daemon_peak_kib is not None:
            sample["daemon_peak_rss_kib_polled"] = daemon_peak_kib
            sample["daemon_vmhwm_kib"] = self.daemons["s"].rss_kib()["VmHWM"]
        return sample

    def rank_result(self, rank, report_path, timed, r):
        if r["rc"] != 0:
            raise RuntimeError(f"rank {rank} exited {r['rc']}:\n{r['stderr'][-3000:]}")
        report = json.loads(report_path.read_text())
        load_line = next(((t, m) for t, line in r["stdout_lines"] if (m := LOAD_LINE.match(line))), None)
        verified_at = next((t for t, line in r["stdout_lines"] if " verified " in line), None)
        seconds = report.get("seconds")
        seconds_from = "report"
        if seconds is None:
            if load_line is None:
                raise RuntimeError(f"rank {rank}: no \"seconds\" in its report and no load line:\n"
                                   f"{r['stdout_lines']}")
            seconds, seconds_from = float(load_line[1].group(1)), "stdout (2 decimals)"
        wrong = [t["name"] for t in report["tensors"]
                 if not t["filled"] or (t["name"] in self.digests and t["sha256"] != self.digests[t["name"]])]
        if wrong:
            raise RuntimeError(f"rank {rank}: {len(wrong)} tensors unfilled or with bytes that differ from the "
                               f"files, e.g. {wrong[:3]}")
        if "rss_before_bytes" in report and "rss_peak_bytes" in report:
            rss_before, rss_peak, rss_from = report["rss_before_bytes"], report["rss_peak_bytes"], "report"
        else:
            rss_before, rss_peak = self.rank_baseline_rss_bytes, r["maxrss_bytes"]
            rss_from = "fallback: wait4 maxrss of the rank - that of a metactl load stopped at GetPlan"
        result = {"rank": rank, "seconds": seconds, "seconds_from": seconds_from, "bytes": report["bytes_read"],
                  "rss_before_bytes": rss_before, "rss_peak_bytes": rss_peak, "rss_from": rss_from,
                  "process_wall_s": r["wall_s"], "user_s": r["user_s"], "sys_s": r["sys_s"],
                  "minor_faults": r["minor_faults"], "maxrss_bytes": r["maxrss_bytes"]}
        if load_line is not None and verified_at is not None and verified_at > load_line[0] + 1e-3:
            # Phases from when stdout lines arrived (line-buffered): the load line is printed
            # right after the load, the verified line after the report and the all-reduce.
            result["load_window"] = [timed.start + load_line[0] - seconds, timed.start + load_line[0]]
            result["phases_s"] = {"start_and_plan": load_line[0] - seconds, "load": seconds,
                                  "report_and_verify": verified_at - load_line[0],
                                  "exit": r["wall_s"] - verified_at}
        return result

    def measure(self, name):
        if name == "cat":
            return self.measure_cat()
        if name == "pread":
            return self.measure_pread()
        if name == "tcp":
            return self.measure_tcp()
        if name in LOADERS:
            return self.measure_loader(name)
        return self.measure_ranks(name)

    def run_rounds(self):
        for round_index in range(self.args.repeats):
            checkpoint_data.warm_page_cache(self.warm_files)
            for name in ORDER:
                if name not in self.args.only or name in self.errors:
                    continue
                t = time.monotonic()
                try:
                    sample = self.measure(name)
                except (RuntimeError, TimeoutError, OSError, ValueError, KeyError) as e:
                    self.errors[name] = f"round {round_index + 1}: {e}"
                    print(f"  round {round_index + 1}/{self.args.repeats} {name:<17} FAILED: {e}", flush=True)
                    continue
                sample["round"] = round_index
                self.samples[name].append(sample)
                print(f"  round {round_index + 1}/{self.args.repeats} {name:<17} {sample['seconds']:7.3f} s "
                      f"(harness {time.monotonic() - t:5.1f} s)", flush=True)

    def source(self):
        """Which sources the binaries were built from: the build's source folder, its git commit
        and the files that differed from it when this ran (the binaries may be older)."""
        cache = pathlib.Path(self.args.build_dir) / "CMakeCache.txt"
        home = next((line.split("=", 1)[1] for line in cache.read_text().splitlines()
                     if line.startswith("CMAKE_HOME_DIRECTORY:")), None) if cache.exists() else None
        info = {"build_dir": str(pathlib.Path(self.args.build_dir).resolve()), "source_dir": home,
                "metactl_built_at": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.metactl.stat().st_mtime))}
        if home:
            git = lambda *a: subprocess.run(["git", "-C", home, *a], capture_output=True, text=True).stdout  # noqa: E731
            info["commit"] = git("rev-parse", "HEAD").strip() or None
            info["uncommitted"] = [line[3:] for line in git("status", "--porcelain").splitlines()]
        return info

    def planner(self):
        out = "\n".join(line for _, line in run_timed([self.plan_bench], self.args.timeout)["stdout_lines"])
        wall = re.search(r"wall_ms_median_of_5 ([0-9.]+)", out)
        rss = re.search(r"peak_rss_mb ([0-9.]+)", out)
        return {"ms": float(wall.group(1)) if wall else None, "peak_rss_mb": float(rss.group(1)) if rss else None,
                "output": out}


    def getplan(self):
        """bench_getplan_1024's JSON line: 1,024 ranks asking two agents for a 405B plan."""
        result = run_timed([self.getplan_bench], self.args.timeout)
        for _, line in result["stdout_lines"]:
            print(f"  {line}", flush=True)
        return last_json_line(result)


def main():
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    reaper = Reaper()
    parent = pathlib.Path(args.work_dir).resolve()
    parent.mkdir(parents=True, exist_ok=True)
    if args.keep:
        work = parent / f"metaload-bench-{args.size_gib:g}gib"
        work.mkdir(exist_ok=True)
    else:
        work = pathlib.Path(tempfile.mkdtemp(prefix="metaload-bench-", dir=parent))
    bench = Bench(args, reaper)
    errors = []
    started = time.monotonic()
    cpu_start = processes.machine_cpu_seconds()
    main_part = bool(args.only - set(CASES_APART))
    try:
        machine = checkpoint_data.machine()
        if main_part:
            print(f"preparing {args.size_gib:g} GiB of data in {work}", flush=True)
            bench.prepare(work)
        planner = bench.planner() if "planner" in args.only else {"ms": None}
        getplan = bench.getplan() if "getplan" in args.only else {}
        if main_part:
            bench.start_daemons()
            bench.run_rounds()
        def run_case(name, case_class, what):
            if name not in args.only:
                return None
            case = case_class(bench, args, reaper)
            print(f"{name}: preparing {what} in {work}", flush=True)
            case.prepare(work)
            case.run_rounds()
            return case

        e2e = run_case("e2e", E2E, f"{args.e2e_size_gib:g} GiB")
        cold = run_case("e2e-cold", E2ECold, f"{args.e2e_size_gib:g} GiB, the page cache dropped before every run")
        fp8 = run_case("e2e-fp8", E2EFp8, "the FP8 checkpoint of the e2e model " + (
            f"({args.e2e_size_gib:g} GiB)" if not args.e2e_dims else str(args.e2e_dims)))
        scale = run_case("scale", Scale, "a DeepSeek-V3-shaped checkpoint")
        cluster = run_case("cluster", regimes.Cluster, f"{args.cluster_hosts} emulated hosts over emulated storage, {args.e2e_size_gib:g} GiB")
        bucket = run_case("objectstore", objectstore.ObjectStore, "{}x{} ranks reading an S3 bucket, {}".format(
            *args.objectstore_shape, args.e2e_dims or f"{args.e2e_size_gib:g} GiB"))
        keys, absolute, growth = summarize(bench.samples)
        keys["planner_405b_1024_ms"] = planner["ms"]
        keys["getplan_1024_ranks_s"] = getplan.get("getplan_1024_ranks_s")
        keys["coordinator_peak_rss_mib_1024"] = getplan.get("coordinator_peak_rss_mib_1024")
        all_daemons = [*bench.daemons.values(), *([e2e.daemon] if e2e is not None and e2e.daemon else []),
                       *([scale.daemon] if scale is not None and scale.daemon else [])]
        daemon_cpu_s = sum(sum(processes.proc_cpu_seconds(d.pid)) for d in all_daemons)
        ours = resource.getrusage(resource.RUSAGE_CHILDREN)
        me = resource.getrusage(resource.RUSAGE_SELF)
        busy, total = (end - begin for end, begin in zip(processes.machine_cpu_seconds(), cpu_start))
        ours_s = ours.ru_utime + ours.ru_stime + me.ru_utime + me.ru_stime + daemon_cpu_s
        result = {
            **{k: keys.get(k) for k in TARGETS},
            "targets": verdicts(keys),
            **{k: keys.get(k) for k in EXTRA_KEYS},
            "extra_keys": EXTRA_KEYS,
            "absolute": absolute,
            "rank_rss_growth_by_rank": growth,
            "daemon_idle_rss_mib": {k: v / 1024 for k, v in getattr(bench, "daemon_idle_rss_kib", {}).items()},
            "planner": planner,
            "getplan_1024": getplan,
            "machine": machine,
            "load_average_at_end": list(os.getloadavg()),
            # How shared the machine was: CPU seconds the whole machine spent busy during the run,
            # and how many of them were not this benchmark's (other users' builds and tests).
            "machine_cpu_busy_s": busy,
            "machine_cpu_capacity_s": total,
            "other_processes_cpu_s": max(0.0, busy - ours_s),
            "data": bench.data_summary() if main_part else None,
            "source": bench.source(),
            "repeats": args.repeats,
            "metactl_load_read_threads": args.read_threads or "metactl default",
            "python_loaders_touch": args.touch,
            "notes": NOTES,
            "errors": bench.errors,
            "samples": bench.samples,
            "harness_seconds": time.monotonic() - started,
        }
        if not main_part:  # only the e2e, scale and cluster cases ran: none of the above was measured
            result = {k: result[k] for k in ("machine", "load_average_at_end", "machine_cpu_busy_s",
                                             "machine_cpu_capacity_s", "other_processes_cpu_s", "harness_seconds")}
            result["source"] = bench.source()
        if e2e is not None:
            e2e_keys, e2e_absolute = summarize_e2e(e2e.samples, e2e.tensor_bytes)
            e2e_result = {**{k: e2e_keys.get(k) for k in E2E_TARGETS}, "targets": e2e_verdicts(e2e_keys),
                          "e2e_fsdp_daemon_vs_checkpoint": e2e_keys["e2e_fsdp_daemon_vs_checkpoint"],
                          "absolute": e2e_absolute, "data": e2e.data_summary(), "notes": E2E_NOTES,
                          "errors": e2e.errors, "samples": e2e.samples}
            result.update({k: e2e_keys.get(k) for k in E2E_TARGETS})
            result["e2e"] = e2e_result
            result["harness_seconds"] = time.monotonic() - started
        if cold is not None:
            _, cold_absolute = summarize_e2e(cold.samples, cold.tensor_bytes)
            result["e2e_cold"] = {**cold_keys(cold_absolute), "absolute": cold_absolute, "data": cold.data_summary(),
                                  "errors": cold.errors, "samples": cold.samples}
            result["e2e_onehost_cold_vs_best_peer"] = result["e2e_cold"]["e2e_onehost_cold_vs_best_peer"]
            result["harness_seconds"] = time.monotonic() - started
        if fp8 is not None:
            fp8_keys, fp8_absolute = summarize_e2e_fp8(fp8.samples, fp8.tensor_bytes)
            result["e2e_fp8"] = {**fp8_keys, "targets": verdicts(fp8_keys, E2E_FP8_TARGETS),
                                 "loaders_agree": fp8.agreement, "absolute": fp8_absolute,
                                 "data": fp8.data_summary(), "notes": E2E_FP8_NOTES, "errors": fp8.errors,
                                 "samples": fp8.samples}
            result.update(fp8_keys)
            result["harness_seconds"] = time.monotonic() - started
        if scale is not None:
            result["scale"] = scale.summary()
            for key in ("parse_100k_tensors_s", "materialize_100k_tensors_s"):
                result[key] = result["scale"][key]
            result["harness_seconds"] = time.monotonic() - started
        if cluster is not None:
            result["cluster"] = cluster.summary()
            result.update(result["cluster"]["keys"])
            result["harness_seconds"] = time.monotonic() - started
        if bucket is not None:
            result["objectstore"] = bucket.summary()
            result.update(result["objectstore"]["keys"])
            result["harness_seconds"] = time.monotonic() - started
        pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        if main_part:
            print_table(result)
        if e2e is not None:
            print_e2e_table(result["e2e"])
            errors.extend(f"e2e {name}: {why}" for name, why in e2e.errors.items())
        if cold is not None:
            c = result["e2e_cold"]
            print("\nend-to-end FSDP2 on one host, page cache dropped before every run")
            print_e2e_rows(c["absolute"], E2E_LABELS, cold.tensor_bytes)
            value = c["e2e_onehost_cold_vs_best_peer"]
            print(f"  e2e_onehost_cold_vs_best_peer {'n/a' if value is None else f'{value:.2f}'} "
                  f"(best peer: {c['e2e_onehost_cold_best_peer']}; extra)")
            errors.extend(f"e2e-cold {name}: {why}" for name, why in cold.errors.items())
        if fp8 is not None:
            print_e2e_fp8_table(result["e2e_fp8"])
            errors.extend(f"e2e-fp8 {name}: {why}" for name, why in fp8.errors.items())
        if scale is not None:
            print_scale_table(result["scale"])
        if cluster is not None:
            regimes.print_cluster_table(result["cluster"])
            errors.extend(f"cluster {name}: {why}" for name, why in cluster.errors.items())
        if bucket is not None:
            objectstore.print_objectstore_table(result["objectstore"])
            errors.extend(f"{name}: {why}" for name, why in bucket.errors.items())
        print(f"\nwrote {args.out} ({result['harness_seconds']:.0f} s)")
        errors.extend(f"{name}: {why}" for name, why in bench.errors.items())
        for line in errors:
            print(f"run_bench: could not measure {line}", file=sys.stderr)
    except (RuntimeError, TimeoutError, OSError) as e:
        errors.append(str(e))
        print(f"run_bench: {e}", file=sys.stderr)
    finally:
        reaper.stop_all()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
