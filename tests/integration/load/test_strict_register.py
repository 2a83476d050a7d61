"""Strict accounting through the CLI pipeline: `metactl register` is the gate every `metactl
load` passes, and `metactl check` says what it will do. A checkpoint holding tensors the
skeleton has no place for (a larger model, quantization state) is refused naming the likely
cause, unless --no-strict, which loads the rest and says what it left out; an init policy
never stands in for most of the model, nor one policy for whatever is missing for more than a
tenth."""
import json

import torch
from safetensors.torch import save_file

from checkpoints import llama_like_config, llama_like_tensors, save_sharded, tensor_sha256
from conftest import metactl
from ranks import run_ranks

LAYERS_CAUSE = "the checkpoint has 4 of model.layers, the skeleton 2: another size of this model?"


def _two_layer_config(tmp_path):
    path = tmp_path / "config-2-layers" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(llama_like_config(layers=2)))
    return path


def test_a_larger_checkpoint_is_refused_then_loaded_with_no_strict(tmp_path, daemons):
    tensors = llama_like_tensors(layers=4)
    ckpt = save_sharded(tensors, tmp_path / "storage" / "four", shards=2, config=llama_like_config(layers=4))
    config = _two_layer_config(tmp_path)
    extras = sorted(n for n in tensors if n.startswith(("model.layers.2.", "model.layers.3.")))

    check = metactl("check", config, ckpt, check=3)
    assert check.stdout.rstrip("\n").split("\n")[-1] == (
        f"verdict: refused \u2014 {len(extras)} unexpected checkpoint tensors: {LAYERS_CAUSE} "
        "(register and load refuse them; --no-strict loads without them)")
    lenient = metactl("check", config, ckpt, "--no-strict", "--format", "json", check=0)
    verdict = json.loads(lenient.stdout)["verdict"]
    assert (verdict["ok"], verdict["unexpected"], verdict["refused_unexpected"]) == (True, len(extras), 0)

    a = daemons("a", [tmp_path / "storage"], gpus=2)
    args = ["register", "small", "--checkpoint", ckpt, "--skeleton", config, "--daemon", a.address]
    refused = metactl(*args, check=2)
    assert f"model small: {len(extras)} checkpoint tensors the skeleton has no place for (" in refused.stderr
    assert f"and {len(extras) - 4} more): {LAYERS_CAUSE}; fix: " in refused.stderr
    assert "--no-strict to load without them" in refused.stderr
    assert metactl("status", "--daemon", a.address, check=0).stdout.count("small") == 0

    registered = metactl(*args, "--no-strict", check=0)
    head = f"{len(extras)} checkpoint tensors not loaded (--no-strict; `metactl check` explains): "
    line = registered.stdout.split("\n")[1]
    assert line.startswith(head) and line.endswith(f" and {len(extras) - 8} more"), registered.stdout
    named = line[len(head):-len(f" and {len(extras) - 8} more")].split(" ")
    assert len(named) == 8 and set(named) <= set(extras), named
    # --refresh keeps the strictness it was registered with (else it would now be refused).
    metactl("register", "small", "--refresh", "--daemon", a.address, check=0)

    results = run_ranks(tmp_path, "small", [a, a])
    assert all(rc == 0 for rc, *_ in results), results
    loaded = {t["name"]: t for _, _, _, report in results for t in report["tensors"]}
    assert not set(loaded) & set(extras)
    for name, t in tensors.items():
        if name not in extras:
            assert loaded[name]["sha256"] == tensor_sha256(t), name


