"""What tile digests cost (docs/integrity.md section 3): one metad, one checkpoint of --size-mib
in --tensors BF16 [rows, 4096] tensors (random bytes, in the page cache), registered in turn
with --no-digest, fast digests and strong digests under fresh names (the time of `metactl
register`, end to end, and the daemon's own digest time and rate from its log), then loaded by
--ranks CPU ranks reading directly as FSDP shards (each rank holds rows of every tensor: the
split the whole-tensor digests of old could not check), timed end to end (the processes' wall
time, verification included) and as each rank's `seconds` (plan received -> every byte in
place, the hashing included). Rounds alternate between the three so that all see the same
machine; medians are printed, then the ratios against --no-digest of the same run.

    .venv/bin/python bench/digest_cost.py --build-dir build [--size-mib 512] [--ranks 2] [--rounds 5]
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

MODES = {"none": ["--no-digest"], "fast": [], "strong": ["--digest-kind", "strong"]}


def write_checkpoint(path, size_mib, tensors, columns=4096):
    """A safetensors file of `tensors` BF16 [rows, columns] tensors of random bytes, `size_mib` MiB in all."""
    rows = max(1, (size_mib << 20) // tensors // (2 * columns))
    header, offset = {}, 0
    for i in range(tensors):
        size = 2 * rows * columns
        header[f"layers.{i}.weight"] = {"dtype": "BF16", "shape": [rows, columns], "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        block = os.urandom(1 << 20)
        left = offset
        while left > 0:
            f.write(block[:min(left, len(block))])
            left -= len(block)
    return offset


def load(metactl, name, address, ranks, folder, port):
    """Every rank's `metactl load` at once; (wall seconds, median of the ranks' seconds)."""
    start = time.monotonic()
    procs = []
    for rank in range(ranks):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        report = folder / f"{name}-{rank}.json"
        procs.append((subprocess.Popen([metactl, "load", name, "--daemon", address, "--source", "direct", "--strategy",
                                        "fsdp", "--report", str(report)], env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True), report))
    seconds = []
    for proc, report in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"metactl load exited {proc.returncode}:\n{out}\n{err}")
        seconds.append(json.loads(report.read_text())["seconds"])
        last = out.strip().splitlines()[-1]
    return time.monotonic() - start, statistics.median(seconds), last


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--tensors", type=int, default=64)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    build = pathlib.Path(args.build_dir).resolve()
    metactl = str(build / "client" / "metactl")
    reaper = Reaper()
    with tempfile.TemporaryDirectory(prefix="metaload-digest-bench-") as tmp:
        folder = pathlib.Path(tmp).resolve()  # the canonical path, as registered
        ckpt = folder / "root" / "model"
        ckpt.mkdir(parents=True)
        total = write_checkpoint(ckpt / "model.safetensors", args.size_mib, args.tensors)
        subprocess.run(["cat", str(ckpt / "model.safetensors")], stdout=subprocess.DEVNULL, check=True)
        try:
            address = start_metad(build / "daemon" / "metad", folder, "a", folder / "root", dict(os.environ), reaper,
                                  gpus=args.ranks)
            register = {m: [] for m in MODES}
            wall = {m: [] for m in MODES}
            rank_s = {m: [] for m in MODES}
            verdicts = {}
            for r in range(args.rounds):
                for k, (mode, flags) in enumerate(MODES.items()):
                    name = f"{mode}-{r}"
                    start = time.monotonic()
                    subprocess.run([metactl, "register", name, "--checkpoint", str(ckpt), "--daemon", address, *flags],
                                   check=True, capture_output=True)
                    register[mode].append(time.monotonic() - start)
                    w, s, verdicts[mode] = load(metactl, name, address, args.ranks, folder, 29700 + 3 * r + k)
                    wall[mode].append(w)
                    rank_s[mode].append(s)
                    subprocess.run([metactl, "unregister", name, "--daemon", address], check=True, capture_output=True)
            log = (folder / "a.log").read_text()
            gb = total / 1e9
            print(f"checkpoint: {total / 2**20:.0f} MiB in {args.tensors} BF16 tensors of [{total // args.tensors // 8192}, "
                  f"4096]; {args.ranks} CPU ranks, fsdp, direct reads; medians of {args.rounds} rounds")
            for mode in MODES:
                rates = [float(x) for x in re.findall(rf"{mode} digests of \d+ tensors, .*? \(([\d.]+) GB/s\)", log)]
                rate = f", the daemon's digests at {statistics.median(rates):.2f} GB/s" if rates else ""
                print(f"{mode:6}: register {statistics.median(register[mode]):6.3f} s{rate}; load wall "
                      f"{statistics.median(wall[mode]):6.3f} s, rank seconds {statistics.median(rank_s[mode]):6.3f} s")
            base_wall, base_rank = statistics.median(wall["none"]), statistics.median(rank_s["none"])
            for mode in ("fast", "strong"):
                print(f"ratio {mode}/none: register {statistics.median(register[mode]) / statistics.median(register['none']):.2f}x"
                      f" ({gb / max(1e-9, statistics.median(register[mode]) - statistics.median(register['none'])):.2f} GB/s"
                      f" beyond it), load wall {statistics.median(wall[mode]) / base_wall:.3f}x, rank seconds "
                      f"{statistics.median(rank_s[mode]) / base_rank:.3f}x")
            for mode, line in verdicts.items():
                print(f"verdict ({mode}): {line}")
        finally:
            reaper.stop_all()


if __name__ == "__main__":
    main()
