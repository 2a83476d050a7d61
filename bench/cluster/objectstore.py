"""The objectstore regime of bench/run_bench.py (`--only objectstore`, issue 38 item 5): the
checkpoint in an S3 bucket, read by FSDP ranks on emulated hosts (bench/cluster/hosts.py), one
rank set per loader, in interleaved rounds.

The bucket is a real S3 server (moto's, tests/integration/s3_server.py: Signature V4 checked)
behind the fault proxy (tests/integration/s3_fault_proxy.py) shaped like a cloud bucket: first
byte after `first_byte_ms` (30), `connection_mb_per_s` per connection (100) and
`aggregate_mb_per_s` in all (1500). The proxy counts the object bytes it served; that count,
over the checkpoint's safetensors bytes, is each loader's bucket/ckpt. On emulated hosts the
proxy listens on the bridge's own address (every host reaches it over its shaped link); with one
host (`--objectstore-shape 1xR`, no root needed) everything runs on loopback.

Loaders (bench/e2e_fsdp.py's cases, bench/s3_loaders.py):
  metaload          a metad per host (host 0's the coordinator, the others its agents), the
                    model registered from s3://; every rank materialize(daemon=its host's metad)
  runai             the Run:ai Model Streamer at its defaults (8 readers, 8 MiB chunks for S3)
  runai_tuned       the same at its documented tuning: RUNAI_STREAMER_CONCURRENCY=16 (vLLM's
                    documented example; 16 x 100 MB/s is past the aggregate cap),
                    RUNAI_STREAMER_MEMORY_LIMIT=-1 (unlimited)
  runai_dist        its distributed mode (RUNAI_STREAMER_DIST=1: the ranks of a host split the
                    reads and broadcast; Gloo needs the 1, its default is NCCL only)
  runai_dist_tuned  the two together
  dcp_s3fs          s3fs copies the folder to each host's disk (its first rank), then DCP's
                    HuggingFaceStorageReader reads it there (it opens local files only)
  boto3             get_object of every file on every rank, then safetensors.torch.load

In round 1 (unless --e2e-no-check) every rank compares its local shards with the files outside
the clock. A loader's time is its slowest rank's, barrier to barrier; medians over rounds.
"""
import os
import pathlib
import shutil
import statistics
import sys

import checkpoint_data
import processes
from e2e import interleaved_rounds, rank_lines
from hosts import EmulatedCluster, check_can_emulate
from peer_loaders import DIST
from processes import Daemon, run_timed
from regimes import print_verdicts, target_verdicts

BENCH_DIR = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH_DIR.parent / "tests" / "integration"))
from s3_fault_proxy import FaultProxy  # noqa: E402
from s3_server import S3Server  # noqa: E402

MODEL, BUCKET, PREFIX = "objectstore", "models", "llama"
GIB = 2**30
TUNED = {"RUNAI_STREAMER_CONCURRENCY": "16", "RUNAI_STREAMER_MEMORY_LIMIT": "-1"}
LOADERS = {  # name -> (bench/e2e_fsdp.py case, environment of its ranks)
    "metaload": ("metaload_daemon", {}),
    "runai": ("s3_runai", {}),
    "runai_tuned": ("s3_runai", TUNED),
    "runai_dist": ("s3_runai_dist", DIST),
    "runai_dist_tuned": ("s3_runai_dist", {**DIST, **TUNED}),
    "dcp_s3fs": ("s3_dcp", {}),
    "boto3": ("s3_boto3", {}),
}
# key -> (target, "min" | "max", what): over the medians of one run.
TARGETS = {
    "e2e_objectstore_vs_best_peer": (1.5, "min", "the fastest peer's time / metaload's"),
    "e2e_objectstore_storage_over_checkpoint": (1.05, "max", "bytes the bucket served metaload / checkpoint"),
    "e2e_objectstore_rank_peak_rss_over_shard": (1.2, "max", "metaload's worst rank: peak RSS growth / shard"),
    "e2e_objectstore_daemon_peak_rss_over_cap": (1.0, "max", "the largest metad's peak RSS growth in a load / "
                                                  "its streaming memory cap"),
}
EXTRA_KEYS = ("e2e_objectstore_daemon_peak_rss_mib",)  # the largest metad's peak growth in a load
# What a metad's streams may hold over its idle RSS with the node-config defaults
# (docs/node-config.md "Limits and memory"): max_streams (256) x 2 x chunk_size (1 MiB),
# ~25 KiB of gRPC state a stream, and the pool's 64 chunks; for objects (docs/object-storage.md
# "Read once per node") the read-ahead budget (256 MiB) and a part (8 MiB) per io thread
# (clamp(2 x cores, 4, 32), as daemon/service/metad_service.cc counts them).
IO_THREADS = min(max(2 * (os.cpu_count() or 1), 4), 32)
DAEMON_STREAMING_CAP_MIB = 256 * 2 * 1 + 256 * 25 / 1024 + 64 + 256 + IO_THREADS * 8


