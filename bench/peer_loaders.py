"""The peers that read a checkpoint's safetensors files into an FSDP-sharded model, as their
users call them, for the e2e case (bench/e2e.py) and the cluster regimes (bench/cluster/regimes.py),
and what the S3 peers (bench/s3_loaders.py) share with them: the Run:ai streaming and the copy of
each full tensor's local rows into the model's shards.

  runai            the Run:ai Model Streamer (runai-model-streamer 0.17.1): SafetensorsStreamer
                   .stream_files of every shard file, every tensor (FSDP needs rows of each), each
                   rank on its own; its local rows copied. On a file system its documented tuning is
                   its default (RUNAI_STREAMER_CONCURRENCY 16 threads; a 40 GB memory limit, past
                   these checkpoints), so there is no tuned variant here
  runai_dist       its distributed mode: stream_files(is_distributed=True) with
                   RUNAI_STREAMER_DIST=1 (its default turns it on for NCCL only). The ranks of a node
                   (grouped by host name) split the reads and broadcast the rest
  runai_dist_global  the same with RUNAI_STREAMER_DIST_GLOBAL=1, its documented mode for splitting
                   the reads between all the ranks of all the nodes (on one host: runai_dist)
  fastsafetensors  fastsafetensors 0.5.0 as its docs and examples use it with a process group:
                   SafeTensorsFileLoader(WORLD, "cpu", nogds=True) (GPU Direct Storage needs a
                   GPU), add_filenames({rank: files[rank::world]}) (its examples' round-robin: each
                   file read by one rank), copy_files_to_device(), then in the same order on every
                   rank get_sharded(name, 0) (a Gloo scatter of rows ceil(n/world) a rank, FSDP2's
                   Shard(0) chunks) where the mesh is FSDP only, and get_tensor(name) (a broadcast)
                   where it has replicas, each rank keeping its local rows. It reads with O_DIRECT
                   by default on local and unknown file systems
  fastsafetensors_buffered  the same with FASTSAFETENSORS_ODIRECT=0, its documented switch to
                   buffered reads (what it picks by itself on NFS and other network file systems;
                   the cluster's emulated NFS is FUSE, which it does not know as one)

InstantTensor (instanttensor 0.2.2) is not here: on a CPU device it raises `ValueError:
InstantTensor only supports CUDA devices for now` (scripts/gpu_check_peers.py runs it on a GPU).
"""
import os

DIST = {"RUNAI_STREAMER_DIST": "1"}  # Gloo: the streamer's default distributes over NCCL only
# name -> (bench/e2e_fsdp.py case, the environment of its ranks)
FILE_PEERS = {
    "runai": ("runai", {}),
    "runai_dist": ("runai_dist", DIST),
    "runai_dist_global": ("runai_dist", {**DIST, "RUNAI_STREAMER_DIST_GLOBAL": "1"}),
    "fastsafetensors": ("fastsafetensors", {}),
    "fastsafetensors_buffered": ("fastsafetensors", {"FASTSAFETENSORS_ODIRECT": "0"}),
}
CASES = ("runai", "runai_dist", "fastsafetensors")  # bench/e2e_fsdp.py's cases of these peers
IMPORTS = {"runai": ["runai_model_streamer"], "runai_dist": ["runai_model_streamer"],
           "fastsafetensors": ["fastsafetensors"]}


def rank_case(name):
    """(bench/e2e_fsdp.py case, environment) of a loader name: a peer's here, any other as is."""
    return FILE_PEERS.get(name, (name, {}))


# ---- shared with bench/s3_loaders.py -----------------------------------------------------------
def runai_stream(paths, counted, distributed=False):
    """(name, tensor) of every tensor of `paths` (local files or s3:// URLs, not both), streamed by
    the Run:ai Model Streamer to the CPU. Each yielded tensor lives in the streamer's buffers until
    the next one: copy what you keep. Records in `counted`: "runai_streamed_tensor_bytes" (every
    tensor yielded), "runai_distributed" (whether it really split the reads; it falls back without
    a word) and "runai_own_read_bytes" (the tensor bytes this rank read from storage itself)."""
    from runai_model_streamer import SafetensorsStreamer

    with SafetensorsStreamer() as streamer:
        streamer.stream_files([str(p) for p in paths], device="cpu", is_distributed=distributed)
        streamed = 0
        for name, tensor in streamer.get_tensors():
            streamed += tensor.numel() * tensor.element_size()
            yield name, tensor
        counted["runai_streamed_tensor_bytes"] = streamed
        counted["runai_distributed"], counted["runai_own_read_bytes"] = runai_own_share(streamer, streamed)


