"""`metactl plan --format hf-device-map` against the libraries that consume it.

Oracles: a tiny random Llama that transformers builds and writes with save_pretrained, and
accelerate's check_device_map on the same model built under init_empty_weights (no GPU needed):
every parameter and persistent buffer must fall under a key, and every key must name a module.
"""
import json
import warnings

import accelerate
import pytest
import transformers

from conftest import metactl


def tiny_llama(folder, tie_word_embeddings):
    import torch

    config = transformers.LlamaConfig(num_hidden_layers=4, hidden_size=64, intermediate_size=128,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                      tie_word_embeddings=tie_word_embeddings)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    assert (folder / "model.safetensors").exists()
    return config


def keys_covering(device_map, name):
    return [key for key in device_map if name == key or name.startswith(key + ".")]


def check_with_accelerate(config, device_map):
    from accelerate.utils import check_device_map

    with accelerate.init_empty_weights():
        model = transformers.LlamaForCausalLM(config)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a key that names no module of the model is a warning there
        check_device_map(model, device_map)
    for name in model.state_dict():
        assert len(keys_covering(device_map, name)) == 1, (name, keys_covering(device_map, name))
    assert set(device_map.values()) == {0, 1}


def test_device_map_of_a_checkpoint_folder_covers_every_parameter_once(tmp_path):
    folder = tmp_path / "tiny-llama"
    config = tiny_llama(folder, tie_word_embeddings=False)
    device_map = json.loads(metactl("plan", folder, "--gpus", 2, "--format", "hf-device-map", check=0).stdout)
    # The folder's config.json gives the skeleton, rotary buffers included, as transformers builds it.
    assert list(device_map) == ["model.embed_tokens"] + [f"model.layers.{i}" for i in range(4)] + \
        ["model.norm", "model.rotary_emb", "lm_head"]
    check_with_accelerate(config, device_map)
    # The map says what the plan says: each tensor on its rank's GPU.
    plan = json.loads(metactl("plan", folder, "--gpus", 2, "--format", "json", check=0).stdout)
    for rank in plan["ranks"]:
        for item in rank["items"]:
            (key,) = keys_covering(device_map, item["tensor"])
            assert device_map[key] == rank["gpu"], item["tensor"]


def test_tied_lm_head_from_config_goes_with_the_embedding(tmp_path):
    # A checkpoint alone does not show ties (lm_head.weight is not stored); config.json does.
    folder = tmp_path / "tiny-llama-tied"
    config = tiny_llama(folder, tie_word_embeddings=True)
    device_map = json.loads(metactl("plan", folder / "config.json", "--checkpoint", folder, "--gpus", 2,
                                    "--format", "hf-device-map", check=0).stdout)
    assert device_map["lm_head"] == device_map["model.embed_tokens"] == 0
    check_with_accelerate(config, device_map)
    # The folder alone says the same: its skeleton comes from the config.json beside the weights.
    assert json.loads(metactl("plan", folder, "--gpus", 2, "--format", "hf-device-map", check=0).stdout) == \
        device_map


def test_output_file_equals_stdout(tmp_path):
    folder = tmp_path / "tiny-llama"
    tiny_llama(folder, tie_word_embeddings=False)
    args = ("plan", folder, "--gpus", 2, "--format", "hf-device-map")
    metactl(*args, "-o", tmp_path / "device_map.json", check=0)
    assert (tmp_path / "device_map.json").read_text() == metactl(*args, check=0).stdout


@pytest.mark.parametrize("extra,message", [
    (["--strategy", "tp", "--tp", "2"],
     "--format hf-device-map needs --strategy layers: transformers' device_map puts each module whole on one "
     "device, and a tp plan splits tensors across ranks"),
    (["--strategy", "replicate"], "and a replicate plan puts every tensor on every rank"),
    (["--nodes", "2"],
     "--format hf-device-map is for one node, and the plan spans 2 (node0, node1): transformers' device_map "
     "places modules on the GPUs of one host; plan with --nodes 1"),
])
def test_refusals_exit_2_saying_why(tmp_path, extra, message):
    folder = tmp_path / "tiny-llama"
    tiny_llama(folder, tie_word_embeddings=False)
    proc = metactl("plan", folder, "--gpus", 2, "--format", "hf-device-map", *extra, check=2)
    assert message in proc.stderr and proc.stdout == ""
