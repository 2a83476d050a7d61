"""One rank of the end-to-end FSDP2 case of bench/run_bench.py (`--only e2e`): builds a
Llama-shaped model sharded with FSDP2 over CPU ranks (Gloo) and fills it from a Hugging Face
safetensors folder one of several ways, then prints one JSON line about this rank.

    RANK=.. WORLD_SIZE=.. LOCAL_RANK=.. MASTER_ADDR=.. MASTER_PORT=.. \\
        python bench/e2e_fsdp.py CASE CHECKPOINT_DIR [--daemon HOST:PORT --name MODEL] [--mesh R,S] [--check]
            [--dequantize]

--mesh R,S (default 1,WORLD): R replicas x S shards, R*S = WORLD. With R > 1 every case shards
over the 2-D mesh ("dp_replicate", "dp_shard"), FSDP2's HSDP (R = WORLD, S = 1: pure
replication); metaload reads each replicated byte once and fans it out over the replicate
dimension (its report's fanout_* counters are in the JSON line).

CASE:
  hf         AutoModelForCausalLM.from_pretrained(dir, dtype=bf16), then fully_shard per decoder
             layer and the root (every rank reads the whole checkpoint)
  hf_dist    transformers 5's own sharded load: from_pretrained(dir, dtype=bf16,
             distributed_config=DistributedConfig(fsdp_size=S, dp_replicate_size=R)) (its own mesh,
             its model's FSDP plan)
  dcp        meta model + fully_shard + to_empty(cpu) + torch.distributed.checkpoint.load(
             model.state_dict(), storage_reader=HuggingFaceStorageReader(dir))
  dcp_threads  the same with HuggingFaceStorageReader(dir, thread_count=one per shard file), its
             documented setting for parallel reads (the default is 1)
  broadcast  meta model + fully_shard + set_model_state_dict(full_state_dict=True,
             broadcast_from_rank0=True); rank 0 load_file()s every shard, the others pass {}
  metaload   meta model + fully_shard + metaload.materialize(model, name, checkpoint=dir)
  metaload_daemon   the same with daemon=HOST:PORT (the model registered there as --name)
  metaload_hf_dist  metaload.from_pretrained(dir, dtype=bf16, distributed_config=...) as hf_dist
             (transformers' mesh and FSDP plan, metaload's reads)
  runai, runai_dist, fastsafetensors   meta model + fully_shard + to_empty(cpu), then the Run:ai
             Model Streamer (single or distributed mode) or fastsafetensors' process-group load
             (bench/peer_loaders.py says how each is called and with which environment)
  s3_runai, s3_runai_dist, s3_boto3, s3_dcp   CHECKPOINT_DIR is s3://bucket/prefix (the AWS_*
             variables name the endpoint and keys): the peers that read a bucket, filling the
             meta model + fully_shard + to_empty(cpu) (bench/s3_loaders.py says what each does);
             --config is then a local folder with config.json and the safetensors files' twins
             for the headers' sizes (--check-against), --local-dir this host's disk (s3_dcp)
  limit      what every case pays and no loader can avoid: meta model + fully_shard, the
             safetensors headers, and each rank's own bytes of every local shard os.preadv()ed
             into fresh memory (torch.empty per shard, 2 threads as metaload's read_threads);
             the model itself stays on meta (--check checks those buffers)

Every case ends, inside the clock, by touching one byte per page of every local shard, as a
first training step would: loaders whose tensors are lazy views of the page cache (mmap) pay
for mapping their pages there, loaders that wrote the bytes already pay next to nothing.

The clock: imports, process-group init, the device mesh and a warm-up (a meta model and
fully_shard, transformers' lazily imported model module and its per-process table of
checkpoint conversion mappings, which from_pretrained and metaload alike build on first use)
come first; then a barrier, and
the load section starts (model construction included), and ends after the load and one more
barrier (metaload's own verification, a Gloo all-reduce, is inside it). The non-persistent
rotary buffers (`inv_freq`), which no checkpoint holds, are recomputed inside the section for
dcp and broadcast (metaload computes them itself, from_pretrained too).

Measured around the load section: `rchar` of /proc/self/io (bytes the process got from
read()/pread() system calls; pages of a memory-mapped file are not counted there), the tensor
bytes each loader took from the files (counted at the loader: dcp's read items, rank 0's
load_file results, LoadReport.bytes_read, the whole model for from_pretrained, the tensors the
Run:ai streamer yielded or, in its distributed mode, this rank's part of its partition, those of
the files fastsafetensors reads whole on this rank), and peak RSS:
VmHWM is reset (`5 > /proc/self/clear_refs`) at the start, so VmHWM at the end minus VmRSS at
the start is the section's peak growth (file pages mapped by mmap loaders count as RSS too).
CPU seconds: the rank's own (`cpu_s`, all its threads; `cpu_sys_s` of them in the kernel; its
`minor_faults` and `context_switches`) and the machine's busy and total
(`machine_busy_s`, `machine_capacity_s`, from /proc/stat), over the same section.
--check (outside the clock) compares every local shard with the bytes in the files.

--dequantize: CHECKPOINT_DIR is FP8 block-scaled (bench/fp8_checkpoint.py) and the model BF16.
The metaload cases pass dequantize=True; hf_dist needs nothing (transformers dequantizes an FP8
checkpoint on a machine without a GPU by itself). --check then compares every local shard with
DeepSeek's dequantization of the file's codes (fp8_checkpoint.fp8_value), and prints each local
shard's sha256, which bench/e2e_fp8.py compares across the loaders rank by rank.
"""
import argparse
import importlib
import json
import os
import pathlib
import resource
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoConfig, AutoModelForCausalLM

