"""Hints that pointed the wrong way (issue 37), each asserted word for word as it now reads: a
load that does not fit names the node configs' gpu_memory (it has no --gpu-memory), a folder
with only a config.json points to it, a refused register exits 2 (3 is a failed verification),
a skeleton of another size says so in one line before its findings.
"""
import json

from checkpoints import llama_like_config, llama_like_tensors, save_sharded
from conftest import metactl
from pyproc import ok
from ranks import run_ranks


def test_a_load_that_does_not_fit_names_what_a_load_can_change(tmp_path, daemons):
    """Was: "... (--gpu-memory 400.00 KiB minus --reserve 10%) ...; would fit: 2 GPUs (--gpus 2) or
    larger GPUs (--gpu-memory)": flags `metactl load` rejects; its budget is the node configs'."""
    ckpt = save_sharded(llama_like_tensors(), tmp_path / "m" / "llama", shards=2)
    a = daemons("a", [tmp_path / "m"], gpus=4, gpu_memory="400KiB")
    metactl("register", "llama", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    (rc, out, err, _), = run_ranks(tmp_path, "llama", [a], world=1)
    assert rc == 2, (out, err)
    assert err == (
        f"metactl load: GetPlan from {a.address}: the model's 7 units (426.25 KiB) do not fit in order on 1 GPU "
        "with a budget of 360.00 KiB (gpu_memory 400.00 KiB (node configs) minus --reserve 10%): 3 units from "
        "model.layers.3 on (126.75 KiB) are left over; would fit: 2 GPUs (world size 2) or larger GPUs "
        "(gpu_memory: in the node configs; CPU loads are held to it too)\n")
    # `metactl plan` keeps its own flags' words.
    offline = metactl("plan", ckpt, "--gpus", 1, "--gpu-memory", "400KiB", check=2)
    assert offline.stderr.endswith("would fit: 2 GPUs (--gpus 2) or larger GPUs (--gpu-memory)\n"), offline.stderr


def test_a_folder_with_only_a_config_points_to_it(tmp_path):
    """Was: "DIR: no safetensors checkpoint found (looked for ...)" and nothing more."""
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(llama_like_config()))
    looked = (f"{folder}: no safetensors checkpoint found (looked for model.safetensors and "
              f"model.safetensors.index.json); the folder has a config.json: ")
    config = folder / "config.json"
    plan = metactl("plan", folder, "--gpus", 2, check=2)
    assert plan.stderr == f"metactl plan: {looked}`metactl plan {config} --gpus N` plans from it alone\n"
    skeleton = metactl("skeleton", folder, check=2)
    assert skeleton.stderr == f"metactl skeleton: {looked}`metactl skeleton {config}` builds the skeleton from it\n"
    check = metactl("check", folder, folder, check=2)
    assert check.stderr == (f"metactl check: {looked}`metactl check {config} CHECKPOINT` checks it against a "
                            "checkpoint\n")
    # What it points to works.
    metactl("plan", config, "--gpus", 2, check=0)
    metactl("skeleton", config, check=0)


SHAPES = ("39 tensors differ in shape: 128 in the skeleton is 256 in the checkpoint (in 39): another variant of "
          "this model, hidden_size 128 vs the checkpoint's 256?")


def another_hidden_size(tmp_path):
    """A checkpoint of hidden size 256 under tmp_path/m/wide, and the config of the 128 variant."""
    wide = save_sharded(llama_like_tensors(hidden=256), tmp_path / "m" / "wide", shards=2,
                        config=llama_like_config(hidden=256, heads=8, kv_heads=1))
    narrow = tmp_path / "narrow.json"
    narrow.write_text(json.dumps(llama_like_config(hidden=128, heads=8, kv_heads=1)))
    return wide, narrow


def test_another_hidden_size_is_one_line_first_and_a_refused_register_exits_2(tmp_path, daemons):
    """Was: 39 findings with nothing saying what they share, and the register refused with exit 3,
    the code of a failed verification."""
    wide, narrow = another_hidden_size(tmp_path)
    check = metactl("check", narrow, wide, check=3)  # the doctor's verdict: its verification failed
    lines = check.stdout.split("\n")
    at = lines.index("would stay on meta (39):")
    assert lines[at + 1] == f"  summary: {SHAPES}"
    assert lines[at + 2] == ("  model.embed_tokens.weight has shape [320, 128] in the skeleton but [320, 256] in the "
                             "checkpoint")
    assert lines[at + 12] == "  and 34 more (--format json lists all)"
    assert len(lines) < 25, check.stdout
    a = daemons("a", [tmp_path / "m"])
    refused = metactl("register", "wide", "--checkpoint", wide, "--skeleton", narrow, "--daemon", a.address,
                      "--no-digest", check=2)
    assert refused.stderr.startswith(f"metactl register: daemon {a.address}: model wide: 39 tensors would stay on "
                                     f"meta: {SHAPES}; model.embed_tokens.weight has shape [320, 128] in the "
                                     "skeleton but [320, 256] in the checkpoint; "), refused.stderr
    assert "; and 34 more; fix: use the model class that matches the checkpoint" in refused.stderr
    assert len(refused.stderr) < 1500, refused.stderr


def test_materialize_of_another_hidden_size_says_it_in_one_line_first(tmp_path):
    """Was: 39 lines, one per tensor, and nothing saying what they share."""
    wide, narrow = another_hidden_size(tmp_path)
    out = ok(f"""
        import json, torch, metaload
        from transformers import AutoModelForCausalLM, LlamaConfig
        config = LlamaConfig(**{{k: v for k, v in json.load(open("{narrow}")).items() if k != "architectures"}})
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        try:
            metaload.materialize(model, checkpoint="{wide}")
        except metaload.MetaTensorError as e:
            print(e)
    """)
    lines = out.rstrip("\n").split("\n")
    assert lines[:3] == [
        "materialize refused, before anything was allocated or read: 39 tensors without a source or a place on "
        "rank 0 (1 ranks):",
        f"  rank 0: {SHAPES}",
        "  rank 0: model.embed_tokens.weight: the module's shape [320, 128] differs from the checkpoint's [320, 256] "
        "(another size of this model?)"]
    assert lines[7:] == ["  rank 0: and 34 more of another shape"], out