def parse_shape(text):
    """"HxR" -> (hosts, ranks per host), each 1-16; raises ValueError."""
    try:
        hosts, ranks = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"{text!r}: want HOSTSxRANKS, e.g. 4x2") from None
    if not (1 <= hosts <= 16 and 1 <= ranks <= 16):
        raise ValueError(f"{text!r}: hosts and ranks per host from 1 to 16")
    return hosts, ranks


class ObjectStore:
    def __init__(self, bench, args, reaper):
        self.bench, self.args, self.reaper = bench, args, reaper
        self.hosts, self.ranks_per_host = args.objectstore_shape
        self.world = self.hosts * self.ranks_per_host
        self.loaders = list(args.objectstore_loaders)
        self.samples = {x: [] for x in self.loaders}
        self.errors = {}
        self.daemon_growth_kib = 0

    # ---- data -------------------------------------------------------------------------------
    def prepare(self, work):
        if self.hosts > 1:
            why_not = check_can_emulate(None)
            if why_not:
                raise RuntimeError(f"{why_not} (--objectstore-shape 1xR runs on one host without)")
        size_bytes = int(self.args.e2e_size_gib * GIB)
        self.dims = self.args.e2e_dims or checkpoint_data.llama_dims(size_bytes)
        if self.args.e2e_dims:
            per_layer, outside_layers = checkpoint_data.llama_bytes(self.dims)
            size_bytes = self.dims["layers"] * per_layer + outside_layers
        # Objects of --objectstore-shard-mb (default 512 MB: a 1 GiB checkpoint in 3 objects, as
        # a 1.5B model's transformers saves; real shards are up to 5 GB).
        shards = max(1, -(-size_bytes // int(self.args.objectstore_shard_mb * 1e6)))
        self.work = work / "objectstore"
        self.checkpoint = self.work / "llama"
        self.work.mkdir(parents=True, exist_ok=True)
        checkpoint_data.synthesize(self.bench.metactl, self.checkpoint, size_bytes, shards=shards, dims=self.dims)
        self.shards = checkpoint_data.shard_files(self.checkpoint)
        self.tensor_bytes = sum(sum(e["data_offsets"][1] - e["data_offsets"][0] for e in
                                    checkpoint_data.read_header(f)[1].values()) for f in self.shards)
        self.file_bytes = sum(f.stat().st_size for f in self.shards)

    def data_summary(self):
        return {"checkpoint": str(self.checkpoint), "dims": self.dims, "tensor_bytes": self.tensor_bytes,
                "shard_file_bytes": self.file_bytes, "objects": len(self.shards), "hosts": self.hosts,
                "ranks_per_host": self.ranks_per_host, "loaders": self.loaders,
                "repeats": self.args.objectstore_repeats, "bucket": self.bucket_shape()}

    def bucket_shape(self):
        return {"first_byte_latency_ms": self.args.objectstore_first_byte_ms,
                "connection_mb_per_s": self.args.objectstore_connection_mb_per_s,
                "aggregate_mb_per_s": self.args.objectstore_aggregate_mb_per_s}

    # ---- one run ----------------------------------------------------------------------------
    def served(self):
        """(object bytes the bucket served under the prefix, of which in *.safetensors objects,
        {key: {"requests", "body_bytes"}} of every key asked for)."""
        stats = self.proxy.stats()["by_key"]
        mine = {k: v["body_bytes"] for k, v in stats.items() if k.startswith(f"/{BUCKET}/{PREFIX}/")}
        by_key = {k: {"requests": v["requests"], "body_bytes": v["body_bytes"]} for k, v in stats.items()}
        return sum(mine.values()), sum(v for k, v in mine.items() if k.endswith(".safetensors")), by_key

    def measure(self, loader, check):
        case, env = LOADERS[loader]
        if self.cluster is not None:
            self.cluster.clear_disks()  # s3_dcp's copies: each run pays for its own
            local = self.cluster.local
        else:
            local = self.work / "local"
            shutil.rmtree(local, ignore_errors=True)
            local.mkdir()
        cmd = [self.bench.python, BENCH_DIR / "e2e_fsdp.py", case, self.url, "--name", MODEL,
               "--mesh", f"1,{self.world}", "--config", self.checkpoint, "--check-against", self.checkpoint,
               "--local-dir", local]
        if case == "metaload_daemon":
            cmd += ["--daemon", self.rank_daemon]
        if check:
            cmd.append("--check")
        self.proxy.reset_stats()
        net = {"GLOO_SOCKET_IFNAME": "eth0"} if self.cluster is not None else {}
        # metaload's ranks get no credentials: only the daemons hold them.
        s3_env = self.s3_env if case != "metaload_daemon" else {}
        results = processes.run_ranks(
            cmd, self.world, self.args.timeout, self.reaper,
            prefix=(lambda r: self.cluster.prefix(r // self.ranks_per_host)) if self.cluster is not None else None,
            master_addr=self.cluster.addresses[0] if self.cluster is not None else "127.0.0.1",
            local_world=self.ranks_per_host, TOKENIZERS_PARALLELISM="false", **s3_env, **env, **net)
        ranks = rank_lines(f"objectstore/{loader}", results)
        bucket_bytes, bucket_tensor_file_bytes, by_key = self.served()
        held = sum(x["shard_bytes"] for x in ranks)
        if held != self.tensor_bytes:
            raise RuntimeError(f"objectstore/{loader}: the ranks hold {held} bytes of shards, "
                               f"the checkpoint's tensors are {self.tensor_bytes}")
        said = [x.get("s3_bytes") for x in ranks]
        sample = {"seconds": max(x["seconds"] for x in ranks), "checked": check,
                  "bucket_bytes": bucket_bytes, "bucket_tensor_file_bytes": bucket_tensor_file_bytes,
                  "storage_over_checkpoint": bucket_tensor_file_bytes / self.file_bytes,
                  "loader_s3_bytes": None if None in said else sum(said), "bucket_by_key": by_key,
                  "rank_peak_rss_over_shard": max(x["peak_rss_growth_bytes"] / x["shard_bytes"] for x in ranks),
                  "ranks": [{k: x.get(k) for k in ("seconds", "s3_bytes", "file_tensor_bytes", "shard_bytes",
                                                   "peak_rss_growth_bytes", "metaload_report", "check_problems")}
                            for x in ranks]}
        if case == "metaload_daemon":
            growth = [d.rss_kib()["VmHWM"] - idle for d, idle in zip(self.daemons, self.daemon_idle_kib)]
            self.daemon_growth_kib = max(self.daemon_growth_kib, *growth)
            sample["daemon_peak_rss_growth_kib"] = growth
        return sample

    def reset_daemon_peaks(self):
        """Every metad's VmHWM := its VmRSS now (root may write another process's clear_refs);
        remembers that RSS as the daemon's idle one."""
        self.daemon_idle_kib = []
        for d in self.daemons:
            pathlib.Path(f"/proc/{d.pid}/clear_refs").write_text("5")
            self.daemon_idle_kib.append(d.rss_kib()["VmRSS"])

    # ---- rounds -----------------------------------------------------------------------------
    def start_daemons(self):
        """A metad per host, roots the bucket's prefix: host 0's the coordinator. Each listens on
        its own host's loopback (the same port in every network namespace) and, past one host,
        on the host's address too, for the agents."""
        env = dict(self.s3_env_full)
        self.daemons = []
        if self.cluster is None:
            self.daemons.append(Daemon(self.bench.metad, self.work, "node-0", [self.bucket_root], self.world,
                                       self.reaper, env=env))
            self.rank_daemon = self.daemons[0].address
        else:
            port = processes.free_port()
            for h in range(self.hosts):
                coordinator = f"{self.cluster.addresses[0]}:{port}" if h else None
                self.daemons.append(Daemon(self.bench.metad, self.work, f"node-{h}", [self.bucket_root],
                                           self.ranks_per_host, self.reaper, coordinator=coordinator,
                                           listen=f"0.0.0.0:{port}", advertise=f"{self.cluster.addresses[h]}:{port}",
                                           prefix=self.cluster.prefix(h), env=env))
            self.rank_daemon = f"127.0.0.1:{port}"
        run_timed([*(self.cluster.prefix(0) if self.cluster is not None else []), self.bench.metactl, "register",
                   MODEL, "--checkpoint", self.url, "--daemon",
                   self.rank_daemon if self.cluster is not None else self.daemons[0].address], 300, env=env)
        self.reset_daemon_peaks()

    def run_rounds(self):
        self.cluster = None
        cluster = None
        try:
            if self.hosts > 1:
                cluster = EmulatedCluster(self.work / "cluster", None, self.checkpoint.parent, self.hosts,
                                          lambda i: False, self.reaper)
                cluster.__enter__()
                self.cluster = cluster
                listen = cluster.gateway
            else:
                listen = "127.0.0.1"
            self.run_with_bucket(listen)
        finally:
            if cluster is not None:
                cluster.close()

    def run_with_bucket(self, listen):
        server = S3Server(self.work)
        proxy = None
        try:
            server.create_bucket(BUCKET)
            self.url = server.upload_folder(self.checkpoint, BUCKET, PREFIX)
            self.bucket_root = f"s3://{BUCKET}"
            shape = self.bucket_shape()
            proxy = FaultProxy(self.work, f"127.0.0.1:{server.port}",
                               ["--listen", f"{listen}:0",
                                "--first-byte-latency-ms", shape["first_byte_latency_ms"],
                                "--connection-bytes-per-s", shape["connection_mb_per_s"] * 1e6,
                                "--aggregate-bytes-per-s", shape["aggregate_mb_per_s"] * 1e6])
            self.proxy = proxy
            self.s3_env_full = server.env(AWS_ENDPOINT_URL=proxy.endpoint, AWS_EC2_METADATA_DISABLED="true",
                                          RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0")
            self.s3_env = {k: v for k, v in self.s3_env_full.items()
                           if k.startswith(("AWS_", "RUNAI_STREAMER_"))}
            self.daemons = []
            try:
                if "metaload" in self.loaders:
                    try:
                        self.start_daemons()
                    except (RuntimeError, TimeoutError, OSError) as e:
                        self.errors["objectstore/metaload"] = f"its daemons: {e}"
                        print(f"  objectstore metaload FAILED to start: {e}", flush=True)
                interleaved_rounds(
                    list(self.loaders), self.args.objectstore_repeats, not self.args.e2e_no_check,
                    before_round=lambda: None,  # the bucket is the server's memory: nothing to warm
                    measure=self.measure, record=lambda loader, sample: self.samples[loader].append(sample),
                    errors=self.errors, error_key=lambda loader: f"objectstore/{loader}",
                    label="objectstore", width=16,
                    detail=lambda s: f"  bucket/ckpt {s['storage_over_checkpoint']:5.2f}")
            finally:
                for d in self.daemons:
                    processes.stop(d.proc)
        finally:
            if proxy is not None:
                proxy.stop()
            server.stop()

    # ---- summary ----------------------------------------------------------------------------
    def medians(self, loader):
        samples = self.samples.get(loader) or []
        if not samples:
            return None

        def median(key):
            values = [s[key] for s in samples if s.get(key) is not None]
            return statistics.median(values) if values else None

        return {"seconds": median("seconds"), "min_s": min(s["seconds"] for s in samples),
                "max_s": max(s["seconds"] for s in samples), "storage_over_checkpoint": median("storage_over_checkpoint"),
                "bucket_bytes": median("bucket_tensor_file_bytes"),
                "rank_peak_rss_over_shard": median("rank_peak_rss_over_shard"), "runs": len(samples)}

    def summary(self):
        table = {x: self.medians(x) for x in self.loaders}
        peers = {x: m for x, m in table.items() if x != "metaload" and m}
        best = min(peers, key=lambda x: peers[x]["seconds"]) if peers else None
        ours = table.get("metaload")
        cap_mib = self.args.objectstore_daemon_cap_mib or DAEMON_STREAMING_CAP_MIB
        growth_mib = self.daemon_growth_kib / 1024 if self.samples.get("metaload") else None
        keys = {
            "e2e_objectstore_vs_best_peer": peers[best]["seconds"] / ours["seconds"] if ours and best else None,
            "e2e_objectstore_storage_over_checkpoint": ours["storage_over_checkpoint"] if ours else None,
            "e2e_objectstore_rank_peak_rss_over_shard": ours["rank_peak_rss_over_shard"] if ours else None,
            "e2e_objectstore_daemon_peak_rss_over_cap": growth_mib / cap_mib if growth_mib is not None else None,
            "e2e_objectstore_daemon_peak_rss_mib": growth_mib,
        }
        return {"keys": keys, "targets": target_verdicts(keys, TARGETS), "best_peer": best, "table": table,
                "daemon_cap_mib": cap_mib, "data": self.data_summary(), "errors": self.errors,
                "samples": self.samples}


def print_objectstore_table(summary):
    data = summary["data"]
    shape = data["bucket"]
    print(f"\nobjectstore ({data['hosts']} hosts x {data['ranks_per_host']} ranks, {data['tensor_bytes'] / GIB:.2f} GiB "
          f"in {data['objects']} objects; bucket {shape['first_byte_latency_ms']:g} ms first byte, "
          f"{shape['connection_mb_per_s']:g} MB/s a connection, {shape['aggregate_mb_per_s']:g} MB/s in all)")
    print(f"  {'loader':<17} {'median s [min-max]':<24} {'bucket bytes':>14} {'bucket/ckpt':>11} {'rank RSS/shard':>14}")
    for loader, m in summary["table"].items():
        if m is None:
            why = summary["errors"].get(f"objectstore/{loader}", "not measured")
            print(f"  {loader:<17} FAILED: {why.strip().splitlines()[-1][:200]}")  # the error, not the traceback
            continue
        span = f"{m['seconds']:.3f} [{m['min_s']:.3f}-{m['max_s']:.3f}]"
        print(f"  {loader:<17} {span:<24} {m['bucket_bytes']:>14,.0f} {m['storage_over_checkpoint']:>11.2f} "
              f"{m['rank_peak_rss_over_shard']:>14.2f}")
    print_verdicts(summary["targets"], width=42)
    growth = summary["keys"]["e2e_objectstore_daemon_peak_rss_mib"]
    if growth is not None:
        print(f"  metad peak RSS growth in a load {growth:.0f} MiB (its streaming cap {summary['daemon_cap_mib']:.0f} MiB)")
