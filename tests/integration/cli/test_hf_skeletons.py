"""`metactl skeleton CONFIG.json` against transformers itself, the oracle.

For every supported architecture, transformers builds a tiny random model from a tiny config
and saves it with save_pretrained; the skeleton built from the saved config.json must equal the
saved safetensors header exactly (names, shapes, dtypes), list the persistent tensors in the
model's state_dict order, hold exactly the model's non-persistent buffers (named_buffers() not
in state_dict()), and give init rules that, evaluated as docs/skeleton-format.md says, compute
the buffers' values. Nothing is downloaded (HF_HUB_OFFLINE=1).
"""
import json
import math
import os
import re
import struct

import pytest

from conftest import metactl
from hf_cases import CASES, tiny_config

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

@pytest.fixture(scope="module")
def hf():
    """transformers and torch, imported once (the import takes seconds)."""
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers, torch


def read_header(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return {name: (v["dtype"], v["shape"]) for name, v in header.items()}


# --- init rules, evaluated as docs/skeleton-format.md defines them ---------------------------

def parse_rule(text):
    """rule = NAME "(" [arg *("," arg)] ")"; returns (name, {arg: value})."""
    pos = 0

    def name():
        nonlocal pos
        match = re.compile(r"[a-z_][a-z0-9_]*").match(text, pos)
        assert match, f"expected a name at {pos} in {text!r}"
        pos = match.end()
        return match.group()

    def expect(char):
        nonlocal pos
        assert text[pos] == char, f"expected {char!r} at {pos} in {text!r}"
        pos += 1

    def number():
        nonlocal pos
        match = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?").match(text, pos)
        assert match and match.group(), f"expected a number at {pos} in {text!r}"
        pos = match.end()
        return float(match.group())

    def value():
        nonlocal pos
        if text[pos] == "[":
            pos += 1
            items = []
            while text[pos] != "]":
                if items:
                    expect(",")
                items.append(number())
            pos += 1
            return items
        if text[pos].isalpha():
            start = pos
            word = name()
            if word in ("true", "false") and (pos >= len(text) or text[pos] != "("):
                return word == "true"
            pos = start
            return rule()
        return number()

    def rule():
        rule_name = name()
        expect("(")
        args = {}
        while text[pos] != ")":
            if args:
                expect(",")
            key = name()
            expect("=")
            args[key] = value()
        expect(")")
        return (rule_name, args)

    result = rule()
    assert pos == len(text), f"trailing text in {text!r}"
    return result


def evaluate_rule(torch, text, shape, dtype):
    kind, args = parse_rule(text)
    if kind == "constant":
        return torch.tensor(args["value"], dtype=dtype).reshape(shape)
    assert kind == "rope_inv_freq", text
    base, dim = args["base"], int(args["dim"])
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if "scaling" not in args:
        return inv_freq
    scaling, p = args["scaling"]
    if scaling == "linear":
        return inv_freq / p["factor"]
    if scaling == "dynamic":
        return inv_freq
    if scaling == "llama3":
        f, low, high, orig = (p["factor"], p["low_freq_factor"], p["high_freq_factor"],
                              p["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > orig / low, inv_freq / f, inv_freq)
        s = (orig / wavelen - low) / (high - low)
        smoothed = (1 - s) * scaled / f + s * scaled
        medium = ~(wavelen < orig / high) * ~(wavelen > orig / low)
        return torch.where(medium, smoothed, scaled)
    if scaling == "yarn":
        f, orig = p["factor"], p["original_max_position_embeddings"]

        def c(r):
            return dim * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(base))
        lo, hi = c(p["beta_fast"]), c(p["beta_slow"])
        if p["truncate"]:
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
        return inv_freq * (1 - ramp) + inv_freq / f * ramp
    if scaling == "longrope":
        return inv_freq / torch.tensor(p["short_factor"], dtype=torch.float32)
    raise AssertionError(f"unknown scaling in {text!r}")


# --- the oracle test ---------------------------------------------------------------------------

@pytest.mark.parametrize("case_id,model_type,overrides,dtype_name", CASES, ids=[c[0] for c in CASES])
def test_skeleton_equals_what_transformers_builds_and_saves(hf, tmp_path, case_id, model_type, overrides,
                                                            dtype_name):
    transformers, torch = hf
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    config = tiny_config(transformers, model_type, overrides)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model_dir = tmp_path / case_id
    model.save_pretrained(str(model_dir), safe_serialization=True)
    saved = read_header(model_dir / "model.safetensors")

    metactl("skeleton", model_dir / "config.json", "-o", tmp_path / "s.json", check=0)
    skeleton = json.loads((tmp_path / "s.json").read_text())
    persistent = [t for t in skeleton["tensors"] if t.get("persistent", True)]
    buffers = [t for t in skeleton["tensors"] if not t.get("persistent", True)]

    # Exactly the checkpoint save_pretrained wrote.
    assert {t["name"]: (t["dtype"], t["shape"]) for t in persistent} == saved
    assert skeleton["architecture"] == type(model).__name__

    # Model order: the state_dict's, where the checkpoint uses the in-memory names (transformers
    # 5 fuses Mixtral's experts in memory and converts them back on save).
    state_dict = model.state_dict()
    if set(saved) <= set(state_dict):
        assert [t["name"] for t in persistent] == [n for n in state_dict if n in saved]

    # Non-persistent buffers: the model's, with their shapes and dtypes, and values by the rule.
    expected_buffers = {n: b for n, b in model.named_buffers() if n not in state_dict}
    assert [t["name"] for t in buffers] == list(expected_buffers)
    for t in buffers:
        actual = expected_buffers[t["name"]]
        assert t["kind"] == "buffer" and t["shape"] == list(actual.shape), t["name"]
        assert t["dtype"] == {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}[actual.dtype]
        computed = evaluate_rule(torch, t["init"], list(actual.shape), actual.dtype)
        torch.testing.assert_close(computed, actual, rtol=1e-6, atol=0, msg=f"{t['name']}: {t['init']}")

    # Ties: the config's (or the class default), as one group with the stored name first.
    if config.tie_word_embeddings:
        embedding = model.get_input_embeddings().weight
        stored = next(n for n, p in model.named_parameters() if p is embedding)
        assert skeleton["tied"] == [[stored, "lm_head.weight"]]
    else:
        assert skeleton["tied"] == []

    # Decoder layers are the no-split modules, typed with transformers' class names.
    no_split = {m["path"]: m["type"] for m in skeleton["modules"] if m["no_split"]}
    layers = {n: type(m).__name__ for n, m in model.named_modules()
              if type(m).__name__ in model._no_split_modules}
    assert no_split == layers


def test_plan_accepts_a_config_json(hf, tmp_path):
    transformers, torch = hf
    config = tiny_config(transformers, "llama", dict(num_key_value_heads=2))
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(str(tmp_path / "m"))
    plan = json.loads(metactl("plan", tmp_path / "m" / "config.json", "--gpus", 2,
                              "--checkpoint", tmp_path / "m", "--format", "json", check=0).stdout)
    planned = {item["tensor"] for rank in plan["ranks"] for item in rank["items"]}
    assert set(read_header(tmp_path / "m" / "model.safetensors")) <= planned