def runai_own_share(streamer, streamed):
    """(did it distribute, the tensor bytes this rank read itself). In distributed mode that is
    this rank's part of the streamer's partition, which only its internals hold (0.17.1's
    DistributedStreamer, pinned in scripts/requirements.txt); None if they changed."""
    inner = getattr(streamer, "file_streamer", None)
    if not getattr(inner, "is_distributed", False):
        return False, streamed
    try:
        return True, sum(fc.total_size() for fc in inner.distributed_streamer.rank_file_chunks_list)
    except AttributeError:
        return True, None


def fill_local_shards(model, named_tensors):
    """Copies each full tensor's local rows into the model's (DTensor) local shard; returns the
    names filled. Names the model lacks are an error: the checkpoint is the model's."""
    from e2e_fsdp import local_and_offset

    state = model.state_dict()
    filled = set()
    for name, full in named_tensors:
        if name not in state:
            raise KeyError(f"{name}: in the checkpoint, not in the model")
        local, offset = local_and_offset(state[name])
        if local.numel():
            local.copy_(full[local_box(local, offset)])
        filled.add(name)
    return filled


def local_box(local, offset):
    return tuple(slice(o, o + n) for o, n in zip(offset, local.shape))


def require_all(case, model, filled):
    missing = set(model.state_dict()) - set(filled)
    if missing:
        raise RuntimeError(f"{case}: no tensor in the checkpoint for {sorted(missing)[:5]}")


# ---- one FSDP rank (bench/e2e_fsdp.py's cases) ------------------------------------------------
def load_into(case, model, args, counted):
    """Fills the FSDP-sharded `model` (meta) from the safetensors files of args.checkpoint, on
    CPU, the peer's way; sets counted["file_tensor_bytes"] (the tensor bytes this rank asked its
    files for, headers excluded) and counted["how"]."""
    from e2e_fsdp import shard_files

    model.to_empty(device="cpu")
    files = shard_files(args.checkpoint)
    if case in ("runai", "runai_dist"):
        distributed = case == "runai_dist"
        if distributed and os.environ.get("RUNAI_STREAMER_DIST") != "1":
            raise SystemExit("runai_dist: set RUNAI_STREAMER_DIST=1 (over Gloo the streamer does not distribute "
                             "otherwise)")
        require_all(case, model, fill_local_shards(model, runai_stream(files, counted, distributed)))
        if distributed and not counted["runai_distributed"]:
            raise RuntimeError("runai_dist: the streamer fell back to reading every tensor on every rank")
        counted["file_tensor_bytes"] = counted["runai_own_read_bytes"]
        counted["how"] = ("this rank's part of the streamer's partition (its internals)" if distributed
                          else "every tensor the streamer yielded")
    elif case == "fastsafetensors":
        fastsafetensors_fill(model, files, args.mesh_shape, counted)
    else:
        raise SystemExit(f"peer_loaders: unknown case {case}")


def fastsafetensors_fill(model, files, mesh_shape, counted):
    """fastsafetensors' distributed load (module docstring): each rank reads whole files, the
    collectives hand every rank its rows."""
    import torch.distributed as dist
    from fastsafetensors import SafeTensorsFileLoader

    from e2e_fsdp import local_and_offset

    world, rank = dist.get_world_size(), dist.get_rank()
    mine = files[rank::world]
    counted["file_tensor_bytes"] = sum(tensor_bytes_of_file(f) for f in mine)
    counted["how"] = "the tensors of the files this rank reads whole (every rank reads every header)"
    scatter = mesh_shape[0] == 1  # FSDP only: every rank's shard is its Shard(0) chunk of the world
    loader = SafeTensorsFileLoader(dist.group.WORLD, "cpu", nogds=True)
    try:
        loader.add_filenames({r: [str(f) for f in files[r::world]] for r in range(world)})
        buffers = loader.copy_files_to_device()
        try:
            state = model.state_dict()
            for name, t in state.items():  # the same order on every rank: each call is a collective
                local, offset = local_and_offset(t)
                if scatter:
                    part = buffers.get_sharded(name, 0)
                    if tuple(part.shape) != tuple(local.shape):
                        raise RuntimeError(f"fastsafetensors: {name}: get_sharded gave rank {rank} {list(part.shape)}, "
                                           f"its FSDP shard is {list(local.shape)}")
                    local.copy_(part)
                else:
                    local.copy_(buffers.get_tensor(name)[local_box(local, offset)])
        finally:
            buffers.close()
    finally:
        loader.close()


def tensor_bytes_of_file(path):
    import checkpoint_data

    return sum(e["data_offsets"][1] - e["data_offsets"][0] for e in checkpoint_data.read_header(path)[1].values())
