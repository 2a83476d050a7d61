"""The one-host e2e case with the page cache cold (`--only e2e-cold`, issue 39): the e2e case's
loaders and checkpoint (bench/e2e.py, bench/e2e_fsdp.py), but before every run, instead of a warm
cache each round, the checkpoint's pages are dropped from the page cache
(checkpoint_data.drop_page_cache: posix_fadvise DONTNEED on each file, the same as the emulated
hosts' drop, without touching anything else on the machine). Every loader then reads from the
disk, as on a freshly booted host or the first job after a checkpoint lands; loaders that read
with O_DIRECT (the Run:ai streamer, fastsafetensors' default) see no difference between the two.

Time, bytes and peak RSS are taken as in the e2e case. `e2e_onehost_cold_vs_best_peer`: the
fastest peer's median over metaload's.
"""
import checkpoint_data
from e2e import E2E

# Every other case is a peer: a list of the peers would miss the next one added to bench/e2e.py.
NOT_PEERS = ("metaload", "metaload_daemon", "limit")


class E2ECold(E2E):
    label = "e2e-cold"

    def measure(self, case, check):
        checkpoint_data.drop_page_cache(self.warm_files)
        return super().measure(case, check)

    def before_round(self):
        pass  # each run drops the cache itself (measure)


def cold_keys(absolute):
    """{e2e_onehost_cold_vs_best_peer, e2e_onehost_cold_best_peer} from the medians."""
    ours = absolute.get("metaload", {}).get("median_s")
    peers = {case: a["median_s"] for case, a in absolute.items() if case not in NOT_PEERS}
    if not ours or not peers:
        return {"e2e_onehost_cold_vs_best_peer": None, "e2e_onehost_cold_best_peer": None}
    best = min(peers, key=peers.get)
    return {"e2e_onehost_cold_vs_best_peer": peers[best] / ours, "e2e_onehost_cold_best_peer": best}