from peer_loaders import CASES as PEER_CASES
from peer_loaders import IMPORTS as PEER_IMPORTS
from processes import machine_cpu_seconds
from s3_loaders import CASES as S3_CASES

# How a rank whose loader ran collectives on tensors made in Python (dcp, broadcast, the check's
# full tensors) leaves without torch's teardown abort: tests/integration/gloo_exit.py says why.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "integration"))
from gloo_exit import leave  # noqa: E402


def proc_kib(keys=("VmRSS", "VmHWM", "RssAnon", "RssFile")):
    out = {}
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in keys:
            out[key] = int(rest.split()[0])
    return out


def rchar():
    for line in pathlib.Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def shard_model(model, mesh):
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def meta_model(config):
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


def fresh_rotary(module, config):
    with torch.device("cpu"):
        return type(module)(config=getattr(module, "config", config))


def recompute_rotary(model, config):
    """The non-persistent rotary buffers, as the model's own __init__ computes them."""
    for module in model.modules():
        if type(module).__name__.endswith("RotaryEmbedding"):
            fresh = fresh_rotary(module, config)
            for name, buf in fresh.named_buffers(recurse=False):
                module.register_buffer(name, buf, persistent=False)


def touch_pages(tensors):
    """Reads one byte of every page of each tensor's bytes (a mapped page is faulted in)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for t in tensors:
        if t.numel() == 0 or t.device.type == "meta":
            continue
        if t.is_contiguous():
            total += int(t.reshape(-1).view(torch.uint8)[::page].sum())
        else:
            total += int(t.float().sum().isfinite())  # reads every element
    return total


def local_tensors(model):
    return [local_and_offset(t)[0] for t in model.state_dict().values()]


def pread_limit(model, args, threads=2):
    """The limit case: each local shard's bytes pread into a fresh tensor; {name: tensor}."""
    import concurrent.futures

    import checkpoint_data

    where = json.loads((pathlib.Path(args.checkpoint) / "model.safetensors.index.json").read_text())["weight_map"]
    headers = {f: checkpoint_data.read_header(pathlib.Path(args.checkpoint) / f) for f in set(where.values())}
    jobs, out = [], {}
    for name, t in model.state_dict().items():
        local, offset = local_and_offset(t)
        if name not in where:
            continue
        data_start, header = headers[where[name]]
        entry = header[name]
        row_bytes = local.element_size()
        for n in t.shape[1:]:
            row_bytes *= n
        if list(local.shape[1:]) != list(t.shape[1:]):
            raise SystemExit(f"e2e_fsdp limit: {name}: a local shard that is not whole rows")
        dest = torch.empty(local.shape, dtype=local.dtype)
        out[name] = dest
        if dest.numel():
            jobs.append((where[name], data_start + entry["data_offsets"][0] + (offset[0] if offset else 0) * row_bytes,
                         dest))
    fds = {f: os.open(pathlib.Path(args.checkpoint) / f, os.O_RDONLY) for f in headers}

    def read(job):
        file, at, dest = job
        view = memoryview(dest.reshape(-1).view(torch.uint8).numpy())
        done = 0
        while done < len(view):
            n = os.preadv(fds[file], [view[done:]], at + done)
            if n <= 0:
                raise OSError(f"short read of {file} at {at + done}")
            done += n

    try:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            list(pool.map(read, jobs))
    finally:
        for fd in fds.values():
            os.close(fd)
    return out


