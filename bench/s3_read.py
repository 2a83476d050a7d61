"""Read throughput of one large object from a real S3 server (moto on loopback, the tests'
harness tests/integration/s3_server.py), through metaload's S3 back end at several part sizes
and parallelisms, against one GET of the whole object (what `aws s3 cp` of one stream, or a
naive boto3 get_object().read(), does). Each configuration is read REPEATS times; the table
gives median and range in MB/s. docs/object-storage.md quotes a run.

    .venv/bin/python bench/s3_read.py [--mib 256] [--repeats 3] [--cloud-bucket]

--cloud-bucket puts the fault proxy (tests/integration/s3_fault_proxy.py) in front, shaped like
the benchmark's cloud bucket (30 ms to the first byte, 100 MB/s a connection, 1.5 GB/s in all):
where part size and parallelism matter, unlike on loopback.
"""
import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

SOURCE = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SOURCE / "tests" / "integration"))
from s3_fault_proxy import FaultProxy  # noqa: E402
from s3_server import S3Server  # noqa: E402

PROBE = pathlib.Path(os.environ.get("METALOAD_BUILD_DIR", SOURCE / "build")) / "tests" / "s3_read_probe"


def probe(server, endpoint, url, part, parallelism):
    env = server.env(AWS_ENDPOINT_URL=endpoint, METALOAD_S3_PART_SIZE=part, METALOAD_S3_PARALLELISM=str(parallelism))
    out = subprocess.run([str(PROBE), url], capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"s3_read_probe failed: {out.stderr}")
    match = re.match(r"(\d+) bytes in ([\d.]+) s: \d+ MB/s, sha256 (\w+)", out.stdout)
    return int(match.group(1)) / float(match.group(2)) / 1e6, match.group(3)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cloud-bucket", action="store_true", help="read through the cloud-shaped proxy")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = S3Server(tmp)
        proxy = None
        try:
            endpoint = server.endpoint
            if args.cloud_bucket:
                proxy = FaultProxy(tmp, server.endpoint.removeprefix("http://"), ["--cloud-bucket"])
                endpoint = proxy.endpoint
            data = os.urandom(args.mib << 20)
            path = pathlib.Path(tmp) / "object.bin"
            path.write_bytes(data)
            server.create_bucket("bench")
            server.upload_file(path, "bench", "object.bin", part_bytes=64 << 20)
            import hashlib
            digest = hashlib.sha256(data).hexdigest()
            url = "s3://bench/object.bin"
            rows = [("one GET (part = object, 1 at once)", f"{args.mib}MiB", 1)]
            rows += [(f"{part} parts, {n} at once", part, n) for part, n in
                     [("8MiB", 1), ("8MiB", 4), ("8MiB", 8), ("8MiB", 16), ("4MiB", 8), ("16MiB", 8), ("32MiB", 8)]]
            shape = "behind the cloud-bucket proxy" if proxy else "on loopback"
            print(f"object: {args.mib} MiB on moto {shape}; {args.repeats} reads each; MB/s")
            print(f"{'reader':40} {'median':>8} {'min':>8} {'max':>8}")
            for name, part, n in rows:
                speeds = []
                for _ in range(args.repeats):
                    speed, got = probe(server, endpoint, url, part, n)
                    assert got == digest, "bytes differ from the object's"
                    speeds.append(speed)
                print(f"{name:40} {statistics.median(speeds):8.0f} {min(speeds):8.0f} {max(speeds):8.0f}")
            s3 = server.client(endpoint=endpoint)
            speeds = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                body = s3.get_object(Bucket="bench", Key="object.bin")["Body"].read()
                speeds.append(len(body) / (time.perf_counter() - start) / 1e6)
                assert hashlib.sha256(body).hexdigest() == digest
            print(f"{'boto3 get_object().read() (one GET)':40} {statistics.median(speeds):8.0f} {min(speeds):8.0f} "
                  f"{max(speeds):8.0f}")
        finally:
            if proxy is not None:
                proxy.stop()
            server.stop()


if __name__ == "__main__":
    main()
