"""The peers' half of the GPU check (scripts/gpu-check.sh, scripts/gpu-check-device.sh), one process,
one GPU, the same checkpoint as the rest of the check: how fast each loader users pick fills the GPU,
against metaload.materialize measured in the same run, every result compared with the files bit for bit.

  metaload         materialize(meta model, checkpoint=dir, device=DEVICE): the reference (as
                   gpu_check_materialize.py's plain mode)
  runai            the Run:ai Model Streamer 0.17.1 at its defaults: SafetensorsStreamer().stream_files(
                   files, device=DEVICE), every tensor of get_tensors() kept
  fastsafetensors  fastsafetensors 0.5.0 at its defaults: SafeTensorsFileLoader(SingleGroup(), DEVICE)
                   (GPU Direct Storage where cuFile works, else its pinned bounce buffers),
                   add_filenames({0: files}), copy_files_to_device(), get_tensor of every key
  instanttensor    InstantTensor 0.2.2: safe_open(files, framework="pt", device=DEVICE), every tensor
                   of tensors() cloned (they point into its reused buffer). On CPU it raises
                   `ValueError: InstantTensor only supports CUDA devices for now`

Each runs ROUNDS times (default 2) with its result freed in between; the faster is reported as GB/s of
the checkpoint's tensor bytes and as its time over metaload's (above 1: metaload is faster). The page
cache holds the files (read once first); the peers that read with O_DIRECT do not use it.

    python scripts/gpu_check_peers.py CHECKPOINT_DIR [DEVICE] [ROUNDS]
DEVICE cuda (default) or cpu: the dry run, where InstantTensor is reported as unsupported, not failed.
Exits 1 if a loader fails (or a peer package is missing) or loads a byte that differs from the files.
"""
import pathlib
import sys
import time

import torch


def shard_files(folder):
    return sorted(str(p) for p in pathlib.Path(folder).glob("*.safetensors"))


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def load_metaload(folder, device, files):
    import metaload
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=torch.bfloat16)
    metaload.materialize(model, "gpucheck-peers", checkpoint=folder, device=device)
    return dict(model.state_dict())


def load_runai(folder, device, files):
    from runai_model_streamer import SafetensorsStreamer

    with SafetensorsStreamer() as streamer:
        streamer.stream_files(files, device=device)
        return {name: tensor.to(device) for name, tensor in streamer.get_tensors()}


def load_fastsafetensors(folder, device, files):
    from fastsafetensors import SafeTensorsFileLoader, SingleGroup

    loader = SafeTensorsFileLoader(SingleGroup(), device, nogds=device == "cpu")  # GDS needs a GPU
    try:
        loader.add_filenames({0: files})
        buffers = loader.copy_files_to_device()
        try:  # single-process tensors own their storage: valid after close()
            return {name: buffers.get_tensor(name) for name in loader.get_keys()}
        finally:
            buffers.close()
    finally:
        loader.close()


def load_instanttensor(folder, device, files):
    from instanttensor import safe_open

    with safe_open(files, framework="pt", device=device) as f:
        return {name: tensor.clone() for name, tensor in f.tensors()}


LOADERS = {"metaload": load_metaload, "runai": load_runai, "fastsafetensors": load_fastsafetensors,
           "instanttensor": load_instanttensor}


def timed(load, folder, device, files):
    sync(device)
    started = time.perf_counter()
    tensors = load(folder, device, files)
    sync(device)
    return time.perf_counter() - started, tensors


def differs(tensors, want, device):
    """Names whose tensor is missing, off the device or not equal to the file's."""
    bad = [n for n in want if n not in tensors or tensors[n].device.type != device.split(":")[0]
           or not torch.equal(tensors[n], want[n])]
    return bad + sorted(set(tensors) - set(want))


def main():
    folder, device = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cuda"
    device = "cuda:0" if device == "cuda" else device  # one GPU; every loader takes this spelling
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    from safetensors.torch import load_file

    files = shard_files(folder)
    want = {}
    for f in files:  # also puts the files in the page cache
        want.update({n: t.to(device) for n, t in load_file(f).items()})
    total = sum(t.numel() * t.element_size() for t in want.values())
    results, failed = {}, []
    for name, load in LOADERS.items():
        try:
            best = None
            for _ in range(rounds):
                seconds, tensors = timed(load, folder, device, files)
                bad = differs(tensors, want, device)
                del tensors
                if device.startswith("cuda"):
                    torch.cuda.empty_cache()
                if bad:
                    raise RuntimeError(f"{len(bad)} tensors differ from the files, e.g. {bad[:3]}")
                best = seconds if best is None else min(best, seconds)
            results[name] = best
            print(f"{name}: {best:.3f} s, {total / best / 1e9:.2f} GB/s, bit-exact", flush=True)
        except Exception as e:  # noqa: BLE001 (each loader's failure is a result; the others still run)
            if name == "instanttensor" and device == "cpu" and "only supports CUDA" in str(e):
                print(f"{name}: unsupported on cpu ({type(e).__name__}: {e})", flush=True)
                continue
            hint = " (install scripts/requirements.txt's peers)" if isinstance(e, ImportError) else ""
            print(f"{name}: FAILED: {type(e).__name__}: {e}{hint}", flush=True)
            failed.append(name)
    ours = results.get("metaload")
    summary = "; ".join(f"{n} {s:.3f} s" + (f" = {s / ours:.2f} x metaload" if ours and n != "metaload" else "")
                        for n, s in results.items())
    print(f"{total} tensor bytes on {device}, best of {rounds}: {summary}" +
          (f"; FAILED: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