def weight_map(checkpoint):
    """{tensor name: file name}: the index's, or every tensor of a lone model.safetensors."""
    index = pathlib.Path(checkpoint) / "model.safetensors.index.json"
    if index.exists():
        return json.loads(index.read_text())["weight_map"]
    import checkpoint_data

    return {name: "model.safetensors" for name in checkpoint_data.read_header(pathlib.Path(checkpoint) /
                                                                              "model.safetensors")[1]}


def shard_files(checkpoint):
    index = pathlib.Path(checkpoint) / "model.safetensors.index.json"
    names = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() \
        else ["model.safetensors"]
    return [pathlib.Path(checkpoint) / n for n in names]


def load(case, args, config, mesh, counted):
    if case == "hf":
        model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.bfloat16)
        counted["file_tensor_bytes"] = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        counted["how"] = "from_pretrained reads every tensor of the checkpoint (its state_dict's bytes)"
        return shard_model(model, mesh)
    if case == "hf_dist":
        from transformers.distributed import DistributedConfig

        replicas, shards = args.mesh_shape
        model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.bfloat16, distributed_config=
                                                     DistributedConfig(fsdp_size=shards, dp_replicate_size=replicas))
        if args.dequantize:
            counted["file_tensor_bytes"] = stored_slice_bytes(model, args.checkpoint)
            counted["how"] = ("the rank's local slices in their stored dtypes, codes with their scale rows "
                              "(transformers' sharded load slices both by rows, mmap)")
        else:
            counted["file_tensor_bytes"] = sum(t.numel() * t.element_size() for t in local_tensors(model))
            counted["how"] = "the rank's local shard bytes (transformers' sharded load reads those slices, mmap)"
        return model
    if case == "metaload_hf_dist":
        import metaload
        from transformers.distributed import DistributedConfig

        replicas, shards = args.mesh_shape
        model = metaload.from_pretrained(args.checkpoint, dtype=torch.bfloat16, dequantize=args.dequantize,
                                         distributed_config=DistributedConfig(fsdp_size=shards,
                                                                              dp_replicate_size=replicas))
        count_report(counted, model.metaload_report)
        return model
    model = shard_model(meta_model(config), mesh)
    counted["model_built_s"] = time.monotonic() - counted["started"]
    if case == "limit":
        counted["limit_buffers"] = pread_limit(model, args)
        counted["file_tensor_bytes"] = sum(t.numel() * t.element_size() for t in counted["limit_buffers"].values())
        counted["how"] = "bytes pread into the fresh buffers"
    elif case in ("dcp", "dcp_threads"):
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import HuggingFaceStorageReader

        class CountingReader(HuggingFaceStorageReader):
            def _process_read_request(self, f, req, planner):
                n = 1
                for length in req.lengths:
                    n *= length
                counted["file_tensor_bytes"] += n * self.storage_data[req.storage_index].dtype.itemsize
                return super()._process_read_request(f, req, planner)

        counted["file_tensor_bytes"] = 0
        counted["how"] = "sum of HuggingFaceStorageReader's read items (safe_open get_slice, mmap)"
        model.to_empty(device="cpu")
        threads = len(shard_files(args.checkpoint)) if case == "dcp_threads" else 1
        dcp.load(model.state_dict(), storage_reader=CountingReader(args.checkpoint, thread_count=threads))
        recompute_rotary(model, config)
    elif case == "broadcast":
        from safetensors.torch import load_file
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        full = {}
        if dist.get_rank() == 0:
            for path in shard_files(args.checkpoint):
                full.update(load_file(path))
        counted["file_tensor_bytes"] = sum(t.numel() * t.element_size() for t in full.values())
        counted["how"] = "rank 0: bytes of the tensors load_file returned (mmap); others read nothing"
        set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
        del full
        recompute_rotary(model, config)
    elif case in PEER_CASES:
        import peer_loaders

        peer_loaders.load_into(case, model, args, counted)
        recompute_rotary(model, config)
    elif case in S3_CASES:
        import s3_loaders

        s3_loaders.load_into(case, model, args, counted)
        counted["file_tensor_bytes"] = counted.get("s3_bytes")
        recompute_rotary(model, config)
    elif case in ("metaload", "metaload_daemon"):
        import metaload
        if case == "metaload":
            report = metaload.materialize(model, args.name, checkpoint=args.checkpoint, device="cpu",
                                          dequantize=args.dequantize)
        else:
            report = metaload.materialize(model, args.name, daemon=args.daemon, device="cpu")
        count_report(counted, report)
    else:
        raise SystemExit(f"e2e_fsdp: unknown case {case}")
    return model


