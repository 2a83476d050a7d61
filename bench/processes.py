"""Processes the benchmark starts: real `metad` daemons, `metactl load` ranks, and timed
children, each reaped with os.wait4 so that its CPU time, page faults and peak RSS come back
with it. Every process started here is registered in a Reaper, which stops whatever is
still running (SIGTERM, then SIGKILL after 5 s) when the benchmark ends, however it ends.
"""
import json
import os
import pathlib
import random
import re
import signal
import socket
import subprocess
import threading
import time


class Reaper:
    """Stops every registered process that is still running, last started first."""

    def __init__(self):
        self._procs = []

    def add(self, proc):
        self._procs.append(proc)
        return proc

    def stop_all(self):
        for proc in reversed(self._procs):
            stop(proc)
        self._procs.clear()


def stop(proc, grace_s=5.0):
    """SIGTERM, then SIGKILL; returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def free_port():
    """A TCP port on loopback that was free a moment ago (for daemons, rendezvous, etcd).

    Below the kernel's ephemeral range (ip_local_port_range): a port bind(0) hands out is one
    that the next outgoing connection of any test running beside this one may take before our
    daemon binds it (EADDRINUSE, seen under ctest -j2). Chosen at random, so that two tests
    started together rarely pick the same one, and checked free by binding it."""
    low, _ = _ephemeral_range()
    candidates = list(range(max(1024, low - 12000), low))
    random.SystemRandom().shuffle(candidates)
    for port in candidates[:200]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port below {low}")


def _ephemeral_range():
    try:
        low, high = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def proc_status_kib(pid, keys=("VmRSS", "VmHWM")):
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in keys:
                values[key] = int(rest.split()[0])
    return values


def machine_cpu_seconds():
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    fields = [int(v) for v in pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


def proc_cpu_seconds(pid):
    """(user, system) CPU seconds a live process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


