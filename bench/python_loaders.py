"""Times one of the loaders users have today, in a fresh process (page cache warm, process
cold), and prints one JSON object. bench/run_bench.py runs it once per loader and repeat:

    python bench/python_loaders.py torch_load   PYTORCH_MODEL_BIN
    python bench/python_loaders.py safetensors  CHECKPOINT_DIR         (load_file, default mmap backend)
    python bench/python_loaders.py safetensors_pread CHECKPOINT_DIR    (load_file(backend="pread"))
    python bench/python_loaders.py transformers CHECKPOINT_DIR
    ... [page|sum]    how every byte is made resident after the call (default page, see below)

Imports happen before the clock (`import_seconds` reports them). The clock runs from just
before the call until every byte is resident: after the call, one byte of every 4 KiB page of
every tensor is read (included in `seconds`), so a loader that returns memory-mapped
tensors pays for faulting them in. A page stride touches each page once without charging
a full arithmetic pass to loaders whose bytes are already resident; `sum` instead sums every
storage's bytes (the issue's "sum over each tensor"), which reads every byte. `anon_growth_bytes` and
`file_growth_bytes` tell memory the process owns apart from page cache it merely maps: a
memory-mapped result, touched, is resident, but its bytes were never copied.
"""
import gc
import json
import pathlib
import resource
import sys
import time

PAGE_BYTES = 4096


def proc_status_kib():
    values = {}
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            values[key] = int(rest.split()[0])
    return values


def make_resident(tensors, torch, how="page"):
    """Reads one byte of every page (how="page") or every byte (how="sum", summed) of each
    distinct storage behind `tensors`; returns the bytes of those storages."""
    seen, total = set(), 0
    for t in tensors:
        storage = t.untyped_storage()
        if storage.data_ptr() in seen or storage.nbytes() == 0:
            continue
        seen.add(storage.data_ptr())
        raw = torch.empty(0, dtype=torch.uint8).set_(storage)
        if how == "page":
            raw[::PAGE_BYTES].sum()
        else:  # 8-byte lanes: a uint8 sum would time torch's slow widening kernel, not the memory
            whole = raw.numel() // 8 * 8
            raw[:whole].view(torch.int64).sum()
            raw[whole:].sum()
        total += storage.nbytes()
    return total


def main(kind, path, how="page"):
    started = time.perf_counter()
    import torch
    if kind == "torch_load":
        def load():
            return list(torch.load(path, map_location="cpu", mmap=False, weights_only=True).values())
    elif kind in ("safetensors", "safetensors_pread"):
        from safetensors.torch import load_file
        sys.path.insert(0, str(pathlib.Path(__file__).parent))
        from checkpoint_data import shard_files
        files = shard_files(path)
        backend = "pread" if kind == "safetensors_pread" else "mmap"  # mmap: load_file's default

        def load():
            state = {}
            for f in files:
                state.update(load_file(f, backend=backend))
            return list(state.values())
    elif kind == "transformers":
        import accelerate  # noqa: F401  (device_map needs it; imported before the clock)
        from transformers import AutoModelForCausalLM
        from transformers.models.llama import modeling_llama  # noqa: F401

        def load():
            model = AutoModelForCausalLM.from_pretrained(path, device_map="cpu", dtype=torch.bfloat16)
            return list(model.state_dict().values())
    else:
        raise SystemExit(f"unknown loader {kind!r}")
    import_seconds = time.perf_counter() - started

    gc.collect()
    before = proc_status_kib()
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    tensors = load()
    resident_bytes = make_resident(tensors, torch, how)
    seconds = time.perf_counter() - start
    usage_after = resource.getrusage(resource.RUSAGE_SELF)
    after = proc_status_kib()
    print(json.dumps({
        "loader": kind,
        "touch": how,
        "seconds": seconds,
        "bytes": resident_bytes,
        "tensors": len(tensors),
        "import_seconds": import_seconds,
        "rss_before_bytes": before["VmRSS"] * 1024,
        "rss_peak_bytes": after["VmHWM"] * 1024,
        "anon_growth_bytes": (after["RssAnon"] - before["RssAnon"]) * 1024,
        "file_growth_bytes": (after["RssFile"] - before["RssFile"]) * 1024,
        "user_s": usage_after.ru_utime - usage_before.ru_utime,
        "sys_s": usage_after.ru_stime - usage_before.ru_stime,
        "minor_faults": usage_after.ru_minflt - usage_before.ru_minflt,
    }))


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[3:] not in ([], ["page"], ["sum"]):
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
