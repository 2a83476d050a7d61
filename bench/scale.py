"""The 100k-tensor case of bench/run_bench.py (`--only scale`, issue 22 item 5): a synthetic
DeepSeek-V3-shaped checkpoint (`metactl synth --experts 256 --weight-scales`: 61 layers, 256
routed experts, the FP8 release's weight_scale_inv beside every projection; 90,427 tensors in
163 shards, as DeepSeek-V3 has ~91k in 163; tiny shapes, so the files are ~12 MiB and every
second is spent on names, not bytes) through every step that reads all of its tensors:

  inspect      metactl inspect DIR --format json            (every header and the index)
  check        metactl check DIR DIR                        (skeleton derived + matched)
  register     metactl register NAME --checkpoint DIR       (one metad: headers, skeleton, meta tensors)
  plan         metactl plan DIR --gpus 2 --strategy fsdp --format json
  plan_daemon  metactl plan NAME --daemon ADDR --gpus 2 --strategy fsdp --format json   (reported only)
  materialize  bench/scale_rank.py on --scale-ranks CPU ranks (Gloo): DeepseekV3ForCausalLM on meta,
               fully_shard, metaload.materialize(checkpoint=DIR, strict=False); the slowest rank's
               seconds from just before the call to its return

Each command is timed from its start to its exit (a fresh process, page cache warm), --scale-repeats
rounds, medians. `parse_100k_tensors_s` is the slowest of inspect, check, register and plan
(target <= 2); `materialize_100k_tensors_s` the median materialize.
"""
import os
import pathlib
import re
import statistics

import processes
from processes import Daemon, run_timed

BENCH_DIR = pathlib.Path(__file__).resolve().parent
MODEL = "scale"
LAYERS, EXPERTS = 61, 256
SYNTH_FLAGS = ["--layers", LAYERS, "--experts", EXPERTS, "--weight-scales", "--hidden", 16, "--heads", 2,
               "--intermediate", 32, "--moe-intermediate", 8, "--vocab", 64, "--shard-size", "80KB"]
PARSE_STEPS = ("inspect", "check", "register", "plan")
TARGET_S = 2.0


class Scale:
    def __init__(self, bench, args, reaper):
        self.bench, self.args, self.reaper = bench, args, reaper
        self.samples = []
        self.daemon = None

    def prepare(self, work):
        self.checkpoint = work / "deepseek-v3-shaped"
        wrote = run_timed([self.bench.metactl, "synth", self.checkpoint, *SYNTH_FLAGS, "--overwrite"],
                          self.args.timeout, reaper=self.reaper)
        line = wrote["stdout_lines"][-1][1]
        match = re.search(r": (\d+) files, (\d+) tensors", line)
        if not match:
            raise RuntimeError(f"metactl synth: unexpected output {line!r}")
        self.files, self.tensors = int(match.group(1)), int(match.group(2))
        self.synth_s = wrote["wall_s"]
        self.daemon = Daemon(self.bench.metad, work, "scale", [work], self.args.scale_ranks, self.reaper)

    def warm(self):
        for path in sorted(self.checkpoint.iterdir()):
            path.read_bytes()

    def command(self, step):
        ckpt, metactl, addr = str(self.checkpoint), self.bench.metactl, self.daemon.address
        plan_flags = ["--gpus", self.args.scale_ranks, "--strategy", "fsdp", "--format", "json"]
        return {"inspect": [metactl, "inspect", ckpt, "--format", "json"],
                "check": [metactl, "check", ckpt, ckpt],
                "register": [metactl, "register", MODEL, "--checkpoint", ckpt, "--daemon", addr,
                             "--timeout", self.args.timeout],
                "plan": [metactl, "plan", ckpt, *plan_flags],
                "plan_daemon": [metactl, "plan", MODEL, "--daemon", addr, *plan_flags]}[step]

    def materialize(self):
        cmd = [self.bench.python, BENCH_DIR / "scale_rank.py", "--checkpoint", self.checkpoint]
        # The package of the build measured, not whichever one the environment holds.
        results = processes.run_ranks(cmd, self.args.scale_ranks, self.args.timeout, self.reaper,
                                      PYTHONPATH=str(self.bench.metactl.parents[1] / "python"))
        ranks = []
        for rank, r in enumerate(results):
            if r["rc"] != 0:
                raise RuntimeError(f"scale materialize rank {rank} exited {r['rc']}:\n{r['stderr'][-3000:]}")
            ranks.append(processes.last_json_line(r))
        return {"seconds": max(x["slowest_materialize_s"] for x in ranks), "ranks": ranks}

    def run_rounds(self):
        for round_index in range(self.args.scale_repeats):
            self.warm()
            sample, cpu = {}, {}
            for step in (*PARSE_STEPS, "plan_daemon"):
                r = run_timed(self.command(step), self.args.timeout, reaper=self.reaper, discard_stdout=True)
                sample[step], cpu[step] = r["wall_s"], r["user_s"] + r["sys_s"]
            print(f"scale round {round_index + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in sample.items()),
                  flush=True)
            sample["cpu_s"] = cpu  # metactl's own (register's and plan_daemon's work is the daemon's)
            sample["materialize"] = self.materialize()
            print(f"scale round {round_index + 1}: materialize {sample['materialize']['seconds']:.2f} s", flush=True)
            self.samples.append(sample)

    def summary(self):
        steps = {step: statistics.median(s[step] for s in self.samples) for step in (*PARSE_STEPS, "plan_daemon")}
        materialize = statistics.median(s["materialize"]["seconds"] for s in self.samples)
        parse = max(steps[step] for step in PARSE_STEPS)
        return {"parse_100k_tensors_s": parse, "materialize_100k_tensors_s": materialize,
                "targets": {"parse_100k_tensors_s": {"value": parse, "target": f"<= {TARGET_S:g}",
                                                     "pass": parse <= TARGET_S}},
                "steps_s": steps, "slowest_step": max(PARSE_STEPS, key=steps.get),
                "data": {"tensors": self.tensors, "files": self.files, "synth_s": self.synth_s,
                         "synth_flags": [str(f) for f in SYNTH_FLAGS]},
                "ranks": self.args.scale_ranks, "repeats": self.args.scale_repeats,
                "notes": {"seconds": "each command's process from start to exit, page cache warm; medians",
                          "materialize": "slowest rank, from just before metaload.materialize to its return "
                                         "(strict=False: the weight_scale_inv tensors are unexpected)"},
                "samples": self.samples}


def print_scale_table(result):
    data, steps = result["data"], result["steps_s"]
    print(f"\n100k tensors: a DeepSeek-V3-shaped checkpoint of {data['tensors']} tensors in {data['files']} "
          f"files, median of {result['repeats']} rounds")
    for step, seconds in steps.items():
        print(f"  {step:<12} {seconds:7.2f} s")
    print(f"  {'materialize':<12} {result['materialize_100k_tensors_s']:7.2f} s  ({result['ranks']} CPU ranks)")
    verdict = result["targets"]["parse_100k_tensors_s"]
    print(f"parse_100k_tensors_s = {verdict['value']:.2f} ({result['slowest_step']}), target {verdict['target']}: "
          f"{'pass' if verdict['pass'] else 'MISS'}")
