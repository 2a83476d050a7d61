"""The FP8 variant of the end-to-end FSDP2 case (`--only e2e-fp8`, issue 36): the e2e case's
Llama checkpoint quantized as DeepSeek's FP8 release stores one (bench/fp8_checkpoint.py: every
`*_proj.weight` as F8_E4M3 codes with F32 128x128 block scales, the rest BF16), loaded into the
same BF16 model by four CPU ranks (Gloo) three ways, interleaved round by round as the e2e case:

  hf_dist           transformers' own dequantizing load: from_pretrained(dir, dtype=bf16,
                    distributed_config=DistributedConfig(fsdp_size=4)); without a GPU it
                    dequantizes an FP8 checkpoint by itself
  metaload_hf_dist  metaload.from_pretrained(dir, dtype=bf16, distributed_config=..., dequantize=True)
  metaload          meta model + fully_shard + metaload.materialize(model, checkpoint=dir, dequantize=True)

Time, bytes and peak RSS are taken as in the e2e case (bench/e2e_fsdp.py); peak RSS is over the
rank's BF16 shard, read/ckpt over the FP8 checkpoint's tensor bytes. In round 1 (unless
--e2e-no-check) every rank compares its shards with DeepSeek's dequantization of the file's
codes, and the driver compares every rank's local shards across the three loaders by sha256: a
benchmark whose loaders disagree measures nothing (the case is then an error).

transformers 5.24 takes a block as (its local rows) // (its local scale rows), so both loaders give
the same values only when every quantized weight's rows split into whole 128-row blocks on every
rank: rows a multiple of 128 x 4. prepare() refuses a shape that is not (the 1 GiB e2e shape is).
"""
import json
import time

import checkpoint_data
import processes
from e2e import BENCH_DIR, WORLD, E2E

E2E_FP8_CASES = ("hf_dist", "metaload_hf_dist", "metaload")
BLOCK = 128


def unsuitable_rows(dims, world=WORLD):
    """The quantized weights whose rows do not split into whole 128-row blocks on `world` ranks."""
    rows = {"q_proj/o_proj": dims["hidden"], "k_proj/v_proj": dims["kv_heads"] * checkpoint_data.HEAD_DIM,
            "gate_proj/up_proj": dims["intermediate"], "down_proj": dims["hidden"]}
    return {name: n for name, n in rows.items() if n % (BLOCK * world)}


class E2EFp8(E2E):
    label = "e2e-fp8"
    rank_flags = ("--dequantize",)

    def __init__(self, bench, args, reaper):
        super().__init__(bench, args, reaper)
        self.cases = list(E2E_FP8_CASES)
        self.samples = {case: [] for case in self.cases}
        self.digests = {}  # case -> [per rank {name: [offset, shape, sha256]}], from the checked round

    def prepare(self, work):
        self.prepare_checkpoint(work)  # the e2e case's BF16 checkpoint: self.model_bytes is its size
        unsuitable = unsuitable_rows(self.dims)
        if unsuitable:
            raise RuntimeError(f"e2e-fp8: rows {unsuitable} are not multiples of {BLOCK} x {WORLD}: transformers "
                             "would scale them with other blocks' scales (--e2e-dims, or another size)")
        self.bf16_checkpoint = self.checkpoint
        self.checkpoint = work / "e2e-fp8" / "llama"
        stamp = work / "e2e-fp8" / "stamp.json"
        wanted = {"from": str(self.bf16_checkpoint), "dims": self.dims}
        if stamp.exists() and json.loads(stamp.read_text()).get("wanted") == wanted:
            self.prep["fp8_reused"] = str(self.checkpoint)
        else:
            t = time.monotonic()
            processes.run_timed([self.bench.python, BENCH_DIR / "fp8_checkpoint.py", self.bf16_checkpoint,
                                 self.checkpoint], self.args.timeout)
            self.prep["quantize_s"] = time.monotonic() - t
            stamp.write_text(json.dumps({"wanted": wanted}))
        self.describe_checkpoint()

    def data_summary(self):
        return {**super().data_summary(), "dtype": "fp8 e4m3, 128x128 block scales; the rest bf16",
                "bf16_checkpoint": str(self.bf16_checkpoint), "bf16_model_bytes": self.model_bytes}

    def measure(self, case, check):
        sample = super().measure(case, check)
        if check:
            self.digests[case] = [rank.pop("local_digests") for rank in sample["ranks"]]
        return sample

    def run_rounds(self):
        super().run_rounds()
        self.agreement = compare_loaders(self.digests)
        if self.agreement["equal"] is False:
            self.errors["loaders_agree"] = self.agreement["why"]
            print(f"  e2e-fp8: the loaders disagree: {self.agreement['why']}", flush=True)


def compare_loaders(digests):
    """Whether every loader's local shards equal the first's on every rank, bit for bit (sha256 of
    the bytes at the same global offset and shape): {"equal": True|False|None, "why", ...}."""
    if len(digests) < 2:
        return {"equal": None, "why": f"compared {len(digests)} loader(s): run round 1 with --check"}
    (first, reference), *others = digests.items()
    differing = []
    for case, ranks in others:
        for rank, (theirs, ours) in enumerate(zip(reference, ranks)):
            for name in sorted(set(theirs) | set(ours)):
                if theirs.get(name) != ours.get(name):
                    differing.append(f"{case} rank {rank} {name}: {ours.get(name)} != {first}'s {theirs.get(name)}")
    return {"equal": not differing, "loaders": list(digests), "ranks": len(reference),
            "tensors_per_rank": len(reference[0]), "why": "; ".join(differing[:5]) + (
                f" (and {len(differing) - 5} more)" if len(differing) > 5 else "")}
