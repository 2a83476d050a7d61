"""A checkpoint folder with a config.json: `skeleton`, `plan`, `check`, `register` and `load`
all build the model from the config, as transformers does, not from the safetensors headers.

The oracle is a tiny random Qwen2 with tied embeddings, built and written by transformers:
its checkpoint does not store lm_head.weight at all (the tie) and never stores the rotary
inv_freq buffers (non-persistent), so a skeleton derived from the headers loses both. Folders
whose config.json cannot be used say so (an unsupported architecture: derived, with a note) or
fail naming the file (a malformed config).
"""
import json
import os
import shutil
import warnings

import pytest
import torch
import transformers
from safetensors.torch import save_file

from checkpoints import tensor_sha256
from conftest import metactl
from ranks import run_ranks

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROTARY = ["model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq"]
TIE = ["model.embed_tokens.weight", "lm_head.weight"]


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    """A tied Qwen2 written by save_pretrained into root/qwen-tied; the model is the oracle."""
    transformers.logging.set_verbosity_error()
    config = transformers.AutoConfig.for_model(
        "qwen2", vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config)
    root = tmp_path_factory.mktemp("root")
    folder = root / "qwen-tied"
    model.save_pretrained(str(folder))
    stored = set(json.loads((folder / "model.safetensors").read_bytes()[8:8 + int.from_bytes(
        (folder / "model.safetensors").read_bytes()[:8], "little")]))
    assert "lm_head.weight" not in stored and not stored & set(ROTARY), "the premise: neither is stored"
    return {"root": root, "folder": folder, "model": model, "config": config}


def test_skeleton_of_the_folder_is_the_skeleton_of_its_config(qwen):
    folder = qwen["folder"]
    skeleton = json.loads(metactl("skeleton", folder, check=0).stdout)
    from_config = json.loads(metactl("skeleton", folder / "config.json", check=0).stdout)
    assert skeleton == from_config
    assert skeleton["architecture"] == "Qwen2ForCausalLM" and skeleton["model"] == "qwen-tied"
    assert skeleton["tied"] == [TIE]
    assert [t["name"] for t in skeleton["tensors"] if t.get("persistent", True) is False] == ROTARY
    assert metactl("skeleton", folder, "--name", "q", check=0).stdout == \
        metactl("skeleton", folder / "config.json", "--name", "q", check=0).stdout


