"""The peers that read a checkpoint from an S3 bucket, as their users call them, for the
objectstore regime (bench/cluster/objectstore.py) and its ranks (bench/e2e_fsdp.py's s3 cases).
Each talks to the bucket the standard way: AWS_ENDPOINT_URL (the fault proxy in front of the S3
server), AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION, path-style addressing (an
S3-compatible store on an IP address has no virtual-host names).

  runai      the Run:ai Model Streamer (runai-model-streamer + -s3): SafetensorsStreamer over every
             *.safetensors object, every tensor (FSDP needs rows of each), at the environment's
             RUNAI_STREAMER_* settings; `distributed=True` is its distributed mode (ranks on a node
             split the reads and broadcast; RUNAI_STREAMER_DIST=1, which Gloo needs)
  boto3      the naive way: get_object per file, the whole body, then safetensors.torch.load
  s3fs       fsspec/s3fs: `S3FileSystem.get` of the folder to a local one (DCP's
             HuggingFaceStorageReader opens local files only, with safe_open)

Every function returns or yields tensors and adds the object bytes it asked the bucket for to
`counted["s3_bytes"]` (for runai: the bytes of the requests it makes, from the headers: the
8-byte length and the header of each file, then the tensors it streams; in distributed mode
only the headers are this rank's own, `s3_header_bytes`, and `s3_bytes` is None: each rank of
a node reads a part of the tensors that the streamer chooses).

    python bench/s3_loaders.py smoke S3_URL REFERENCE_DIR    (the AWS_* variables set)
loads the checkpoint with each peer in this process and compares every tensor with the files.
"""
import os
import pathlib
import struct
import sys
import time

from peer_loaders import fill_local_shards, require_all, runai_stream

SAFETENSORS = ".safetensors"


def split_url(url):
    """'s3://bucket/prefix' -> ('bucket', 'prefix'); raises on anything else."""
    if not url.startswith("s3://") or "/" not in url[5:]:
        raise ValueError(f"{url!r}: want s3://bucket/prefix")
    bucket, prefix = url[5:].split("/", 1)
    return bucket, prefix.strip("/")


def boto3_client():
    import boto3
    import botocore.config

    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                        config=botocore.config.Config(s3={"addressing_style": "path"}))


def list_shards(url):
    """The *.safetensors keys under the prefix, sorted, as s3:// URLs, with their sizes."""
    bucket, prefix = split_url(url)
    out = []
    for page in boto3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for item in page.get("Contents", []):
            if item["Key"].endswith(SAFETENSORS) and "/" not in item["Key"][len(prefix) + 1:]:
                out.append((f"s3://{bucket}/{item['Key']}", item["Size"]))
    if not out:
        raise FileNotFoundError(f"no *{SAFETENSORS} object under {url}")
    return sorted(out)


def header_sizes(folder):
    """{file name: 8 + its header's length} of the *.safetensors files of a local folder."""
    out = {}
    for path in sorted(pathlib.Path(folder).glob("*" + SAFETENSORS)):
        with open(path, "rb") as f:
            out[path.name] = 8 + struct.unpack("<Q", f.read(8))[0]
    return out


def runai_tensors(url, counted, headers, distributed=False):
    """(name, tensor) of every tensor, streamed by the Run:ai Model Streamer
    (peer_loaders.runai_stream). `headers`: {file name: 8 + its header's length}, for counting
    (asking the bucket would add requests)."""
    paths = [u for u, _ in list_shards(url)]
    # Its requests: each file's length and header (every rank reads them itself), then the
    # tensors (all of them; in distributed mode this rank's share, the rest comes by broadcast).
    counted["s3_bytes"] = counted.get("s3_bytes", 0) + sum(headers[u.rsplit("/", 1)[1]] for u in paths)
    yield from runai_stream(paths, counted, distributed)
    if distributed:  # which ranges this rank read is the streamer's own business
        counted["s3_header_bytes"], counted["s3_bytes"] = counted["s3_bytes"], None
    else:
        counted["s3_bytes"] += counted["runai_streamed_tensor_bytes"]


def boto3_tensors(url, counted):
    """(name, tensor) of every tensor: each file's whole body, then safetensors.torch.load."""
    from safetensors.torch import load

    client = boto3_client()
    for shard_url, _ in list_shards(url):
        bucket, key = split_url(shard_url)
        data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        counted["s3_bytes"] = counted.get("s3_bytes", 0) + len(data)
        tensors = load(data)
        del data
        yield from tensors.items()


