"""The cluster regimes of bench/run_bench.py (`--only cluster`, issue 22 items 1-2): the e2e
case's loaders (bench/e2e_fsdp.py, one rank per emulated host) where clusters differ from one
host. Hosts are network and mount namespaces, storage an emulated network file system that
keeps nothing in a shared page cache and shares one bandwidth (bench/cluster/hosts.py):

  hosts      4 hosts x 1 rank, FSDP over 4, every host mounts the storage
  noshared   4 hosts, only host 0 mounts it. metaload: a metad on host 0 serves the model and
             every rank streams its shards from it. The peers first copy the checkpoint to every
             host's local disk over the emulated network (bench/cluster/net_copy.py), and that
             copy's time is added to theirs
  hsdp       4 hosts as 2 replicas x fsdp 2 (the HSDP mesh), every host mounts the storage
  replicate  4 hosts as 4 replicas x 1 (FSDP2 on a (4, 1) mesh: whole tensors on every rank)

Loaders: metaload and the e2e case's peers (dcp, dcp_threads, hf, hf_dist, broadcast), and the
file-system peers of bench/peer_loaders.py: the Run:ai Model Streamer (runai; runai_dist, its
distributed mode at its default local grouping, one rank a host here; runai_dist_global, its
global mode over every host) and fastsafetensors' process-group load (fastsafetensors_buffered).

Every round runs every loader once per regime, in an order rotated by one each round; every
run is four fresh processes, and its bytes from storage are the file system's own count of what
it served. In round 1 (unless --e2e-no-check) every rank's local shards are compared with the
files outside the clock (through a path that bypasses the emulated storage). A loader's time is
its slowest rank's, barrier to barrier (bench/e2e_fsdp.py); medians over rounds.
Each run also records its ranks' CPU seconds and how busy the whole machine was over the slowest
rank's load section: the emulated hosts share this machine's cores, and a regime whose machine is
busy all through measures those cores, not the emulated links.
"""
import json
import pathlib
import shutil
import statistics

import checkpoint_data
import peer_loaders
import processes
from e2e import E2E, interleaved_rounds, rank_lines
from hosts import EmulatedCluster, check_can_emulate
from processes import Daemon, Timed, free_port, run_timed, wait_all

BENCH_DIR = pathlib.Path(__file__).resolve().parents[1]
HOSTS = 4  # the default; --cluster-hosts N (even) for the model's second point
MODEL = "cluster"


