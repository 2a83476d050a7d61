"""What per-chunk checksums cost a stream (docs/integrity.md): two daemons on loopback serve the
same file (one U8 tensor in a safetensors file, registered on each: a daemon streams only tensors
of registered models), metad computing CRC-32C as always and metad_faulty (the test binary,
tests/faults/) with METALOAD_TEST_NO_CHECKSUM=1; tests/bench/stream_bench streams the file from
each in turn, as a rank does (two streams), the one reading from the second with the same
variable so that it accepts unchecked chunks (a rank's library never does).
Rounds alternate between the two so that both see the same machine; medians are printed.

    .venv/bin/python bench/stream_checksum.py --build-dir build [--size-mib 1024] [--rounds 5]
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import tempfile

from processes import Reaper


def start_metad(metad, folder, name, root, env, reaper, gpus=1):
    config = folder / f"{name}.yaml"
    config.write_text(f"node: {name}\nlisten: 127.0.0.1:0\ngpus: {gpus}\nroots: [{root}]\n")
    log = open(folder / f"{name}.log", "w")
    proc = reaper.add(subprocess.Popen([str(metad), "--node-config", str(config)], stdout=subprocess.PIPE,
                                       stderr=log, text=True, env=env))
    match = re.search(r"listening on (\S+)", proc.stdout.readline())
    if not match:
        raise RuntimeError(f"metad {name} did not start; see {folder / (name + '.log')}")
    return match.group(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    build = pathlib.Path(args.build_dir).resolve()
    reaper = Reaper()
    with tempfile.TemporaryDirectory(prefix="metaload-stream-bench-") as tmp:
        folder = pathlib.Path(tmp).resolve()  # the canonical path, as registered
        root = folder / "root"
        root.mkdir()
        (root / "data").mkdir()
        data = root / "data" / "model.safetensors"
        size = args.size_mib << 20
        header = json.dumps({"data": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
        header += b" " * (-len(header) % 8)
        offset = 8 + len(header)
        with open(data, "wb") as f:
            f.write(len(header).to_bytes(8, "little") + header)
            block = os.urandom(1 << 20)
            for _ in range(args.size_mib):
                f.write(block)
        subprocess.run(["cat", str(data)], stdout=subprocess.DEVNULL, check=True)  # into the page cache
        off_env = dict(os.environ, METALOAD_TEST_NO_CHECKSUM="1")
        try:
            addresses = {"on": start_metad(build / "daemon" / "metad", folder, "checked", root, dict(os.environ), reaper),
                         "off": start_metad(build / "tests" / "metad_faulty", folder, "unchecked", root, off_env,
                                            reaper)}
            for address in addresses.values():
                subprocess.run([str(build / "client" / "metactl"), "register", "data", "--checkpoint",
                                str(root / "data"), "--daemon", address], check=True, capture_output=True)
            results = {"on": [], "off": []}
            for _ in range(args.rounds):
                for mode in ("on", "off"):
                    out = subprocess.run([str(build / "tests" / "bench_stream"), addresses[mode], "data", str(data),
                                          str(offset), str(size), "3"],
                                         capture_output=True, text=True, check=True,
                                         env=off_env if mode == "off" else dict(os.environ)).stdout.split()
                    results[mode] += [float(x) for x in out[1:]]  # the first repeat ramps the HTTP/2 window up
        finally:
            reaper.stop_all()
    on, off = statistics.median(results["on"]), statistics.median(results["off"])
    print(f"stream of {args.size_mib} MiB, 2 streams, loopback, median of {len(results['on'])}:")
    print(f"  checksums on:  {on:.2f} GB/s")
    print(f"  checksums off: {off:.2f} GB/s")
    print(f"  on / off:      {on / off:.3f}")


if __name__ == "__main__":
    main()
