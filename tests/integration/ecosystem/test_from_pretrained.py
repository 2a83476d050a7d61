"""metaload.from_pretrained equals transformers' own from_pretrained(distributed_config=...) bit
for bit (issue 24), on every parallelism transformers applies, tied models included, while each
rank reads only its shards — streamed, config.json included, where the host cannot see the files.

One torchrun launch of 4 CPU ranks on Gloo (from_pretrained_rank.py) loads each case twice on
every rank, with AutoModelForCausalLM.from_pretrained and with metaload.from_pretrained, and
compares names, DTensor placements, dtypes, every local tensor (torch.equal), which names share
one tensor (the tie), train/eval mode and a forward pass's logits. The models are tiny ones that
transformers itself builds and saves (save_pretrained, sharded).
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from checkpoints import checkpoint_bytes
from conftest import blind_to, free_port, metactl
from pyproc import ok
from tiny_models import ENV, models, served  # noqa: F401 (models: the fixture)

HERE = pathlib.Path(__file__).resolve().parent
VENV_BIN = pathlib.Path(sys.executable).parent

def torchrun(cases, tmp_path, prefix=()):
    cases_file, out = tmp_path / "cases.json", tmp_path / "out"
    out.mkdir(exist_ok=True)
    cases_file.write_text(json.dumps(cases))
    cmd = [*prefix, str(VENV_BIN / "torchrun"), "--nproc-per-node", "4", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), str(HERE / "from_pretrained_rank.py"), str(cases_file), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=480, env=ENV)
    assert proc.returncode == 0, f"torchrun exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return [json.loads((out / f"rank{r}.json").read_text())["results"] for r in range(4)]


def case(case_id, folder, **distributed_config):
    return {"id": case_id, "folder": str(folder), "distributed_config": distributed_config}


def with_a_tensor_no_stage_holds(folder, out):
    """A copy of `folder` whose last shard also stores model.orphan.weight, which no layer of the
    model holds: under pipeline parallelism no stage has a place for it."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file
    shutil.copytree(folder, out)
    index_file = out / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    shard = sorted(set(index["weight_map"].values()))[-1]
    tensors = load_file(out / shard)
    tensors["model.orphan.weight"] = torch.arange(4, dtype=torch.bfloat16)
    save_file(tensors, out / shard, metadata={"format": "pt"})
    index["weight_map"]["model.orphan.weight"] = shard
    index_file.write_text(json.dumps(index))
    return out


def test_every_parallelism_equals_transformers_bit_for_bit(models, tmp_path):
    with served(models, "qwen2-tied", tmp_path, "qwen2") as (daemon, folder):
        streamed = {**case("qwen2 streamed tp2 fsdp2", models / "qwen2-tied", tp_size=2, fsdp_size=2),
                    "name": "qwen2", "daemon": daemon.address, "source": "stream"}
        cases = [
            case("qwen2 tied tp2 fsdp2", models / "qwen2-tied", tp_size=2, fsdp_size=2),
            case("qwen2 tied fsdp4", models / "qwen2-tied", fsdp_size=4),
            case("llama tp4", models / "llama", tp_size=4),
            case("llama hsdp 2x2", models / "llama", dp_replicate_size=2, fsdp_size=2),
            case("llama4 pp4", models / "llama4", pp_size=4),
            case("moe ep4 fsdp4", models / "moe", ep_size=4, fsdp_size=4),
            case("moe tp2 fsdp2", models / "moe", tp_size=2, fsdp_size=2),
            {**case("control: one value changed", models / "llama", tp_size=4), "perturb": True},
            streamed,
        ]
        orphan = with_a_tensor_no_stage_holds(models / "llama4", tmp_path / "llama4-orphan")
        refused = {**case("llama4 pp4, a tensor no stage holds", orphan, pp_size=4), "refused": True}
        # The served copy is invisible to the ranks: config.json and bytes can only come from metad.
        results = torchrun([*cases, refused], tmp_path, prefix=blind_to(folder.parent))
    for rank, by_case in enumerate(results):
        # Found across the ranks (one all-reduce of the core's), said alike on every rank.
        r = by_case[refused["id"]]
        assert r.get("refused", "").startswith(
            f"1 tensor of {orphan.name} has a place on no pipeline stage (model.orphan.weight): another size of "
            "this model?"), f"rank {rank}: {r}"
        assert r["findings"] == [["model.orphan.weight", -1, "no pipeline stage holds it"]], r
        for c in cases:
            r = by_case[c["id"]]
            assert "crash" not in r, f"rank {rank} {c['id']}:\n{r['crash']}"
            if c.get("perturb"):
                assert r["diffs"] == ["model.embed_tokens.weight: values differ", "logits differ"], r["diffs"]
                continue
            assert r["diffs"] == [], f"rank {rank} {c['id']}: {r['diffs']}"
            assert r["report_is_attached"] and r["counts"]["unfilled"] == 0 and r["counts"]["kept"] == 0
    for c in cases:
        if c.get("perturb") or "pp4" in c["id"] or "tp4" in c["id"]:
            continue
        read = [by_case[c["id"]]["bytes_read"] for by_case in results]
        whole = checkpoint_bytes(pathlib.Path(c["folder"]))
        # Each rank reads about a quarter (norms and biases whole on some layouts): never the whole.
        assert max(read) < 0.45 * whole and sum(read) < 1.25 * whole, (c["id"], read, whole)
    tied = results[0]["qwen2 tied tp2 fsdp2"]["counts"]
    assert tied["tied"] == 1, tied
    stream = [by_case["qwen2 streamed tp2 fsdp2"] for by_case in results]
    assert all(r["streamed"] == r["bytes_read"] > 0 for r in stream), stream


