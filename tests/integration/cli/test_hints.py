"""Hints that pointed the wrong way (issue 37), each asserted word for word as it now reads: a
folder with only a config.json points to it.
"""
import json

from checkpoints import llama_like_config
from conftest import metactl


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
