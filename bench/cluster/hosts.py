"""A cluster of emulated hosts on one machine, for the benchmark's cluster regimes
(bench/cluster/regimes.py; docs/performance.md says how to run it by hand).

Each host is a network namespace with its own address on one bridge, its link shaped to
`link_gbit` each way (tc tbf on both ends of its veth pair). Its processes run in a mount
namespace of their own (`unshare -m`), where two folders of the work dir are bind-mounted:
  STORAGE  the host's own mount of the emulated network file system (tests/bench/throttlefs.cc:
           one process, one mount per host, so hosts share no page cache but do share one link of
           `bandwidth_mb_per_s` with `latency_us` per request; drop_caches() empties every
           host's cache), or an empty folder on a host that cannot see the storage;
  LOCAL    the host's own local disk (a folder of its own): what a peer copies a checkpoint to;
  REFERENCE  the backing folder itself, past the emulated storage: for checking bytes outside the
           clock, never for loading.
The same paths mean different things on different hosts, as on a real cluster; each host has
a host name of its own too (a UTS namespace: `h0`, `h1`, ...), which loaders that group the
ranks of a node by host name (the Run:ai Model Streamer's distributed mode) see. The bridge has
an address of its own, `gateway` (.254), where a service of the whole cluster listens (the
objectstore regime's S3 endpoint).

Needs root (namespaces, mounts, tc), /dev/fuse, iproute2 and build/tests/throttlefs. Everything
made is undone on exit (processes stopped, mounts unmounted, namespaces and links deleted),
also after an exception.
"""
import json
import os
import pathlib
import shlex
import subprocess

import checkpoint_data
from processes import stop

STATS = ".throttlefs-stats"


def run(*argv):
    subprocess.run([str(a) for a in argv], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def drop_cache(mount):
    """Drops one mount's page cache (checkpoint_data.drop_page_cache on every file)."""
    checkpoint_data.drop_page_cache(sorted(p for p in pathlib.Path(mount).rglob("*") if p.is_file()))


def check_can_emulate(throttlefs):
    """None when this machine can run the emulated cluster, else why not (one line). `throttlefs`
    None: a cluster without the emulated file system (no host mounts it)."""
    if os.geteuid() != 0:
        return "the emulated cluster needs root (network and mount namespaces, FUSE mounts, tc)"
    if throttlefs is None:
        pass
    elif not pathlib.Path("/dev/fuse").exists():
        return "the emulated cluster needs /dev/fuse"
    elif not pathlib.Path(throttlefs).exists():
        return f"{throttlefs} is missing (libfuse3-dev was not installed when build/ was configured)"
    for tool in ("ip", "tc", "unshare"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], stdout=subprocess.DEVNULL).returncode != 0:
            return f"the emulated cluster needs `{tool}`"
    return None


