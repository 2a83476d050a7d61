"""What per-tensor digests cost (docs/integrity.md section 3): one metad, one checkpoint of
--size-mib in --tensors F32 tensors (random bytes, in the page cache), registered in turn
without and with `--digest` under fresh names (the time of `metactl register`, end to end),
then loaded by one CPU rank reading directly (the rank's `seconds`: plan received -> every
byte in place, with the digest check when the model has digests). Rounds alternate between
the two so that both see the same machine; medians are printed, with the daemon's own time for
the digests (its log). --cold evicts the file from the page cache (POSIX_FADV_DONTNEED, this
file only) before each registration and each load.

    .venv/bin/python bench/digest_cost.py --build-dir build [--size-mib 400] [--rounds 5] [--cold]
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import struct
import subprocess
import tempfile
import time

from processes import Reaper
from stream_checksum import start_metad


def write_checkpoint(path, size_mib, tensors):
    """A safetensors file of `tensors` F32 tensors of random bytes, `size_mib` MiB in all."""
    per_tensor = (size_mib << 20) // tensors
    elements = per_tensor // 4
    header, offset = {}, 0
    for i in range(tensors):
        header[f"layers.{i}.weight"] = {"dtype": "F32", "shape": [elements], "data_offsets": [offset, offset + 4 * elements]}
        offset += 4 * elements
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        block = os.urandom(1 << 20)
        left = offset
        while left > 0:
            f.write(block[:min(left, len(block))])
            left -= len(block)


def evict(path):
    """Drops `path`'s pages from the page cache (only this file's: other processes keep theirs)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--size-mib", type=int, default=400)
    parser.add_argument("--tensors", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()
    build = pathlib.Path(args.build_dir).resolve()
    metactl = str(build / "client" / "metactl")
    reaper = Reaper()
    with tempfile.TemporaryDirectory(prefix="metaload-digest-bench-") as tmp:
        folder = pathlib.Path(tmp)
        ckpt = folder / "root" / "model"
        ckpt.mkdir(parents=True)
        write_checkpoint(ckpt / "model.safetensors", args.size_mib, args.tensors)
        subprocess.run(["cat", str(ckpt / "model.safetensors")], stdout=subprocess.DEVNULL, check=True)
        try:
            address = start_metad(build / "daemon" / "metad", folder, "a", folder / "root", dict(os.environ), reaper)
            register = {"plain": [], "digest": []}
            load = {"plain": [], "digest": []}
            for r in range(args.rounds):
                for mode in ("plain", "digest"):
                    name = f"{mode}-{r}"
                    flags = ["--digest"] if mode == "digest" else []
                    if args.cold:
                        evict(ckpt / "model.safetensors")
                    start = time.monotonic()
                    subprocess.run([metactl, "register", name, "--checkpoint", str(ckpt), "--daemon", address, *flags],
                                   check=True, capture_output=True)
                    register[mode].append(time.monotonic() - start)
                    report = folder / f"{name}.json"
                    if args.cold:
                        evict(ckpt / "model.safetensors")
                    out = subprocess.run([metactl, "load", name, "--daemon", address, "--source", "direct",
                                          "--report", str(report), "--master-port", str(29700 + r)],
                                         check=True, capture_output=True, text=True).stdout
                    load[mode].append(json.loads(report.read_text())["seconds"])
                    subprocess.run([metactl, "unregister", name, "--daemon", address], check=True, capture_output=True)
            print(out.strip().splitlines()[-1])
            digest_s = [float(s) for s in re.findall(r"digests of \d+ tensors, .*? in ([\d.]+) s", (folder / "a.log").read_text())]
            print(f"daemon's digest time: {statistics.median(digest_s) * 1e3:.1f} ms (median of {len(digest_s)})")
            for mode in ("plain", "digest"):
                print(f"{mode:6}: register {statistics.median(register[mode]) * 1e3:7.1f} ms (median of {args.rounds}), "
                      f"load {statistics.median(load[mode]) * 1e3:7.1f} ms, {args.size_mib} MiB in {args.tensors} tensors")
        finally:
            reaper.stop_all()


if __name__ == "__main__":
    main()
