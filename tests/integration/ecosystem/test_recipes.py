"""Every recipe of examples/ (README "Recipes") runs as its users run it and loads what
transformers' from_pretrained loads, bit for bit (issue 24).

The examples run under torchrun with 4 CPU ranks on Gloo (Accelerate's in one process), through
recipe_rank.py: each example's own main(), then every tensor of the model it returns gathered
whole and compared with AutoModelForCausalLM.from_pretrained of the same folder (torch.equal,
dtype too). The torchrun recipes share one launch (a launch of 4 ranks costs ~15 s of imports
on 2 cores). Models: tiny ones transformers builds and saves (tiny_models.py). The daemon recipe
runs on ranks that cannot see the folder (blind_to), so every byte and the config are streamed.
A control with one value changed after loading must be caught.
"""
import json
import pathlib
import re
import subprocess
import sys

from conftest import SOURCE_DIR, blind_to, free_port
from tiny_models import ENV, models, served  # noqa: F401 (models: the fixture)

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLES = SOURCE_DIR / "examples"
VENV_BIN = pathlib.Path(sys.executable).parent


def recipe(recipe_id, example, reference, args, **extra):
    return {"id": recipe_id, "example": str(EXAMPLES / f"{example}.py"), "reference": str(reference),
            "args": [str(a) for a in args], **extra}


def run(recipes, tmp_path, nproc=4, prefix=(), env=None):
    """(stdout, each rank's {recipe id: comparison})."""
    (tmp_path / "recipes.json").write_text(json.dumps(recipes))
    out = tmp_path / "out"
    out.mkdir()
    launcher = ([str(VENV_BIN / "torchrun"), "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
                 "--master-port", str(free_port())] if nproc > 1 else [sys.executable])
    cmd = [*prefix, *launcher, str(HERE / "recipe_rank.py"), str(tmp_path / "recipes.json"), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env={**ENV, **(env or {})})
    assert proc.returncode == 0, f"exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc.stdout, [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


def assert_equal_to_from_pretrained(ranks, recipe_id):
    for rank, by_recipe in enumerate(ranks):
        r = by_recipe[recipe_id]
        assert r["tensors"] > 10 and r["diffs"] == [] and r["meta"] == [], f"{recipe_id} rank {rank}: {r}"


def printed(stdout, pattern):
    """Every match of `pattern` in what the ranks printed. Matched in the whole text, not line by
    line: ranks share one pipe, and a line of one may land inside another's (print writes the
    text and its newline apart)."""
    return re.findall(pattern, stdout)


def test_fsdp2_hsdp_tp_and_distributed_config_recipes_load_what_from_pretrained_loads(models, tmp_path):
    recipes = [recipe("fsdp2", "fsdp2", models / "qwen2-tied", [models / "qwen2-tied"]),
               recipe("hsdp", "hsdp", models / "llama", [models / "llama"]),
               recipe("tp_fsdp2", "tp_fsdp2", models / "llama", [models / "llama", 2]),
               recipe("distributed_config", "distributed_config", models / "qwen2-tied", [models / "qwen2-tied", 2])]
    stdout, ranks = run(recipes, tmp_path)
    for r in recipes:
        assert_equal_to_from_pretrained(ranks, r["id"])
    # Each recipe prints one line per rank; HSDP's replicas read each byte once between them.
    assert len(printed(stdout, r"\d+ tensors verified")) == 4 * len(recipes), stdout
    hsdp = printed(stdout, r"received (\d+) from its replica group")
    assert len(hsdp) == 4 and all(received != "0" for received in hsdp), stdout


def test_accelerate_init_empty_weights_recipe_and_the_control(models, tmp_path):
    recipes = [recipe("accelerate", "accelerate_init_empty_weights", models / "llama", [models / "llama"]),
               recipe("control", "accelerate_init_empty_weights", models / "llama", [models / "llama"], perturb=True)]
    stdout, ranks = run(recipes, tmp_path, nproc=1)
    assert_equal_to_from_pretrained(ranks, "accelerate")
    assert ranks[0]["control"]["diffs"] == ["model.norm.weight"], ranks
    assert len(printed(stdout, r"bytes onto cpu;")) == 2, stdout


def test_daemon_recipe_streams_everything_to_hosts_without_the_files(models, tmp_path):
    with served(models, "qwen2-tied", tmp_path, "qwen2") as (daemon, folder):
        stdout, ranks = run([recipe("daemon", "daemon_stream", models / "qwen2-tied", ["qwen2"])], tmp_path,
                            prefix=blind_to(folder.parent), env={"METAD_ADDRESS": daemon.address})
    assert_equal_to_from_pretrained(ranks, "daemon")
    streamed = printed(stdout, r"streamed (\d+) bytes from \[([^\]]*)\]")
    assert len(streamed) == 4 and all(n != "0" and "'stream:a'" in sources for n, sources in streamed), stdout


def test_torchtitan_recipe_compares_an_untied_model_at_tp_2(models):
    """Was: `--compare --tp 2` on an untied model crashed (`size of tensor a (128) must match the
    size of tensor b (256)`): the tensor-parallel lm_head gave each rank its half of the logits."""
    cmd = [str(VENV_BIN / "torchrun"), "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
           str(free_port()), str(EXAMPLES / "torchtitan_dcp.py"), "--checkpoint", str(models / "llama"), "--tp", "2",
           "--compare"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, f"exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    matched = printed(proc.stdout, r"rank (\d): logits match from_pretrained: True \(max abs diff ([0-9.e+-]+)\)")
    assert sorted(rank for rank, _ in matched) == ["0", "1"], proc.stdout
    assert all(float(diff) < 1e-5 for _, diff in matched), proc.stdout