class EmulatedCluster:
    """`hosts` emulated hosts; `sees_storage(i)` says whether host i mounts the storage."""

    def __init__(self, work, throttlefs, backing, hosts, sees_storage, reaper, *, bandwidth_mb_per_s=1000,
                 latency_us=1000, link_gbit=10.0, read_ahead_kib=4096):
        self.work = pathlib.Path(work)
        self.throttlefs, self.backing, self.hosts = throttlefs, pathlib.Path(backing), hosts
        self.sees = [bool(sees_storage(i)) for i in range(hosts)]
        self.reaper = reaper
        self.bandwidth_mb_per_s, self.latency_us, self.link_gbit = bandwidth_mb_per_s, latency_us, link_gbit
        self.read_ahead_kib = read_ahead_kib
        tag = f"{os.getpid() % 100000}"
        self.netns = [f"mlb{tag}h{i}" for i in range(hosts)]
        self.bridge = f"mlb{tag}br"
        subnet = 64 + os.getpid() % 128
        self.addresses = [f"10.{subnet}.0.{i + 1}" for i in range(hosts)]
        self.gateway = f"10.{subnet}.0.254"
        self.storage = self.work / "storage"  # the path every host's processes use
        self.local = self.work / "local"
        self.reference = self.work / "reference"
        self.mounts = [self.work / "mnt" / f"h{i}" for i in range(hosts)]
        self.disks = [self.work / "disk" / f"h{i}" for i in range(hosts)]
        self.fs = None
        self._made = []  # undo steps, run last first

    # ---- lifetime -------------------------------------------------------------------------
    def __enter__(self):
        try:
            self._make_network()
            self._make_storage()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        while self._made:
            undo = self._made.pop()
            try:
                undo()
            except (OSError, subprocess.CalledProcessError):
                pass  # best effort: the rest must still be undone

    def _make_network(self):
        run("ip", "link", "add", self.bridge, "type", "bridge")
        self._made.append(lambda: run("ip", "link", "del", self.bridge))
        run("ip", "link", "set", self.bridge, "up")
        run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        rate = f"{self.link_gbit:g}gbit"
        # tbf needs a bucket of at least one timer tick's worth of bytes (and a 64 KiB GSO packet).
        burst = max(1 << 20, int(self.link_gbit * 1e9 / 8 / 100))
        for i, ns in enumerate(self.netns):
            outside, inside = f"{ns}o", f"{ns}i"
            run("ip", "netns", "add", ns)
            self._made.append(lambda ns=ns: run("ip", "netns", "del", ns))
            run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            self._made.append(lambda outside=outside: run("ip", "link", "del", outside))
            run("ip", "link", "set", inside, "netns", ns)
            run("ip", "link", "set", outside, "master", self.bridge, "up")
            run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            run("ip", "netns", "exec", ns, "ip", "link", "set", inside, "name", "eth0")
            run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.addresses[i]}/24", "dev", "eth0")
            run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            for dev, prefix in ((outside, []), ("eth0", ["ip", "netns", "exec", ns])):
                run(*prefix, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", burst,
                    "latency", "100ms")

    def _make_storage(self):
        for path in (self.storage, self.local, self.reference, *self.mounts, *self.disks):
            path.mkdir(parents=True, exist_ok=True)
        self._made.append(lambda: subprocess.run(["rm", "-rf", str(self.work / "disk")], check=False))
        served = [m for m, sees in zip(self.mounts, self.sees) if sees]
        if not served:
            return
        self.fs = subprocess.Popen([str(self.throttlefs), "--backing", str(self.backing), "--bandwidth-mb-per-s",
                                    str(self.bandwidth_mb_per_s), "--latency-us", str(self.latency_us),
                                    "--read-ahead-kib", str(self.read_ahead_kib),
                                    *map(str, served)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.reaper.add(self.fs)

        def unmount():
            stop(self.fs)
            for m in served:  # a throttlefs that died leaves its mounts behind
                subprocess.run(["umount", "-l", str(m)], check=False, stderr=subprocess.DEVNULL)
        self._made.append(unmount)
        line = self.fs.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"throttlefs did not start: {line!r} {self.fs.stderr.read()[-2000:]}")

    # ---- use --------------------------------------------------------------------------------
    def prefix(self, host):
        """argv prefix that runs a command on `host`: its network namespace, and a mount namespace
        where STORAGE and LOCAL are this host's. The command is exec'ed: its pid is the child's."""
        storage = self.mounts[host] if self.sees[host] else self.work / "mnt" / "nothing"
        storage.mkdir(parents=True, exist_ok=True)
        script = (f"hostname h{host} && mount --bind {shlex.quote(str(storage))} {shlex.quote(str(self.storage))} && "
                  f"mount --bind {shlex.quote(str(self.disks[host]))} {shlex.quote(str(self.local))} && "
                  f"mount --bind {shlex.quote(str(self.backing))} {shlex.quote(str(self.reference))} && "
                  'exec "$@"')
        return ["ip", "netns", "exec", self.netns[host], "unshare", "-m", "-u", "--propagation", "private",
                "sh", "-c", script, "sh"]

    def storage_stats(self):
        """What the emulated storage served so far: {"bytes", "requests", "mounts": [...]}."""
        for mount, sees in zip(self.mounts, self.sees):
            if sees:
                return json.loads((mount / STATS).read_text())
        return {"bytes": 0, "requests": 0, "mounts": []}

    def drop_caches(self):
        """Every host forgets what it read from the storage, as between two jobs on a real
        cluster: each run starts cold."""
        for mount, sees in zip(self.mounts, self.sees):
            if sees:
                drop_cache(mount)

    def clear_disks(self, keep=()):
        """Empties every host's local disk (a peer's copy from an earlier run) but for `keep`."""
        for disk in self.disks:
            for child in disk.iterdir():
                if child.name not in keep:
                    subprocess.run(["rm", "-rf", str(child)], check=True)

    def describe(self):
        return {"hosts": self.hosts, "sees_storage": self.sees, "addresses": self.addresses,
                "storage_bandwidth_mb_per_s": self.bandwidth_mb_per_s, "storage_latency_us": self.latency_us,
                "storage_read_ahead_kib": self.read_ahead_kib,
                "link_gbit_each_way": self.link_gbit}