REFUSED = [
    ("device_map='auto'", "device_map='auto': metaload places the whole model on one device per rank"),
    ("quantization_config={'load_in_8bit': True}", "quantization_config= is not supported: metaload reads the "
                                                   "quantization the checkpoint's config.json declares: pass "
                                                   "dequantize=True"),
    ("revision='v2'", "revision= is a Hub download option"),
    ("tp_size=2, distributed_config=DistributedConfig(tp_size=2)", "pass either distributed_config or tp_plan/tp_size"),
    ("dtype={'': torch.float16}", "a dtype per module is not supported"),
]


@pytest.mark.parametrize("arguments,message", REFUSED, ids=[r[0] for r in REFUSED])
def test_arguments_that_make_no_sense_here_are_refused_naming_what_to_do(models, arguments, message):
    out = ok(f"""
        import torch, metaload
        from transformers.distributed import DistributedConfig
        try:
            metaload.from_pretrained("{models / 'llama'}", {arguments})
        except metaload.BadInputError as e:
            print("REFUSED", e)
    """)
    assert f"REFUSED " in out and message in out, out


def test_a_name_that_is_no_folder_and_no_daemon_says_so(models):
    out = ok("""
        import metaload
        try:
            metaload.from_pretrained("meta-llama/Llama-3-8B")
        except metaload.BadInputError as e:
            print("REFUSED", e)
    """)
    assert ("REFUSED 'meta-llama/Llama-3-8B' is not a folder on this host, and no daemon was given (daemon= or "
            "$METAD_ADDRESS)") in out, out


def test_without_a_parallel_config_it_loads_on_the_cpu_like_from_pretrained(models):
    out = ok(f"""
        import torch, metaload
        from transformers import AutoModelForCausalLM
        ref = AutoModelForCausalLM.from_pretrained("{models / 'qwen2-tied'}")
        ours = metaload.from_pretrained("{models / 'qwen2-tied'}", dtype="float32")
        want = AutoModelForCausalLM.from_pretrained("{models / 'qwen2-tied'}", dtype=torch.float32)
        assert ref.dtype == torch.bfloat16 and ours.dtype == torch.float32
        for (n, a), (m, b) in zip(want.state_dict().items(), ours.state_dict().items()):
            assert n == m and a.device == b.device == torch.device("cpu") and torch.equal(a, b), n
        assert ours.lm_head.weight is ours.model.embed_tokens.weight and not ours.training
        assert ours.generation_config.to_dict() == want.generation_config.to_dict()
        print("OK", ours.metaload_report.counts["tied"])
    """, timeout=300)
    assert "OK 1" in out, out


def test_a_model_registered_without_a_usable_config_json_asks_for_config(models, tmp_path):
    """A config.json that is no JSON object is left out of the record (the skeleton came from a
    file), with a warning that never shows its content; from_pretrained by name then asks for config=."""
    skeleton = tmp_path / "qwen2.json"
    metactl("skeleton", models / "qwen2-tied", "-o", skeleton, check=0)

    def break_config(folder):
        (folder / "config.json").write_text('["AWS_SECRET_ACCESS_KEY=x"]')

    with served(models, "qwen2-tied", tmp_path, "qwen2", skeleton=skeleton, before_register=break_config) as (
            daemon, folder):
        out = ok(f"""
            import metaload
            try:
                metaload.from_pretrained("qwen2", daemon="{daemon.address}")
            except metaload.BadInputError as e:
                print("REFUSED", e)
        """)
        log = daemon.logs()
    assert ("REFUSED model 'qwen2' was registered without a config.json beside its checkpoint: pass config=") in out
    assert (f"RegisterModel qwen2: config.json not recorded (ranks that cannot see the folder must pass a config): "
            f"{folder}/config.json is not a JSON object") in log, log[-2000:]
    assert "AWS_SECRET" not in log
