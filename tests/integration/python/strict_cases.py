"""The single-process cases of test_strict.py, run in one fresh Python process (one transformers
import for all of them): `python strict_cases.py ROOT OUT.json`, ROOT holding the checkpoints
test_strict.py saved. Each case's outcome goes to OUT.json by case name; the tests assert on it.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config, LlamaConfig

import metaload
from tied_net import TiedNet, loaded_by_safetensors, save_tied

ROOT, OUT = sys.argv[1], sys.argv[2]
RESULTS = {}


def on_meta(folder, model_class=AutoModelForCausalLM, **override):
    config = AutoConfig.from_pretrained(folder)
    for key, value in override.items():
        setattr(config, key, value)
    with torch.device("meta"):
        return model_class.from_config(config)


def differs_from_pretrained(model, folder, **kwargs):
    """Names whose tensors differ from transformers' own load of the same checkpoint."""
    want = AutoModelForCausalLM.from_pretrained(folder, **kwargs).state_dict()
    mine = model.state_dict()
    return sorted([n for n, t in mine.items() if n not in want or not torch.equal(t, want[n])] +
                  [n for n in want if n not in mine])


def case(name):
    def run(fn):
        try:
            RESULTS[name] = {"ok": True, **(fn() or {})}
        except Exception as e:  # noqa: BLE001 - every outcome is data for the tests
            RESULTS[name] = {"error": type(e).__name__, "message": str(e),
                             "findings": [list(f) for f in getattr(e, "findings", [])]}
        return fn
    return run


def still_meta(model):
    return all(t.is_meta for t in list(model.parameters()) + list(model.buffers()))


def verify_outcome(model):
    try:
        return {"verify": metaload.verify(model)}
    except metaload.MetaTensorError as e:
        return {"verify": "raised", "verify_message": str(e)}


llama2, llama4, qwen2 = f"{ROOT}/llama2", f"{ROOT}/llama4", f"{ROOT}/qwen2"
for folder in ("complex", "shared-buffer"):
    os.makedirs(f"{ROOT}/{folder}", exist_ok=True)


@case("smaller-module")
def _():
    model = on_meta(llama4, num_hidden_layers=2)
    try:
        metaload.materialize(model, "m", checkpoint=llama4)
    finally:
        RESULTS["smaller-module-meta"] = still_meta(model)  # noqa: B012


@case("smaller-module-lenient")
def _():
    model = on_meta(llama4, num_hidden_layers=2)
    report = metaload.materialize(model, "m", checkpoint=llama4, strict=False)
    return {"unexpected": report.unexpected, "verified": report.verified_tensors, "report": str(report),
            "differs": differs_from_pretrained(model, llama4, num_hidden_layers=2)}


@case("llama-from-qwen2")
def _():
    qwen = AutoConfig.from_pretrained(qwen2)
    config = LlamaConfig(vocab_size=qwen.vocab_size, hidden_size=qwen.hidden_size,
                         intermediate_size=qwen.intermediate_size, num_hidden_layers=qwen.num_hidden_layers,
                         num_attention_heads=qwen.num_attention_heads, num_key_value_heads=qwen.num_key_value_heads,
                         tie_word_embeddings=False)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    metaload.materialize(model, "m", checkpoint=qwen2)


@case("gpt2-from-llama-zeros")
def _():
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(GPT2Config(vocab_size=1002, n_embd=64, n_layer=2, n_head=4))
    metaload.materialize(model, "m", checkpoint=llama2, init_missing="zeros")


@case("a-layer-of-zeros")
def _():
    metaload.materialize(on_meta(llama2, num_hidden_layers=3), "m", checkpoint=llama2, init_missing="zeros")


@case("a-layer-of-zeros-by-pattern")
def _():
    report = metaload.materialize(on_meta(llama2, num_hidden_layers=3), "m", checkpoint=llama2,
                                  init_missing={"model.layers.2.*": "zeros"})
    return {"counts": report.counts}


def with_head(folder):
    model = on_meta(folder)
    with torch.device("meta"):
        model.value_head = torch.nn.Linear(model.config.hidden_size, 1)
    return model


