"""The benchmark's data and machine: a Llama-shaped BF16 checkpoint of a requested size
(sharded safetensors with its index and config.json, written by `metactl synth`), the same
weights as one `pytorch_model.bin`, the sha256 of every stored tensor (to check what ranks
loaded), page-cache warming, and a description of the machine the numbers came from.
"""
import errno
import hashlib
import importlib.metadata
import json
import os
import pathlib
import platform
import struct
import subprocess
import sys

VOCAB = 32000
HEAD_DIM = 128
DTYPE_BYTES = 2  # bf16


DIM_NAMES = ("layers", "hidden", "intermediate", "heads", "kv_heads", "vocab")


def llama_bytes(dims):
    """(bytes a decoder layer, bytes outside the layers: embeddings, lm_head, final norm) in BF16."""
    hidden = dims["hidden"]
    per_layer = (2 * hidden * hidden + 2 * dims["kv_heads"] * HEAD_DIM * hidden + 3 * hidden * dims["intermediate"] +
                 2 * hidden) * DTYPE_BYTES
    return per_layer, (2 * dims["vocab"] * hidden + hidden) * DTYPE_BYTES


def llama_dims(size_bytes):
    """The widest Llama shape (hidden 4096, 2048, 1024 or 512) that reaches `size_bytes` with at
    least 4 decoder layers; returns dict(layers, hidden, intermediate, heads, kv_heads, vocab)."""
    for hidden in (4096, 2048, 1024, 512):
        heads = hidden // HEAD_DIM
        dims = dict(hidden=hidden, intermediate=(hidden * 11 // 4 + 255) // 256 * 256, heads=heads,
                    kv_heads=max(1, heads // 4), vocab=VOCAB)
        per_layer, outside_layers = llama_bytes(dims)
        layers = round((size_bytes - outside_layers) / per_layer)
        if layers >= 4 or hidden == 512:
            return dict(layers=max(1, layers), **dims)
    raise AssertionError("unreachable")


def parse_dims(text):
    """--e2e-dims "layers=1,hidden=512,...": every one of DIM_NAMES, positive integers; head_dim is 128."""
    try:
        dims = {key: int(value) for key, value in (item.split("=") for item in text.split(","))}
    except ValueError:
        raise ValueError(f"{text!r}: want {','.join(n + '=N' for n in DIM_NAMES)}") from None
    if sorted(dims) != sorted(DIM_NAMES) or min(dims.values()) < 1 or dims["hidden"] != dims["heads"] * HEAD_DIM:
        raise ValueError(f"{text!r}: want each of {', '.join(DIM_NAMES)} once, positive, hidden = heads x {HEAD_DIM}")
    return dims


def synthesize(metactl, out_dir, size_bytes, shards=4, dims=None):
    """Writes the checkpoint with `metactl synth` (`dims`, default the llama_dims of `size_bytes`);
    returns its dims."""
    dims = dims or llama_dims(size_bytes)
    shard_mb = max(16, int(size_bytes / shards / 1e6) + 1)
    subprocess.run([str(metactl), "synth", str(out_dir), "--layers", str(dims["layers"]), "--hidden",
                    str(dims["hidden"]), "--intermediate", str(dims["intermediate"]), "--heads",
                    str(dims["heads"]), "--kv-heads", str(dims["kv_heads"]), "--vocab", str(dims["vocab"]),
                    "--dtype", "bf16", "--shard-size", f"{shard_mb}MB", "--overwrite"],
                   check=True, stdout=subprocess.DEVNULL)
    return dims


def shard_files(checkpoint_dir):
    """The safetensors files of the checkpoint, in the index's order."""
    checkpoint_dir = pathlib.Path(checkpoint_dir)
    index = checkpoint_dir / "model.safetensors.index.json"
    if index.exists():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        names = ["model.safetensors"]
    return [checkpoint_dir / n for n in names]


def read_header(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    header.pop("__metadata__", None)
    return 8 + length, header


def tensor_digests(files):
    """{tensor name: sha256 of its stored bytes} and the total tensor bytes of `files`."""
    digests, total = {}, 0
    for path in files:
        data_start, header = read_header(path)
        with open(path, "rb") as f:
            for name, entry in header.items():
                begin, end = entry["data_offsets"]
                f.seek(data_start + begin)
                h = hashlib.sha256()
                left = end - begin
                while left:
                    chunk = f.read(min(left, 16 << 20))
                    h.update(chunk)
                    left -= len(chunk)
                digests[name] = h.hexdigest()
                total += end - begin
    return digests, total


WRITE_BIN = """
import sys, torch
from safetensors.torch import load_file
state = {}
for shard in sys.argv[2:]:
    state.update(load_file(shard))
torch.save(state, sys.argv[1])
"""


def write_pytorch_bin(python, files, out_path):
    """The same weights as one torch.save'd state dict, written by a child process (so that
    this process never holds the model)."""
    subprocess.run([str(python), "-c", WRITE_BIN, str(out_path), *map(str, files)], check=True)


def warm_page_cache(paths):
    """Reads every file once so that every measurement starts page-cache warm."""
    buffer = bytearray(16 << 20)
    view = memoryview(buffer)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(view):
                pass


def drop_page_cache(paths):
    """Drops each file's pages from the page cache: posix_fadvise(DONTNEED) drops the clean pages
    that no process maps (the loaders that mapped them have exited), so a file written moments
    ago (a checkpoint just made) is written back first: its dirty pages would stay."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            try:
                os.fsync(fd)
            except OSError as e:  # a FUSE mount without fsync (the emulated hosts' storage)
                if e.errno not in (errno.ENOSYS, errno.EINVAL):
                    raise
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _meminfo_kib(key):
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def _first_line(path):
    try:
        return pathlib.Path(path).read_text().strip()
    except OSError:
        return None


def machine():
    """Cores, memory, kernel, CPU and the settings that move these numbers."""
    cpu = None
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    versions = {"python": platform.python_version()}
    for package in ("torch", "safetensors", "transformers", "accelerate"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "cores": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "memory_gib": round(_meminfo_kib("MemTotal") / 2**20, 1),
        "memory_available_gib_at_start": round(_meminfo_kib("MemAvailable") / 2**20, 1),
        "kernel": platform.release(),
        "transparent_hugepage": _first_line("/sys/kernel/mm/transparent_hugepage/enabled"),
        "load_average_at_start": list(os.getloadavg()),
        "versions": versions,
        "python_executable": sys.executable,
    }
