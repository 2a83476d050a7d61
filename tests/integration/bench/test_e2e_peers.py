"""bench/run_bench.py --only e2e,e2e-cold at a few MiB, one round, with the peers of issue 39
(bench/peer_loaders.py): the Run:ai Model Streamer in both modes and fastsafetensors fill the
FSDP2 model on four CPU ranks, every rank's shards equal the files' bytes (the benchmark's own
check), the keys are written; and the cold variant's drop leaves none of a file's pages cached."""
import ctypes
import json
import mmap
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "bench")]
import checkpoint_data  # noqa: E402

DIMS = "layers=1,hidden=512,intermediate=1024,heads=4,kv_heads=4,vocab=1024"
CASES = ("metaload", "runai", "runai_dist", "fastsafetensors")


def resident_pages(path):
    """How many of the file's pages are in the page cache (mincore over a mapping of it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(address, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return sum(v & 1 for v in vec)
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)


def test_the_cold_variants_drop_leaves_no_page_cached(tmp_path):
    path = tmp_path / "shard.safetensors"
    path.write_bytes(os.urandom(8 << 20))
    checkpoint_data.warm_page_cache([path])
    assert resident_pages(path) == (8 << 20) // mmap.PAGESIZE
    checkpoint_data.drop_page_cache([path])
    assert resident_pages(path) == 0


def test_tiny_run_of_every_peer_warm_and_cold_checks_every_rank(tmp_path):
    build = pathlib.Path(os.environ.get("METALOAD_BUILD_DIR", ROOT / "build"))
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "run_bench.py"), "--build-dir", str(build),
                        "--only", "e2e,e2e-cold", "--e2e-dims", DIMS, "--e2e-repeats", "1", "--e2e-cases",
                        ",".join(CASES), "--timeout", "300", "--work-dir", str(tmp_path), "--out", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(out.read_text())
    for variant in ("e2e", "e2e_cold"):
        v = result[variant]
        assert v["errors"] == {}, (variant, v["errors"])
        for case in CASES:
            (sample,) = v["samples"][case]
            assert sample["checked"], (variant, case)
            assert all(rank["check_problems"] == [] for rank in sample["ranks"]), (variant, case)
            # Every rank holds its FSDP shard of every tensor: the four make the model once.
            assert sum(rank["shard_bytes"] for rank in sample["ranks"]) == v["data"]["tensor_bytes"], (variant, case)
        # What each read: metaload and the splitting loaders the checkpoint once, Run:ai's single
        # mode once per rank.
        reads = {case: v["absolute"][case]["bytes_read_over_checkpoint"] for case in CASES}
        assert reads["runai"] == 4.0, reads
        assert all(abs(reads[c] - 1.0) < 0.01 for c in ("metaload", "runai_dist", "fastsafetensors")), reads
    assert result["e2e_onehost_vs_runai"] > 0
    assert result["e2e_cold"]["e2e_onehost_cold_best_peer"] in CASES[1:]
    assert result["e2e_onehost_cold_vs_best_peer"] > 0
    assert "page cache dropped before every run" in r.stdout
    assert "e2e_onehost_vs_runai" in r.stdout