@case("init-by-pattern")
def _():
    model = with_head(llama2)
    report = metaload.materialize(model, "m", checkpoint=llama2, init_missing={"value_head.*": "zeros"})
    head = bool(model.value_head.weight.eq(0).all() and model.value_head.bias.eq(0).all())
    del model.value_head
    return {"head_zero": head, "source": report.sources["value_head.weight"], "counts": report.counts,
            "differs": differs_from_pretrained(model, llama2)}


@case("init-pattern-names-other-tensors")
def _():
    metaload.materialize(with_head(llama2), "m", checkpoint=llama2, init_missing={"score.*": "zeros"})


@case("complex-module-tensor")
def _():
    save_file({"w": torch.ones(3), "v": torch.ones(2)}, f"{ROOT}/complex/model.safetensors")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.empty(3))
            self.v = torch.nn.Parameter(torch.empty(2, dtype=torch.complex64))

    with torch.device("meta"):
        model = Net()
    try:
        metaload.materialize(model, "m", checkpoint=f"{ROOT}/complex")
    finally:
        RESULTS["complex-module-tensor-after"] = {"meta": still_meta(model), **verify_outcome(model)}


@case("fill-fails-midway")
def _():
    from metaload._core import fill

    real = fill._How.materialize

    def failing(self, view, requests, *, check_only, fan_out=None):
        if check_only:
            return real(self, view, requests, check_only=check_only)
        raise metaload.LoadError("the daemon went away (simulated)")

    model = on_meta(llama2)
    fill._How.materialize = failing
    try:
        metaload.materialize(model, "m", checkpoint=llama2)
    finally:
        fill._How.materialize = real
        RESULTS["fill-fails-midway-after"] = verify_outcome(model)


def not_on_meta():
    torch.manual_seed(1)
    return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(llama2))


@case("not-on-meta")
def _():
    metaload.materialize(not_on_meta(), "m", checkpoint=llama2)


@case("to-empty")
def _():
    # torch's hint for model.to() on meta ("Cannot copy out of meta tensor ... use to_empty()").
    metaload.materialize(on_meta(llama2).to_empty(device="cpu"), "m", checkpoint=llama2)


@case("to-empty-overwrite")
def _():
    model = on_meta(llama2).to_empty(device="cpu")
    report = metaload.materialize(model, "m", checkpoint=llama2, overwrite=True)
    return {"verified": report.verified_tensors, "differs": differs_from_pretrained(model, llama2)}


@case("not-on-meta-kept")
def _():
    model = not_on_meta()
    before = model.model.norm.weight.detach().clone()
    report = metaload.materialize(model, "m", checkpoint=llama2, strict=False)
    return {"sources": sorted(set(report.sources.values())), "verified": report.verified_tensors,
            "unproven": report.unproven_tensors, "report": str(report), "bytes": report.bytes_read,
            "unchanged": bool(torch.equal(model.model.norm.weight, before)), **verify_outcome(model)}


@case("not-on-meta-overwrite")
def _():
    model = not_on_meta()
    report = metaload.materialize(model, "m", checkpoint=llama2, overwrite=True)
    return {"verified": report.verified_tensors, "differs": differs_from_pretrained(model, llama2),
            **verify_outcome(model)}