def count_report(counted, report):
    counted["file_tensor_bytes"] = report.bytes_read
    counted["how"] = "LoadReport.bytes_read"
    counted["report"] = {"direct_bytes": report.direct_bytes, "streamed_bytes": report.streamed_bytes,
                         "bytes_read": report.bytes_read, "seconds": report.seconds,
                         "verified_tensors": report.verified_tensors,
                         "fanout_received_bytes": report.fanout_received_bytes,
                         "fanout_sent_bytes": report.fanout_sent_bytes}


def stored_slice_bytes(model, checkpoint):
    """The bytes of this rank's local slices in the dtypes the files store them: 1 a code, and the
    F32 scale rows of a code row range (FP8's 128x128 blocks)."""
    import fp8_checkpoint

    where = json.loads((pathlib.Path(checkpoint) / "model.safetensors.index.json").read_text())["weight_map"]
    total = 0
    for name, t in model.state_dict().items():
        local, _ = local_and_offset(t)
        if name + "_scale_inv" in where:
            blocks = fp8_checkpoint.BLOCK
            total += local.numel() + -(-local.shape[0] // blocks) * -(-local.shape[1] // blocks) * 4
        else:
            total += local.numel() * local.element_size()
    return total


def local_digests(model):
    """{name: [global offset, local shape, sha256 of the local shard's bytes]} of every state_dict tensor."""
    import hashlib

    out = {}
    for name, t in model.state_dict().items():
        local, offset = local_and_offset(t)
        data = local.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
        out[name] = [offset, list(local.shape), hashlib.sha256(data).hexdigest()]
    return out


def local_and_offset(t):
    if not hasattr(t, "device_mesh"):
        return t, [0] * t.dim()
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    _, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
    return t.to_local(), list(offset)


def check(model, args, config, buffers=None):
    """Every local shard against the files (`buffers`: the limit case's reads, by name, in place of
    the model's); the rotary buffers against a fresh computation. Returns a list of problems
    (empty: all equal)."""
    from safetensors import safe_open
    files = pathlib.Path(args.check_against or args.checkpoint)
    where = weight_map(files)
    problems, handles = [], {}
    try:
        for name, t in model.state_dict().items():
            local, offset = local_and_offset(t)
            if buffers is not None:
                local = buffers.get(name, local)
            if local.device.type == "meta":
                problems.append(f"{name}: still on meta")
                continue
            if name not in where:
                problems.append(f"{name}: not in the checkpoint")
                continue
            f = handles.setdefault(where[name], safe_open(str(files / where[name]), "pt"))
            box = tuple(slice(o, o + n) for o, n in zip(offset, local.shape))
            if name + "_scale_inv" in where:
                import fp8_checkpoint
                scales = handles.setdefault(where[name + "_scale_inv"],
                                            safe_open(str(files / where[name + "_scale_inv"]), "pt"))
                want = fp8_checkpoint.fp8_value(f.get_tensor(name), scales.get_tensor(name + "_scale_inv"),
                                                local.dtype)[box]
            else:
                want = f.get_slice(name)[box]
            if not torch.equal(local, want):
                problems.append(f"{name}: local shard at {offset} differs from the file")
    finally:
        handles.clear()
    fresh = {}
    if buffers is not None:
        return problems  # the limit case computes no buffer
    for module in model.modules():
        if type(module).__name__.endswith("RotaryEmbedding"):
            ref = fresh_rotary(module, config)
            for name, buf in ref.named_buffers(recurse=False):
                got = getattr(module, name)
                if got.device.type == "meta" or not torch.equal(got, buf):
                    problems.append(f"rotary {name} differs from a fresh computation")
                fresh[name] = True
    if not fresh:
        problems.append("no rotary buffers found")
    return problems


def parse_mesh(text, world):
    """--mesh R,S as (R, S); absent: (1, world). Exits when R*S is not the world size."""
    if text is None:
        return 1, world
    try:
        replicas, shards = (int(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"e2e_fsdp: --mesh {text!r}: want R,S (two integers)")
    if replicas < 1 or shards < 1 or replicas * shards != world:
        raise SystemExit(f"e2e_fsdp: --mesh {text}: R*S = {replicas * shards}, the world size is {world}")
    return replicas, shards


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("checkpoint")
    parser.add_argument("--name", default="bench")
    parser.add_argument("--daemon")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--check-against", help="the folder --check compares with (default: CHECKPOINT_DIR)")
    parser.add_argument("--config", help="the folder of the model's config.json (default: CHECKPOINT_DIR; a rank "
                                         "on a host that cannot see the checkpoint has its own copy)")
    parser.add_argument("--mesh", help="R,S: R replicas x S shards (default 1,WORLD)")
    parser.add_argument("--dequantize", action="store_true", help="CHECKPOINT_DIR is FP8 block-scaled: dequantize")
    parser.add_argument("--local-dir", help="this host's local disk (s3_dcp copies the checkpoint there)")
    args = parser.parse_args()
    if args.case in S3_CASES:
        import s3_loaders

        if not args.config or not args.check_against:
            parser.error(f"{args.case} needs --config and --check-against (local folders)")
        args.header_sizes = s3_loaders.header_sizes(args.check_against)
    if args.case == "metaload_daemon" and not args.daemon:
        parser.error("metaload_daemon needs --daemon")
    # Every import before the clock, torch's and the loader's alike.
    for module in {"hf": [], "hf_dist": ["transformers.distributed"],
                   "metaload_hf_dist": ["metaload", "transformers.distributed"], "dcp": ["torch.distributed.checkpoint"],
                   "dcp_threads": ["torch.distributed.checkpoint"], "limit": ["checkpoint_data"],
                   "broadcast": ["safetensors.torch", "torch.distributed.checkpoint.state_dict"],
                   "s3_runai": ["runai_model_streamer", "boto3"], "s3_runai_dist": ["runai_model_streamer", "boto3"],
                   "s3_boto3": ["boto3", "safetensors.torch"],
                   "s3_dcp": ["s3fs", "torch.distributed.checkpoint"], **PEER_IMPORTS,
                   }.get(args.case, ["metaload"]):
        importlib.import_module(module)
    if args.dequantize:  # transformers' FP8 quantizer, which it imports on first use
        for module in ("transformers.quantizers.quantizer_finegrained_fp8", "transformers.integrations.finegrained_fp8"):
            importlib.import_module(module)

    torch.set_num_threads(1)  # four ranks share this machine's cores
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    replicas, shards = args.mesh_shape = parse_mesh(args.mesh, world)
    if replicas > 1:
        mesh = init_device_mesh("cpu", (replicas, shards), mesh_dim_names=("dp_replicate", "dp_shard"))
    else:
        mesh = init_device_mesh("cpu", (world,))
    config = AutoConfig.from_pretrained(args.config or args.checkpoint)
    # Warm-up, also before the clock: transformers imports the model's module lazily (seconds
    # on this machine) and FSDP2 some of its own on first use; a meta model costs no memory.
    # transformers' conversion mappings (~0.25 s here), which from_pretrained and metaload both
    # look up, are built once per process on first use.
    warm = time.monotonic()
    del_me = shard_model(meta_model(config), mesh)
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    get_checkpoint_conversion_mapping(config.model_type)  # builds transformers' table of every model's, once
    del del_me
    warm = time.monotonic() - warm
    dist.barrier()

    # ---- the load section -----------------------------------------------------------------
    pathlib.Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before, rchar_before = proc_kib(), rchar()
    # CPU: this process's (every thread's), and the whole machine's, whose emulated hosts share
    # its cores: a regime whose machine is busy all through measures the cores, not the links.
    usage_before, machine_before = resource.getrusage(resource.RUSAGE_SELF), machine_cpu_seconds()
    started = time.monotonic()
    counted = {"started": started}
    model = load(args.case, args, config, mesh, counted)
    counted["touched_s"] = time.monotonic()
    touch_pages(counted["limit_buffers"].values() if "limit_buffers" in counted else local_tensors(model))
    loaded = time.monotonic()
    counted["touched_s"] = loaded - counted["touched_s"]
    dist.barrier()
    seconds = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_user_s, cpu_sys_s = usage.ru_utime - usage_before.ru_utime, usage.ru_stime - usage_before.ru_stime
    machine_busy_s, machine_capacity_s = (end - begin for end, begin in zip(machine_cpu_seconds(), machine_before))
    after, rchar_after = proc_kib(), rchar()
    # ---- end ------------------------------------------------------------------------------

    shard_bytes = 0
    for t in model.state_dict().values():
        local, _ = local_and_offset(t)
        shard_bytes += local.numel() * local.element_size()
    result = {"case": args.case, "rank": rank, "world": world, "mesh": [replicas, shards], "seconds": seconds,
              "load_seconds_before_barrier": loaded - started, "meta_model_and_fully_shard_s": counted.get("model_built_s"),
              "cpu_s": cpu_user_s + cpu_sys_s, "cpu_sys_s": cpu_sys_s,
              "minor_faults": usage.ru_minflt - usage_before.ru_minflt,
              "context_switches": usage.ru_nvcsw + usage.ru_nivcsw - usage_before.ru_nvcsw - usage_before.ru_nivcsw,
              "machine_busy_s": machine_busy_s, "machine_capacity_s": machine_capacity_s,
              "warmup_s": warm, "touch_pages_s": counted["touched_s"], "rchar_bytes": rchar_after - rchar_before,
              "file_tensor_bytes": counted.get("file_tensor_bytes"), "file_tensor_bytes_how": counted.get("how"),
              "shard_bytes": shard_bytes, "rss_before_kib": before["VmRSS"], "vmhwm_kib": after["VmHWM"],
              "peak_rss_growth_bytes": (after["VmHWM"] - before["VmRSS"]) * 1024,
              "rss_after_kib": after["VmRSS"], "rss_anon_after_kib": after.get("RssAnon"),
              "rss_file_after_kib": after.get("RssFile")}
    if "report" in counted:
        result["metaload_report"] = counted["report"]
    if args.case in S3_CASES:
        result["s3_bytes"], result["s3_header_bytes"] = counted.get("s3_bytes"), counted.get("s3_header_bytes")
    if args.case in ("runai", "runai_dist"):
        result["runai_distributed"] = counted.get("runai_distributed")
        result["runai_streamed_tensor_bytes"] = counted.get("runai_streamed_tensor_bytes")
    if args.check:
        t = time.monotonic()
        result["check_problems"] = check(model, args, config, counted.get("limit_buffers"))
        if args.dequantize:
            result["local_digests"] = local_digests(model)
        result["check_seconds"] = time.monotonic() - t
    print(json.dumps(result), flush=True)
    leave()


if __name__ == "__main__":
    main()