def regimes_for(hosts):
    """name -> (mesh (replicas, shards), does host i see the storage), at `hosts` hosts."""
    return {
        "hosts": ((1, hosts), lambda i: True),
        "noshared": ((1, hosts), lambda i: i == 0),
        "hsdp": ((2, hosts // 2), lambda i: True),
        "replicate": ((hosts, 1), lambda i: True),
    }


REGIMES = regimes_for(HOSTS)
# The runai* and fastsafetensors* loaders are bench/peer_loaders.py's: runai_dist at its default
# local mode splits the reads among the ranks of a host (one here), runai_dist_global among all;
# fastsafetensors reads buffered, as it does by itself on NFS (it takes throttlefs's FUSE mount for
# a local disk and would ask for O_DIRECT).
LOADERS = ("metaload", "dcp", "dcp_threads", "hf", "hf_dist", "broadcast", "runai", "runai_dist",
           "runai_dist_global", "fastsafetensors_buffered")
# key -> (target, "min" | "max", what): ratios over the medians of one run.
TARGETS = {
    "e2e_hosts_vs_best_peer": (1.5, "min", "hosts: the fastest peer's time / metaload's"),
    "e2e_hosts_vs_storage_limit": (0.85, "min", "hosts: checkpoint bytes / storage bandwidth / metaload's time"),
    "e2e_noshared_vs_best_peer": (2.0, "min", "noshared: the fastest peer's time (copy included) / metaload's"),
    "e2e_replicas_storage_over_checkpoint": (1.05, "max", "hsdp: bytes metaload read from storage / checkpoint"),
    "e2e_replicas_vs_best_peer": (1.5, "min", "hsdp: the fastest peer's time / metaload's"),
    "e2e_replicate_vs_best_peer": (1.5, "min", "replicate: the fastest peer's time / metaload's"),
}
EXTRA_KEYS = ("e2e_replicate_storage_over_checkpoint", "e2e_hosts_storage_over_checkpoint")


class Cluster:
    def __init__(self, bench, args, reaper):
        self.bench, self.args, self.reaper = bench, args, reaper
        self.regimes, self.loaders = list(args.cluster_regimes), list(args.cluster_loaders)
        self.hosts = args.cluster_hosts
        self.meshes = regimes_for(self.hosts)
        self.samples = {r: {x: [] for x in self.loaders} for r in self.regimes}
        self.errors = {}
        self.throttlefs = pathlib.Path(args.build_dir).resolve() / "tests" / "throttlefs"

    def prepare(self, work):
        why_not = check_can_emulate(self.throttlefs)
        if why_not:
            raise RuntimeError(why_not)
        checkpoint = E2E(self.bench, self.args, self.reaper)
        checkpoint.prepare_checkpoint(work)
        self.checkpoint = checkpoint.checkpoint
        self.tensor_bytes, self.file_bytes = checkpoint.tensor_bytes, checkpoint.file_bytes
        self.dims = checkpoint.dims
        self.warm_files = checkpoint.warm_files
        self.work = work / "cluster"
        self.work.mkdir(parents=True, exist_ok=True)

    def data_summary(self):
        return {"checkpoint": str(self.checkpoint), "dims": self.dims, "tensor_bytes": self.tensor_bytes,
                "shard_file_bytes": self.file_bytes, "hosts": self.hosts, "regimes": self.regimes,
                "loaders": self.loaders, "repeats": self.args.cluster_repeats}

    # ---- one run ----------------------------------------------------------------------------
    def rank_cmd(self, cluster, loader, mesh, checkpoint, check):
        case = peer_loaders.rank_case(loader)[0]
        if loader == "metaload" and self.daemon_address:
            case = "metaload_daemon"
        cmd = [self.bench.python, BENCH_DIR / "e2e_fsdp.py", case, checkpoint, "--name", MODEL,
               "--mesh", f"{mesh[0]},{mesh[1]}"]
        if case == "metaload_daemon":  # the job ships the model's config.json, not its weights
            cmd += ["--daemon", self.daemon_address, "--config", cluster.local / "config"]
        if check:
            cmd += ["--check", "--check-against", cluster.reference / self.checkpoint.name]
        return cmd

    def copy_to_hosts(self, cluster):
        """The peers' first step where only host 0 sees the checkpoint: returns its seconds."""
        port = free_port()
        script = BENCH_DIR / "cluster" / "net_copy.py"
        src, dest = cluster.storage / self.checkpoint.name, cluster.local / self.checkpoint.name
        sender = Timed([*cluster.prefix(0), self.bench.python, script, "send", src, dest, port, self.hosts - 1],
                       reaper=self.reaper)
        receivers = [Timed([*cluster.prefix(i), self.bench.python, script, "receive", cluster.addresses[0], port,
                            dest], reaper=self.reaper) for i in range(1, self.hosts)]
        results = wait_all([sender, *receivers], self.args.timeout)
        for i, r in enumerate(results):
            if r["rc"] != 0:
                raise RuntimeError(f"net_copy on host {i} exited {r['rc']}: {r['stderr'][-2000:]}")
        return processes.last_json_line(results[0])

    def measure(self, cluster, regime, loader, check):
        mesh = self.meshes[regime][0]
        copy = None
        checkpoint = cluster.storage / self.checkpoint.name
        cluster.drop_caches()  # every run starts cold on every host
        before = cluster.storage_stats()  # the copy's reads count as the loader's
        if regime == "noshared" and loader != "metaload":
            cluster.clear_disks(keep=("config",))
            copy = self.copy_to_hosts(cluster)
            checkpoint = cluster.local / self.checkpoint.name
        cmd = self.rank_cmd(cluster, loader, mesh, checkpoint, check)
        results = processes.run_ranks(cmd, self.hosts, self.args.timeout, self.reaper, prefix=cluster.prefix,
                                      master_addr=cluster.addresses[0], local_world=1, GLOO_SOCKET_IFNAME="eth0",
                                      TOKENIZERS_PARALLELISM="false", **peer_loaders.rank_case(loader)[1])
        after = cluster.storage_stats()
        ranks = rank_lines(f"{regime}/{loader}", results)
        replicas = mesh[0]
        held = sum(x["shard_bytes"] for x in ranks)
        if held != self.tensor_bytes * replicas:
            raise RuntimeError(f"{regime}/{loader}: the ranks hold {held} bytes of shards, "
                               f"{replicas} replicas of the checkpoint are {self.tensor_bytes * replicas}")
        load_s = max(x["seconds"] for x in ranks)
        storage = after["bytes"] - before["bytes"]
        # The ranks' load sections overlap; the slowest one's window is the run's.
        slowest = max(ranks, key=lambda x: x["seconds"])
        sample = {"seconds": load_s + (copy["seconds"] if copy else 0.0), "load_seconds": load_s,
                  "copy_seconds": copy["seconds"] if copy else None, "storage_bytes": storage,
                  "storage_over_checkpoint": storage / self.file_bytes, "checked": check,
                  "ranks_cpu_s": sum(x.get("cpu_s", 0.0) for x in ranks),
                  "machine_busy_fraction": slowest["machine_busy_s"] / slowest["machine_capacity_s"]
                  if slowest.get("machine_capacity_s") else None,
                  "ranks": [{k: x.get(k) for k in ("seconds", "file_tensor_bytes", "shard_bytes",
                                                   "peak_rss_growth_bytes", "cpu_s", "cpu_sys_s", "minor_faults",
                                                   "context_switches", "metaload_report", "mesh")}
                            for x in ranks]}
        if copy:
            sample["copy"] = copy
        return sample

    # ---- rounds -----------------------------------------------------------------------------
    def run_regime(self, regime):
        mesh, sees = self.meshes[regime]
        with EmulatedCluster(self.work / regime, self.throttlefs, self.checkpoint.parent, self.hosts, sees, self.reaper,
                             bandwidth_mb_per_s=self.args.cluster_storage_mb_per_s,
                             latency_us=self.args.cluster_storage_latency_us,
                             link_gbit=self.args.cluster_link_gbit,
                             read_ahead_kib=self.args.cluster_read_ahead_kib) as cluster:
            self.described = cluster.describe()
            self.daemon_address = None
            daemon = None
            if regime == "noshared" and "metaload" in self.loaders:
                daemon = Daemon(self.bench.metad, self.work / regime, f"node-{regime}", [cluster.storage], self.hosts,
                                self.reaper, listen=f"{cluster.addresses[0]}:0", prefix=cluster.prefix(0))
                self.daemon_address = daemon.address
                for disk in cluster.disks:
                    (disk / "config").mkdir(exist_ok=True)
                    shutil.copy(self.checkpoint / "config.json", disk / "config" / "config.json")
                run_timed([*cluster.prefix(0), self.bench.metactl, "register", MODEL, "--checkpoint",
                           cluster.storage / self.checkpoint.name, "--daemon", daemon.address], 120)
            try:
                interleaved_rounds(
                    list(self.loaders), self.args.cluster_repeats, not self.args.e2e_no_check,
                    # The storage server's own memory holds the files, as a busy NFS server's
                    # would: the first run of a round must not pay for this machine's disk.
                    before_round=lambda: checkpoint_data.warm_page_cache(self.warm_files),
                    measure=lambda loader, check: self.measure(cluster, regime, loader, check),
                    record=lambda loader, sample: self.samples[regime][loader].append(sample),
                    errors=self.errors, error_key=lambda loader: f"{regime}/{loader}",
                    label=f"cluster {regime:<9}", width=24,
                    detail=lambda sample: f"  storage/ckpt {sample['storage_over_checkpoint']:5.2f}")
            finally:
                if daemon is not None:
                    processes.stop(daemon.proc)

    def run_rounds(self):
        for regime in self.regimes:
            self.run_regime(regime)

    # ---- summary ----------------------------------------------------------------------------
    def medians(self, regime, loader):
        samples = self.samples.get(regime, {}).get(loader) or []
        if not samples:
            return None
        return {"seconds": statistics.median(s["seconds"] for s in samples),
                "min_s": min(s["seconds"] for s in samples), "max_s": max(s["seconds"] for s in samples),
                "storage_over_checkpoint": statistics.median(s["storage_over_checkpoint"] for s in samples),
                "copy_seconds": statistics.median(s["copy_seconds"] for s in samples)
                if samples[0]["copy_seconds"] is not None else None, "runs": len(samples),
                "ranks_cpu_s": statistics.median(s["ranks_cpu_s"] for s in samples),
                "machine_busy_fraction": statistics.median(s["machine_busy_fraction"] for s in samples)
                if all(s.get("machine_busy_fraction") is not None for s in samples) else None}

    def best_peer(self, regime):
        peers = {x: self.medians(regime, x) for x in self.loaders if x != "metaload"}
        peers = {x: m for x, m in peers.items() if m}
        if not peers:
            return None, None
        name = min(peers, key=lambda x: peers[x]["seconds"])
        return name, peers[name]

    def summary(self):
        table = {r: {x: self.medians(r, x) for x in self.loaders} for r in self.regimes}
        keys = {}

        def vs_best(regime):
            ours, (name, peer) = table.get(regime, {}).get("metaload"), self.best_peer(regime)
            return (peer["seconds"] / ours["seconds"], name) if ours and peer else (None, name)

        def storage(regime):
            ours = table.get(regime, {}).get("metaload")
            return ours["storage_over_checkpoint"] if ours else None

        best = {}
        for regime, key in (("hosts", "e2e_hosts_vs_best_peer"), ("noshared", "e2e_noshared_vs_best_peer"),
                            ("hsdp", "e2e_replicas_vs_best_peer"), ("replicate", "e2e_replicate_vs_best_peer")):
            keys[key], best[regime] = vs_best(regime)
        hosts = table.get("hosts", {}).get("metaload")
        limit_s = self.file_bytes / (self.args.cluster_storage_mb_per_s * 1e6)
        keys["e2e_hosts_vs_storage_limit"] = limit_s / hosts["seconds"] if hosts else None
        keys["e2e_hosts_storage_over_checkpoint"] = storage("hosts")
        keys["e2e_replicas_storage_over_checkpoint"] = storage("hsdp")
        keys["e2e_replicate_storage_over_checkpoint"] = storage("replicate")
        return {"keys": keys, "targets": target_verdicts(keys, TARGETS), "best_peer": best, "table": table,
                "storage_limit_s": limit_s, "cluster": getattr(self, "described", None),
                "data": self.data_summary(), "errors": self.errors, "samples": self.samples}


def target_verdicts(keys, targets):
    """{key: {value, target, pass (None: not measured), what}} of `targets` (key -> (target,
    "min" | "max", what))."""
    verdicts = {}
    for key, (target, sense, what) in targets.items():
        value = keys.get(key)
        ok = None if value is None else (value >= target if sense == "min" else value <= target)
        verdicts[key] = {"value": value, "target": f"{'>=' if sense == 'min' else '<='} {target}", "pass": ok,
                         "what": what}
    return verdicts


def print_verdicts(verdicts, width=40):
    for key, v in verdicts.items():
        value = "n/a" if v["value"] is None else f"{v['value']:.2f}"
        verdict = {True: "PASS", False: "MISS", None: "not measured"}[v["pass"]]
        print(f"  {key:<{width}} {value:>6}  target {v['target']:<7} {verdict}")


def print_cluster_table(summary):
    print(f"\ncluster regimes ({summary['data']['hosts']} emulated hosts; seconds: median [min-max]; "
          "storage bytes / checkpoint)")
    for regime, loaders in summary["table"].items():
        for loader, m in loaders.items():
            if m is None:
                print(f"  {regime:<9} {loader:<24} not measured")
                continue
            copy = f"  (copy {m['copy_seconds']:.2f} s)" if m["copy_seconds"] is not None else ""
            busy = f"{m['machine_busy_fraction']:4.0%}" if m["machine_busy_fraction"] is not None else "  - "
            print(f"  {regime:<9} {loader:<24} {m['seconds']:7.3f} s [{m['min_s']:.3f}-{m['max_s']:.3f}]  "
                  f"storage/ckpt {m['storage_over_checkpoint']:5.2f}  ranks' CPU {m['ranks_cpu_s']:5.2f} s, "
                  f"machine busy {busy}{copy}")
    print_verdicts(summary["targets"])