def test_hf_device_map_of_the_folder_has_lm_head_and_rotary_and_accelerate_accepts_it(qwen):
    from accelerate import init_empty_weights
    from accelerate.utils import check_device_map

    device_map = json.loads(metactl("plan", qwen["folder"], "--gpus", 2, "--format", "hf-device-map",
                                    check=0).stdout)
    assert device_map["lm_head"] == device_map["model.embed_tokens"], device_map
    assert "model.rotary_emb" in device_map
    with init_empty_weights():
        model = transformers.Qwen2ForCausalLM(qwen["config"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a key that names no module is a warning there
        check_device_map(model, device_map)
    # from_pretrained with the map's keys (on the CPU: no GPU needed): every module placed,
    # nothing left on meta.
    on_cpu = {key: "cpu" for key in device_map}
    loaded = transformers.Qwen2ForCausalLM.from_pretrained(str(qwen["folder"]), device_map=on_cpu)
    assert not [n for n, p in loaded.named_parameters() if p.is_meta]
    assert not [n for n, b in loaded.named_buffers() if b.is_meta]


def test_check_folder_against_itself_sees_the_tie_and_the_buffers(qwen):
    report = json.loads(metactl("check", qwen["folder"], qwen["folder"], "--format", "json", check=0).stdout)
    assert report["model"] == "qwen-tied"
    assert [group["names"] for group in report["tied"]] == [TIE]
    assert [b["tensor"] for b in report["non_persistent"]] == ROTARY
    assert report["verdict"]["ok"] is True


@pytest.mark.parametrize("skeleton_flag", ["none", "config"])
def test_register_and_load_give_the_tied_head_and_rotary_buffers_on_every_rank(qwen, tmp_path, daemons,
                                                                               skeleton_flag):
    a = daemons("a", [qwen["root"]], gpus=2)
    name = f"qwen-{skeleton_flag}"
    extra = ["--skeleton", qwen["folder"] / "config.json"] if skeleton_flag == "config" else []
    metactl("register", name, "--checkpoint", qwen["folder"], *extra, "--daemon", a.address, check=0)

    model = qwen["model"]
    state_dict = model.state_dict()
    buffers = {n: b for n, b in model.named_buffers() if n not in state_dict}
    assert sorted(buffers) == ROTARY
    # replicate: every rank holds the whole model, so every rank must have both.
    results = run_ranks(tmp_path, name, [a, a], extra=["--strategy", "replicate"])
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank}: {err}"
        loaded = {t["name"]: t for t in report["tensors"]}
        assert loaded["lm_head.weight"]["tied_to"] == "model.embed_tokens.weight", rank
        assert loaded["lm_head.weight"]["source"] == "tied"
        for buffer_name, buffer in buffers.items():
            assert loaded[buffer_name]["source"].startswith("buffer:"), (rank, buffer_name)
            assert loaded[buffer_name]["sha256"] == tensor_sha256(buffer), (rank, buffer_name)
        for tensor_name, tensor in state_dict.items():
            assert loaded[tensor_name]["sha256"] == tensor_sha256(tensor), (rank, tensor_name)


def copy_with_config(qwen, tmp_path, config_text):
    folder = tmp_path / "copy"
    shutil.copytree(qwen["folder"], folder)
    (folder / "config.json").write_text(config_text)
    return folder


@pytest.mark.parametrize("command", [
    ["skeleton", "{folder}"],
    ["plan", "{folder}", "--gpus", "2"],
    ["check", "{folder}", "{folder}"],
])
def test_malformed_config_beside_the_checkpoint_is_bad_input_naming_it(qwen, tmp_path, command):
    folder = copy_with_config(qwen, tmp_path, '{"architectures": ["Qwen2ForCausalLM"], "hidden_size": "x"')
    proc = metactl(*[a.format(folder=folder) for a in command], check=2)
    assert f"{folder / 'config.json'}" in proc.stderr and proc.stdout == ""


def test_register_with_a_malformed_config_beside_the_checkpoint_is_refused_naming_it(qwen, tmp_path, daemons):
    config = json.loads((qwen["folder"] / "config.json").read_text())
    config["hidden_size"] = "x"
    folder = copy_with_config(qwen, tmp_path, json.dumps(config))
    a = daemons("a", [tmp_path], gpus=1)
    proc = metactl("register", "broken", "--checkpoint", folder, "--daemon", a.address, check=2)
    assert f"{folder / 'config.json'}" in proc.stderr and "hidden_size" in proc.stderr


def test_unsupported_architecture_is_derived_from_the_headers_with_a_note(tmp_path):
    folder = tmp_path / "bert-like"
    folder.mkdir()
    save_file({"embeddings.word_embeddings.weight": torch.zeros(8, 4), "encoder.layer.0.dense.weight":
               torch.zeros(4, 4)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text('{"architectures": ["BertModel"], "model_type": "bert"}')
    proc = metactl("skeleton", folder, check=0)
    skeleton = json.loads(proc.stdout)
    assert [t["name"] for t in skeleton["tensors"]] == ["embeddings.word_embeddings.weight",
                                                         "encoder.layer.0.dense.weight"]
    assert proc.stderr == (f"metactl skeleton: note: {folder / 'config.json'}: architecture \"BertModel\" is not "
                           "supported, so the skeleton is derived from the safetensors headers, which show only the "
                           "ties safetensors' save_model recorded and no non-persistent buffers (add them to a "
                           "skeleton file if the model has any)\n")
    assert "note: " in metactl("plan", folder, "--gpus", 1, check=0).stderr
    assert "note: " in metactl("check", folder, folder, check=0).stderr


def test_one_shard_of_a_folder_with_config_is_derived_from_its_own_headers(tmp_path):
    folder = tmp_path / "sharded"
    metactl("synth", folder, "--layers", 2, "--hidden", 64, "--intermediate", 128, "--heads", 4, "--kv-heads", 2,
            "--vocab", 128, "--shard-size", "40KB", check=0)
    shards = sorted(folder.glob("*.safetensors"))
    assert len(shards) > 1
    proc = metactl("skeleton", shards[0], check=0)
    assert "describes the whole model, and the checkpoint is only " + shards[0].name in proc.stderr
    derived = json.loads(proc.stdout)
    assert derived["architecture"] == "" and all(t.get("persistent", True) for t in derived["tensors"])
    # The whole folder, or its index, is the model the config describes.
    from_config = metactl("skeleton", folder / "config.json", check=0).stdout
    assert metactl("skeleton", folder, check=0).stdout == from_config
    assert metactl("skeleton", folder / "model.safetensors.index.json", check=0).stdout == from_config