def test_quantization_state_is_refused_and_old_buffers_are_not(tmp_path, daemons):
    tensors = llama_like_tensors(layers=2)
    root = tmp_path / "storage"
    skeleton = tmp_path / "model.json"
    plain = save_sharded(tensors, root / "plain", shards=1)
    skeleton.write_text(metactl("skeleton", plain, check=0).stdout)
    a = daemons("a", [root], gpus=1)

    def register(name, extra):
        folder = root / name
        folder.mkdir()
        save_file({**{n: t.contiguous() for n, t in tensors.items()}, extra: torch.zeros(4)},
                  str(folder / "model.safetensors"), metadata={"format": "pt"})
        return metactl("register", name, "--checkpoint", folder, "--skeleton", skeleton, "--daemon", a.address)

    quantized = register("int8", "model.layers.0.mlp.up_proj.SCB")
    assert quantized.returncode == 2, quantized.stderr
    assert ("1 checkpoint tensor the skeleton has no place for (model.layers.0.mlp.up_proj.SCB): the checkpoint "
            "is quantized (bitsandbytes-8bit state)") in quantized.stderr
    old = register("old", "model.layers.0.self_attn.rotary_emb.inv_freq")
    assert old.returncode == 0, old.stderr
    assert "not loaded" not in old.stdout


def test_init_missing_never_stands_in_for_most_of_the_model(tmp_path, daemons):
    # A skeleton saved from a wrapper ("lm." before every name): zeros would fill all of it.
    tensors = llama_like_tensors(layers=2)
    root = tmp_path / "storage"
    ckpt = save_sharded(tensors, root / "ckpt", shards=1)
    skeleton = json.loads(metactl("skeleton", ckpt, check=0).stdout)
    for t in skeleton["tensors"]:
        t["name"] = "lm." + t["name"]
    path = tmp_path / "wrapped.json"
    path.write_text(json.dumps(skeleton))
    a = daemons("a", [root], gpus=1)
    proc = metactl("register", "wrapped", "--checkpoint", ckpt, "--skeleton", path, "--init-missing", "zeros",
                   "--daemon", a.address, check=2)
    total = len(skeleton["tensors"])
    assert (f"model wrapped: --init-missing zeros would initialize {total} of the skeleton's {total} tensors, "
            "most of the model: refused; what the checkpoint lacks is the real problem: lm.model.embed_tokens"
            ".weight, ") in proc.stderr
    assert "(a prefix differs: `metactl check` shows it)" in proc.stderr


def test_one_init_policy_fills_at_most_a_tenth_of_the_skeleton(tmp_path, daemons):
    # 21 stored tensors; a skeleton with 2 more (2 of 23: within a tenth) is registered with
    # --init-missing zeros, one with 3 more (3 of 24) is refused, exit 3, as `check` refuses it.
    tensors = llama_like_tensors(layers=2)
    root = tmp_path / "storage"
    ckpt = save_sharded(tensors, root / "ckpt", shards=1)
    skeleton = json.loads(metactl("skeleton", ckpt, check=0).stdout)
    a = daemons("a", [root], gpus=1)

    def with_heads(count):
        edited = json.loads(json.dumps(skeleton))
        edited["tensors"] += [{"name": f"head{i}.weight", "shape": [3, 64], "dtype": "F32"} for i in range(count)]
        path = tmp_path / f"heads-{count}.json"
        path.write_text(json.dumps(edited))
        return path, len(edited["tensors"])

    two, _ = with_heads(2)
    metactl("register", "two", "--checkpoint", ckpt, "--skeleton", two, "--init-missing", "zeros",
            "--daemon", a.address, check=0)
    three, total = with_heads(3)
    check = metactl("check", three, ckpt, check=3)
    assert check.stdout.rstrip("\n").split("\n")[-1] == "verdict: 3 tensors would stay on meta"
    proc = metactl("register", "three", "--checkpoint", ckpt, "--skeleton", three, "--init-missing", "zeros",
                   "--daemon", a.address, check=2)
    assert (f"model three: --init-missing zeros applies to a few missing tensors only (at most a tenth of the "
            f"skeleton's: a new head, say), here 3 of the skeleton's {total}: refused; ") in proc.stderr
    assert 'init_missing={"head0.weight": "zeros"}' in proc.stderr
    assert ("what the checkpoint lacks: head0.weight, head1.weight, head2.weight; `metactl check` explains each"
            in proc.stderr)
    assert metactl("status", "--daemon", a.address, check=0).stdout.count("three") == 0