@case("one-buffer-two-modules")
def _():
    class Part(torch.nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.register_buffer("scale", scale)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            scale = torch.empty(4)
            self.a, self.b = Part(scale), Part(scale)

    torch.manual_seed(0)
    real = Net()
    with torch.no_grad():
        real.a.scale.copy_(torch.arange(4.0))
    state = {k: v.detach().clone() for k, v in real.state_dict().items() if k != "b.scale"}
    save_file(state, f"{ROOT}/shared-buffer/model.safetensors")
    with torch.device("meta"):
        model = Net()
    report = metaload.materialize(model, "m", checkpoint=f"{ROOT}/shared-buffer")
    reference = Net()
    reference.load_state_dict(real.state_dict())
    return {"one_object": model.a.scale is model.b.scale, "sources": report.sources,
            "same": all(torch.equal(t, reference.state_dict()[n]) for n, t in model.state_dict().items())}


@case("counts")
def _():
    model = on_meta(qwen2)
    report = metaload.materialize(model, checkpoint=qwen2)  # the name defaults to the folder's
    return {"counts": report.counts, "report": str(report), "verified": report.verified_tensors,
            "model": report.model, "differs": differs_from_pretrained(model, qwen2)}


@case("tied-config-stored-head")
def _():
    folder = f"{ROOT}/qwen2-own-head"
    model = on_meta(folder)
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    report = metaload.materialize(model, "m", checkpoint=folder)
    ref = AutoModelForCausalLM.from_pretrained(folder)
    batch = torch.arange(24).reshape(2, 12)
    with torch.no_grad():
        equal = torch.equal(model.eval()(batch).logits, ref.eval()(batch).logits)
    return {"tied_in_module_before": tied, "one_object": model.lm_head.weight is model.model.embed_tokens.weight,
            "differs": differs_from_pretrained(model, folder), "logits_equal": equal,
            "untied": [list(p) for p in getattr(report, "untied", [])]}


@case("saved-tie-intact")
def _():
    folder = f"{ROOT}/saved-tie"
    save_tied(folder)
    with torch.device("meta"):
        model = TiedNet()
    report = metaload.materialize(model, checkpoint=folder)
    want = loaded_by_safetensors(folder).state_dict()
    return {"one_object": model.head.weight is model.embed.weight, "counts": report.counts, "ties": report.ties,
            "same": sorted(want) == sorted(model.state_dict()) and
            all(torch.equal(t, want[n]) for n, t in model.state_dict().items())}


@case("saved-tie-sharded")
def _():
    # huggingface_hub's sharded writer records the dropped duplicate in the index's metadata.
    from huggingface_hub import load_torch_model, save_torch_state_dict

    folder = f"{ROOT}/saved-tie-sharded"
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    save_torch_state_dict(TiedNet().state_dict(), folder, max_shard_size=300)
    with torch.device("meta"):
        model = TiedNet()
    report = metaload.materialize(model, checkpoint=folder)
    want = TiedNet()
    load_torch_model(want, folder, strict=False)  # it reports head.weight missing, and ties it
    return {"files": len([f for f in os.listdir(folder) if f.endswith(".safetensors")]), "ties": report.ties,
            "same": all(torch.equal(t, want.state_dict()[n]) for n, t in model.state_dict().items()),
            "one_object": model.head.weight is model.embed.weight}


def another_head(name, **head):
    # The checkpoint says head.weight was embed.weight; this module's head is another tensor of
    # another dtype or shape: the metadata must not make it read embed.weight's bytes.
    save_tied(f"{ROOT}/saved-tie")
    with torch.device("meta"):
        model = TiedNet(tied=False, **head)
    try:
        metaload.materialize(model, checkpoint=f"{ROOT}/saved-tie")
    finally:
        RESULTS[f"{name}-meta"] = still_meta(model)  # noqa: B012


case("saved-tie-another-dtype")(lambda: another_head("saved-tie-another-dtype", head_dtype=torch.float16))
case("saved-tie-another-shape")(lambda: another_head("saved-tie-another-shape", head_vocab=17))


@case("saved-tie-hostile-metadata")
def _():
    # Metadata naming tensors that are not stored, a chain, a cycle, and a stored tensor
    # "dropped" as another one of another shape: none of it is a tie.
    folder = f"{ROOT}/hostile-tie"
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    net = TiedNet(tied=False)
    state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    save_file({k: v for k, v in state.items() if k != "head.weight"}, f"{folder}/model.safetensors",
              metadata={"head.weight": "ghost.weight", "ghost.weight": "embed.weight", "body.weight": "embed.weight",
                        "c": "d", "d": "c"})
    with torch.device("meta"):
        model = TiedNet(tied=False)
    try:
        metaload.materialize(model, checkpoint=folder)
    finally:
        RESULTS["saved-tie-hostile-metadata-meta"] = still_meta(model)  # noqa: B012


@case("neither-daemon-nor-checkpoint")
def _():
    metaload.materialize(on_meta(llama2), "llama")


@case("no-name-no-checkpoint")
def _():
    metaload.materialize(on_meta(llama2))


with open(OUT, "w") as f:
    json.dump(RESULTS, f, indent=1)