def s3fs_download(url, dest, counted):
    """Copies every object under the prefix into `dest` with s3fs (`S3FileSystem.get`)."""
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                           config_kwargs={"s3": {"addressing_style": "path"}})
    bucket, prefix = split_url(url)
    dest = pathlib.Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    fs.get(f"{bucket}/{prefix}/", str(dest) + "/", recursive=True)
    counted["s3_bytes"] = counted.get("s3_bytes", 0) + sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    return dest


def dcp_reader_direct(url):
    """DCP's HuggingFaceStorageReader given the s3:// URL itself: its read_metadata()."""
    from torch.distributed.checkpoint import HuggingFaceStorageReader

    return HuggingFaceStorageReader(url).read_metadata()


# ---- one FSDP rank (bench/e2e_fsdp.py's s3 cases) --------------------------------------------
CASES = ("s3_runai", "s3_runai_dist", "s3_boto3", "s3_dcp")


def load_into(case, model, args, counted):
    """Fills the FSDP-sharded `model` (meta) from args.checkpoint (s3://): on CPU, then each
    peer's way. `args.config` is a local folder with the files' headers' twin (the checkpoint's
    config.json and safetensors index, shipped with the job), `args.local_dir` this host's disk
    (s3_dcp's copy)."""
    import torch.distributed as dist

    model.to_empty(device="cpu")
    if case in ("s3_runai", "s3_runai_dist"):
        counted["how"] = "headers + tensors the streamer requested (this rank's share unknown in distributed mode)"
        filled = fill_local_shards(model, runai_tensors(args.checkpoint, counted, headers=args.header_sizes,
                                                        distributed=case == "s3_runai_dist"))
    elif case == "s3_boto3":
        counted["how"] = "every object's whole body (get_object)"
        filled = fill_local_shards(model, boto3_tensors(args.checkpoint, counted))
    elif case == "s3_dcp":
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import HuggingFaceStorageReader

        # One copy per host (its first local rank), as a job's launcher would: every rank reading
        # its own copy would multiply the bucket's bytes by the ranks on a host.
        local = pathlib.Path(args.local_dir) / "s3_dcp"
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            s3fs_download(args.checkpoint, local, counted)
            counted["how"] = "the objects S3FileSystem.get wrote to this host's disk (its first local rank)"
        else:
            counted["s3_bytes"] = 0
            counted["how"] = "nothing: this host's first rank copied the checkpoint"
        dist.barrier()
        dcp.load(model.state_dict(), storage_reader=HuggingFaceStorageReader(str(local)))
        return
    else:
        raise SystemExit(f"s3_loaders: unknown case {case}")
    require_all(case, model, filled)


# ---- smoke: each peer once, in this process, against the files -----------------------------
def smoke(url, reference):
    import tempfile

    import torch
    from safetensors.torch import load_file

    want = {}
    for path in sorted(pathlib.Path(reference).glob("*" + SAFETENSORS)):
        want.update(load_file(path))
    total = sum(t.numel() * t.element_size() for t in want.values())

    def check(label, named, counted, started):
        got = dict(named)
        seconds = time.monotonic() - started
        bad = [n for n in want if n not in got or not torch.equal(got[n], want[n])]
        print(f"{label:<12} {len(got)} tensors, {sum(t.numel() * t.element_size() for t in got.values())} bytes "
              f"(checkpoint {total}), s3_bytes {counted.get('s3_bytes')}, {seconds:.2f} s: "
              f"{'bit-exact' if not bad and len(got) == len(want) else f'DIFFERS {bad[:3]}'}", flush=True)

    for label, make in (("runai", lambda c: runai_tensors(url, c, header_sizes(reference))), ("boto3", lambda c: boto3_tensors(url, c))):
        counted, started = {}, time.monotonic()
        try:
            check(label, [(n, t.clone()) for n, t in make(counted)], counted, started)
        except Exception as e:  # noqa: BLE001 (a peer's failure is a result: printed as is)
            print(f"{label:<12} FAILED: {type(e).__name__}: {e}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        counted, started = {}, time.monotonic()
        try:
            dest = s3fs_download(url, pathlib.Path(tmp) / "ckpt", counted)
            named = [kv for p in sorted(dest.glob("*" + SAFETENSORS)) for kv in load_file(p).items()]
            check("s3fs", named, counted, started)
        except Exception as e:  # noqa: BLE001
            print(f"{'s3fs':<12} FAILED: {type(e).__name__}: {e}", flush=True)
    try:
        dcp_reader_direct(url)
        print(f"{'dcp_direct':<12} read_metadata() of {url} succeeded", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"{'dcp_direct':<12} FAILED: {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "smoke":
        raise SystemExit(__doc__)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    smoke(sys.argv[2], sys.argv[3])
