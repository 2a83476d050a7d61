"""Watching a daemon while an attack runs (the robustness tests of issue 35): its peak resident
memory and the latency of a legitimate call made over and over."""
import threading
import time

from conftest import proc_status

MiB = 1 << 20


class Watch:
    """While an attack runs: the coordinator's peak resident memory (VmRSS sampled every 50 ms)
    and the latency of `legit` (a callable returning seconds) called over and over."""

    def __init__(self, daemon, legit):
        self.daemon, self.legit = daemon, legit
        self.peak_rss = proc_status(daemon.proc.pid)["VmRSS"]
        self.baseline_rss = self.peak_rss
        self.latencies = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._sample), threading.Thread(target=self._call)]

    def _sample(self):
        while not self._stop.is_set() and self.daemon.proc.poll() is None:
            try:
                self.peak_rss = max(self.peak_rss, proc_status(self.daemon.proc.pid)["VmRSS"])
            except OSError:
                return
            time.sleep(0.05)

    def _call(self):
        while not self._stop.is_set() and self.daemon.proc.poll() is None:
            self.latencies.append(self.legit())
            time.sleep(0.05)

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for t in self._threads:
            t.join()

    def report(self, what):
        slowest = max(self.latencies, default=float("nan"))
        print(f"\n{what}: coordinator VmRSS {self.baseline_rss / MiB:.0f} MiB before, "
              f"{self.peak_rss / MiB:.0f} MiB at most; legitimate call: {len(self.latencies)} made, "
              f"slowest {slowest * 1000:.0f} ms")
        return slowest