class Timed:
    """A child process whose stdout lines are time-stamped as they arrive and which is reaped
    with os.wait4. `result()` waits and returns a dict: rc, wall_s, user_s, sys_s,
    minor_faults, maxrss_bytes, stdout_lines [(seconds since start, line)], stderr."""

    def __init__(self, args, env=None, reaper=None, discard_stdout=False):
        self.args = [str(a) for a in args]
        self.start = time.monotonic()
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL if discard_stdout else subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        if reaper is not None:
            reaper.add(self.proc)
        self.lines, self.err = [], []
        self._readers = [threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True)]
        if not discard_stdout:
            self._readers.append(threading.Thread(target=self._read_stdout, daemon=True))
        for r in self._readers:
            r.start()

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic() - self.start, line.rstrip("\n")))

    def result(self, timeout_s):
        # A blocking wait4 (no polling beside the measured processes); a timer kills a hung child.
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            signal_pid(self.proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(self.proc.pid, 0)
        finally:
            timer.cancel()
        if timed_out.is_set():
            self.proc.returncode = -signal.SIGKILL
            raise TimeoutError(f"{' '.join(self.args)} ran past {timeout_s} s")
        wall_s = time.monotonic() - self.start
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        for r in self._readers:
            r.join()
        return {"rc": self.proc.returncode, "wall_s": wall_s, "user_s": usage.ru_utime, "sys_s": usage.ru_stime,
                "minor_faults": usage.ru_minflt, "maxrss_bytes": usage.ru_maxrss * 1024,
                "stdout_lines": self.lines, "stderr": "".join(self.err)}


def signal_pid(pid, signum):
    """os.kill that tolerates a process already gone. Used instead of Popen.send_signal, whose
    poll() could reap a child that a Timed is waiting for with wait4."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def wait_all(timeds, timeout_s):
    """Waits for every Timed at once; returns their results. When one exits non-zero or raises,
    the others are killed at once: ranks of one world would otherwise wait out their rendezvous
    timeout for a rank that is gone. Raises the first exception after all have ended."""
    results = [None] * len(timeds)
    failed = threading.Event()

    def wait(i):
        try:
            results[i] = timeds[i].result(timeout_s)
            if results[i]["rc"] != 0:
                failed.set()
        except BaseException as e:  # noqa: B036 (handed to the caller below)
            results[i] = e
            failed.set()

    threads = [threading.Thread(target=wait, args=(i,), daemon=True) for i in range(len(timeds))]
    for t in threads:
        t.start()
    killed = False
    while any(t.is_alive() for t in threads):
        if failed.wait(0.1) and not killed:
            killed = True
            for timed, result in zip(timeds, results):
                if result is None:
                    signal_pid(timed.proc.pid, signal.SIGKILL)
        for t in threads:
            t.join(0.01)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def run_ranks(cmd, world, timeout_s, reaper, prefix=None, master_addr="127.0.0.1", local_world=None, **env):
    """Runs `world` processes of `cmd` in the environment torchrun gives (RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE, MASTER_ADDR and a free MASTER_PORT; OMP_NUM_THREADS=1) plus `env`; waits for
    all (wait_all) and stops any left. Returns their results, in rank order. `prefix(rank)`, when
    given, is the argv that runs rank `rank` elsewhere (an emulated host: bench/cluster/hosts.py),
    `local_world` the ranks per host there (default: all on one)."""
    port, started = free_port(), []
    local_world = local_world or world
    try:
        for rank in range(world):
            rank_env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % local_world),
                            LOCAL_WORLD_SIZE=str(local_world), MASTER_ADDR=master_addr, MASTER_PORT=str(port),
                            OMP_NUM_THREADS="1", **env)
            started.append(Timed([*(prefix(rank) if prefix else []), *cmd], env=rank_env, reaper=reaper))
        return wait_all(started, timeout_s)
    finally:
        for timed in started:
            stop(timed.proc)


def run_timed(args, timeout_s, env=None, reaper=None, discard_stdout=False):
    """Runs a child to completion; raises with its stderr if it fails."""
    result = Timed(args, env=env, reaper=reaper, discard_stdout=discard_stdout).result(timeout_s)
    if result["rc"] != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} exited {result['rc']}:\n{result['stderr'][-3000:]}")
    return result


def last_json_line(result):
    for _, line in reversed(result["stdout_lines"]):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON line in the output:\n{result['stdout_lines']}\n{result['stderr'][-3000:]}")


class Daemon:
    """A real metad with its own node config, started now; stopped by the reaper or stop()."""

    def __init__(self, metad, work_dir, name, roots, gpus, reaper, coordinator=None, listen="127.0.0.1:0",
                 prefix=(), env=None, advertise=None):
        self.name = name
        config = work_dir / f"{name}.yaml"
        lines = [f"node: {name}", f"listen: {listen}", f"gpus: {gpus}", "gpu_memory: 64GiB",
                 "roots: [" + ", ".join(str(r) for r in roots) + "]"]
        if coordinator:
            lines.append(f"coordinator: {coordinator}")
        if advertise:  # the address the others dial, where `listen` is a wildcard
            lines.append(f"advertise: {advertise}")
        if not listen.startswith("127."):  # an emulated host's address: a private network of one machine
            lines.append("allow_insecure: true")
        config.write_text("\n".join(lines) + "\n")
        self.log_path = work_dir / f"{name}.log"
        with open(self.log_path, "w") as log:
            self.proc = reaper.add(subprocess.Popen([*prefix, str(metad), "--node-config", str(config)],
                                                    stdout=subprocess.PIPE, stderr=log, text=True, env=env))
        line = self.proc.stdout.readline()
        match = re.search(r"listening on (\S+)", line)
        if not match:
            stop(self.proc)
            raise RuntimeError(f"metad {name} did not start: {line!r}\n{self.log_path.read_text()[-3000:]}")
        self.address = match.group(1)
        self.pid = self.proc.pid

    def rss_kib(self):
        return proc_status_kib(self.pid)


class RssPoller:
    """Samples a process's VmRSS every `interval_s` on a thread; `peak_kib` is the largest seen."""

    def __init__(self, pid, interval_s=0.01):
        self.pid, self.interval_s, self.peak_kib = pid, interval_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                self.peak_kib = max(self.peak_kib, proc_status_kib(self.pid, ("VmRSS",))["VmRSS"])
            except (OSError, KeyError):
                return
            self._stop.wait(self.interval_s)

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.peak_kib
