"""Runs recipes of examples/ as their __main__ would (each one's main(*args), one after the
other in this process), then compares each model with transformers' from_pretrained of the same
folder, bit for bit: every tensor gathered whole (full_tensor for DTensors) against the
reference's. Writes OUT/rank<R>.json: {recipe: {"diffs", "meta", "tensors"}}.

    torchrun --nproc-per-node 4 recipe_rank.py RECIPES.json OUT
    RECIPES.json: [{"example": "examples/fsdp2.py", "reference": FOLDER, "args": [...]}, ...]
"""
import json
import os
import pathlib
import runpy
import sys

import torch
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/integration: gloo_exit
from gloo_exit import leave  # noqa: E402


def compare(model, reference_folder):
    reference = AutoModelForCausalLM.from_pretrained(reference_folder).state_dict()
    ours = model.state_dict()
    diffs = sorted(set(reference) ^ set(ours))
    meta = []
    for name, want in reference.items():
        got = ours.get(name)
        if got is None:
            continue
        whole = got.full_tensor() if isinstance(got, DTensor) else got
        if whole.is_meta:
            meta.append(name)
        elif whole.dtype != want.dtype or not torch.equal(whole.cpu(), want):
            diffs.append(name)
    return {"diffs": diffs, "meta": meta, "tensors": len(reference)}


def main():
    recipes, out = json.loads(open(sys.argv[1]).read()), sys.argv[2]
    results = {}
    for recipe in recipes:
        model = runpy.run_path(recipe["example"], run_name="recipe")["main"](*map(str, recipe["args"]))
        if recipe.get("perturb"):  # the control: a comparison that cannot fail proves nothing
            with torch.no_grad():
                p = model.get_parameter("model.norm.weight")
                (p.to_local() if isinstance(p, DTensor) else p).view(-1)[0] += 1
        results[recipe["id"]] = compare(model, recipe["reference"])
        print(f"recipe {recipe['id']} done", flush=True)
    with open(os.path.join(out, f"rank{os.environ.get('RANK', 0)}.json"), "w") as f:
        json.dump(results, f)
    leave()


if __name__ == "__main__":
    main()
