"""`metactl check` (the meta doctor) on real files written by the `safetensors` library.

Each crafted mismatch must give its exact finding and exit code: 0 when register and load would
accept the pair, 3 when something would stay on meta or (strict, the default) the checkpoint
holds tensors the skeleton has no place for, 2 on bad input; --no-strict only reports those.
Index-only folders (weights not downloaded) are checked by name, and say so.
"""
import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from checkpoints import llama_like_config, llama_like_tensors, save_sharded
from conftest import metactl

OK = "verdict: OK \u2014 nothing would stay on meta"
NOTE_INDEX_ONLY = "note: shapes and dtypes not checked: only the index is present\n"
TIE = ["model.embed_tokens.weight", "lm_head.weight"]


def save_single(tensors, folder):
    folder.mkdir(parents=True, exist_ok=True)
    save_file({n: t.contiguous() for n, t in tensors.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    return folder


def derived_skeleton(ckpt):
    return json.loads(metactl("skeleton", ckpt, check=0).stdout)


def write_json(path, value):
    path.write_text(json.dumps(value))
    return path


def last_line(text):
    return text.rstrip("\n").split("\n")[-1]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A clean llama-like checkpoint (single file) and its derived skeleton file."""
    root = tmp_path_factory.mktemp("check")
    ckpt = save_single(llama_like_tensors(layers=2), root / "clean")
    skeleton = root / "model.json"
    write_json(skeleton, derived_skeleton(ckpt))
    return {"root": root, "ckpt": ckpt, "skeleton": skeleton}


def variant(tmp_path, name, edit):
    """A checkpoint of llama_like_tensors(layers=2) after `edit(tensors)` (edits in place)."""
    tensors = llama_like_tensors(layers=2)
    edit(tensors)
    return save_single(tensors, tmp_path / name)


def test_clean_checkpoint_is_ok(base):
    proc = metactl("check", base["skeleton"], base["ckpt"], check=0)
    assert last_line(proc.stdout) == OK
    assert "would stay on meta (" not in proc.stdout


def test_checkpoint_folder_as_model_is_trivially_clean(base):
    proc = metactl("check", base["ckpt"], base["ckpt"], check=0)
    assert last_line(proc.stdout) == OK


def test_missing_head_would_stay_on_meta(tmp_path, base):
    skeleton = json.loads(base["skeleton"].read_text())
    skeleton["tensors"].append({"name": "score.weight", "shape": [2, 64], "dtype": "F32"})
    path = write_json(tmp_path / "with-head.json", skeleton)
    proc = metactl("check", path, base["ckpt"], check=3)
    assert "  score.weight is in the skeleton but not in the checkpoint\n" in proc.stdout
    assert "    fix: a head the checkpoint does not have: use the model class that matches the checkpoint, " \
           "or initialize it explicitly and train it (--init-missing normal:0.02 on `metactl register` and " \
           "`metactl load`)\n" in proc.stdout
    assert "never move a placed model afterwards" in proc.stdout
    assert last_line(proc.stdout) == "verdict: 1 tensor would stay on meta"


EXTRAS = {
    "model.layers.0.mlp.up_proj.SCB": "bitsandbytes 8-bit quantization state (.SCB, .weight_format)",
    "model.layers.0.mlp.up_proj.weight_format": "bitsandbytes 8-bit quantization state (.SCB, .weight_format)",
    "model.layers.0.mlp.down_proj.weight.absmax":
        "bitsandbytes 4-bit quantization state (.absmax, .quant_map, .quant_state)",
    "model.layers.0.mlp.down_proj.weight.quant_map":
        "bitsandbytes 4-bit quantization state (.absmax, .quant_map, .quant_state)",
    "model.layers.0.mlp.down_proj.weight.quant_state.bitsandbytes__nf4":
        "bitsandbytes 4-bit quantization state (.absmax, .quant_map, .quant_state)",
    "model.layers.1.mlp.up_proj.qweight": "GPTQ/AWQ packed weights (.qweight, .qzeros, .scales, .g_idx)",
    "model.layers.1.mlp.up_proj.qzeros": "GPTQ/AWQ packed weights (.qweight, .qzeros, .scales, .g_idx)",
    "model.layers.1.mlp.up_proj.scales": "GPTQ/AWQ packed weights (.qweight, .qzeros, .scales, .g_idx)",
    "model.layers.1.mlp.up_proj.g_idx": "GPTQ/AWQ packed weights (.qweight, .qzeros, .scales, .g_idx)",
    "model.layers.0.self_attn.rotary_emb.inv_freq": "rotary inv_freq persisted by an older version",
}


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_each_unexpected_kind_is_recognised_and_refused_unless_no_strict(tmp_path, base, extra):
    ckpt = variant(tmp_path, "extra", lambda t: t.update({extra: torch.zeros(4)}))
    lenient = metactl("check", base["skeleton"], ckpt, "--no-strict", check=0)
    assert f"  {EXTRAS[extra]}: 1 tensor: {extra}\n    why: " in lenient.stdout
    assert last_line(lenient.stdout) == OK + " (1 unexpected tensor ignored)"
    # As register and load run: refused, except what older versions persisted.
    if extra.endswith("inv_freq"):
        assert metactl("check", base["skeleton"], ckpt, check=0).stdout == lenient.stdout
    else:
        strict = metactl("check", base["skeleton"], ckpt, check=3)
        assert f"  {EXTRAS[extra]}: 1 tensor: {extra}\n    why: " in strict.stdout
        assert last_line(strict.stdout).startswith("verdict: refused \u2014 1 unexpected checkpoint tensor: the "
                                                   "checkpoint is quantized (")
        assert last_line(strict.stdout).endswith("(register and load refuse them; --no-strict loads without them)")


def test_all_unexpected_kinds_together_are_grouped(tmp_path, base):
    ckpt = variant(tmp_path, "extras", lambda t: t.update({name: torch.zeros(4) for name in EXTRAS}))
    strict = json.loads(metactl("check", base["skeleton"], ckpt, "--format", "json", check=3).stdout)
    assert (strict["verdict"]["ok"], strict["verdict"]["refused_unexpected"]) == (False, 9)
    proc = metactl("check", base["skeleton"], ckpt, "--format", "json", "--no-strict", check=0)
    report = json.loads(proc.stdout)
    kinds = {group["kind"]: sorted(group["tensors"]) for group in report["unexpected"]}
    assert kinds == {
        "bitsandbytes-8bit": sorted(n for n in EXTRAS if n.endswith(("SCB", "weight_format"))),
        "bitsandbytes-4bit": sorted(n for n in EXTRAS if ".weight." in n),
        "gptq-awq": sorted(n for n in EXTRAS if n.startswith("model.layers.1.")),
        "rotary-inv-freq": ["model.layers.0.self_attn.rotary_emb.inv_freq"]}
    assert report["verdict"] == {"ok": True, "would_stay_meta": 0, "unexpected": 10, "refused_unexpected": 0,
                                 "refused_conversions": 0, "line": OK + " (10 unexpected tensors ignored)"}


def test_wrong_shape_would_stay_on_meta_showing_both_shapes(tmp_path, base):
    ckpt = variant(tmp_path, "shape",
                   lambda t: t.update({"model.layers.1.self_attn.k_proj.weight": torch.zeros(8, 64).bfloat16()}))
    proc = metactl("check", base["skeleton"], ckpt, check=3)
    assert ("  model.layers.1.self_attn.k_proj.weight has shape [16, 64] in the skeleton but [8, 64] in the "
            "checkpoint\n    fix: use the model class and config that match the checkpoint") in proc.stdout
    assert last_line(proc.stdout) == "verdict: 1 tensor would stay on meta"


def test_wrong_dtype_is_reported_and_converted(tmp_path, base):
    ckpt = variant(tmp_path, "dtype", lambda t: t.update({"model.norm.weight": t["model.norm.weight"].half()}))
    proc = metactl("check", base["skeleton"], ckpt, check=0)
    assert "  model.norm.weight is F32 in the skeleton but F16 in the checkpoint: converted on load\n" in proc.stdout
    assert last_line(proc.stdout) == OK


def test_another_size_and_a_tying_mismatch_are_one_finding_each(tmp_path):
    # The config of a 48-layer model that does not tie its embeddings, against the checkpoint of
    # a 36-layer one saved tied (no lm_head.weight): 12 * 9 + 1 tensors, two findings in the text.
    config = write_json(tmp_path / "config.json", llama_like_config(layers=48))
    tensors = llama_like_tensors(layers=36)
    del tensors["lm_head.weight"]
    ckpt = save_single(tensors, tmp_path / "smaller")
    proc = metactl("check", config, ckpt, check=3)
    section = proc.stdout.split("\nwould stay on meta (")[1].split("\n\n")[0]
    assert section == (
        "109):\n"
        "  layers 36\u201347 of 48 are missing: the checkpoint has 36 \u2014 is it another size of this model?\n"
        "    fix: check against the skeleton of the checkpoint's own model (metactl skeleton CHECKPOINT reads its "
        "config.json), or use the checkpoint of the model with 48 layers\n"
        "  lm_head.weight is missing but the checkpoint has model.embed_tokens.weight of the same shape: a tying "
        "mismatch (the checkpoint was saved with tied embeddings; the skeleton does not tie them, as with "
        "tie_word_embeddings false)\n"
        "    fix: if the model ties them, set \"tie_word_embeddings\": true in config.json, or add "
        "[\"model.embed_tokens.weight\", \"lm_head.weight\"] to the skeleton's \"tied\"; if it does not, this "
        "checkpoint lacks the trained lm_head.weight: use the model's own checkpoint\n"
        "  whatever fills them, never move a placed model afterwards (model.to(...) after placement is what raises "
        "\"Cannot copy out of meta tensor; no data!\")")
    assert last_line(proc.stdout) == "verdict: 109 tensors would stay on meta"

    # JSON keeps every tensor, and gives the groups with the tensors each covers.
    report = json.loads(metactl("check", config, ckpt, "--format", "json", check=3).stdout)
    assert len(report["would_stay_meta"]) == 109
    layers, tying = report["missing_groups"]
    assert {k: layers[k] for k in ("problem", "container", "first_layer", "last_layer", "layers",
                                   "present_layers")} == {
        "problem": "layers", "container": "model.layers", "first_layer": 36, "last_layer": 47, "layers": 48,
        "present_layers": 36}
    assert layers["tensors"] == [t["tensor"] for t in report["would_stay_meta"][:108]]
    assert (tying["problem"], tying["partner"], tying["tensors"]) == (
        "tying_mismatch", "model.embed_tokens.weight", ["lm_head.weight"])


def test_a_hole_in_the_layers_is_not_another_size(tmp_path, base):
    # Layer 0 of 2 deleted while layer 1 is kept: a hole, not another size. The missing final
    # norm stays a finding of its own.
    def drop(t):
        for name in [n for n in t if n.startswith("model.layers.0.")] + ["model.norm.weight"]:
            del t[name]
    ckpt = variant(tmp_path, "hole", drop)
    proc = metactl("check", base["skeleton"], ckpt, check=3)
    assert ("would stay on meta (10):\n  layer 0 of 2 is missing: the checkpoint has 1 of the 2\n    fix: load the "
            "missing weights (is every shard downloaded? is this the checkpoint of this model?)\n"
            "  model.norm.weight is in the skeleton but not in the checkpoint\n") in proc.stdout


def tied_skeleton(base, tmp_path):
    skeleton = json.loads(base["skeleton"].read_text())
    skeleton["tensors"] = [t for t in skeleton["tensors"] if t["name"] != "lm_head.weight"]
    skeleton["tied"] = [TIE]
    return write_json(tmp_path / "tied.json", skeleton)


def test_tied_stored_under_the_first_name(tmp_path, base):
    ckpt = variant(tmp_path, "tied-first", lambda t: t.pop("lm_head.weight"))
    proc = metactl("check", tied_skeleton(base, tmp_path), ckpt, check=0)
    assert ("  model.embed_tokens.weight = lm_head.weight: stored under the first name, model.embed_tokens.weight; "
            "lm_head.weight shares its storage\n") in proc.stdout
    assert last_line(proc.stdout) == OK


def test_tied_stored_only_as_the_alias_is_resolved_not_missing(tmp_path, base):
    def keep_alias(t):
        t["lm_head.weight"] = t.pop("model.embed_tokens.weight")
    ckpt = variant(tmp_path, "tied-alias", keep_alias)
    proc = metactl("check", tied_skeleton(base, tmp_path), ckpt, check=0)
    assert ("  model.embed_tokens.weight = lm_head.weight: only lm_head.weight is stored; resolved from the alias: "
            "model.embed_tokens.weight is read from it and the group shares one storage\n") in proc.stdout
    assert "would stay on meta (" not in proc.stdout
    assert last_line(proc.stdout) == OK


def test_tied_both_stored_uses_the_first(tmp_path, base):
    ckpt = variant(tmp_path, "tied-both", lambda t: None)
    proc = metactl("check", tied_skeleton(base, tmp_path), ckpt, check=0)
    assert ("  model.embed_tokens.weight = lm_head.weight: both stored; the first is used (the bytes of "
            "lm_head.weight are not read)\n") in proc.stdout
    assert last_line(proc.stdout) == OK


def test_register_runs_the_same_check(tmp_path, base, daemons):
    def keep_alias(t):
        t["lm_head.weight"] = t.pop("model.embed_tokens.weight")
    ckpt = variant(tmp_path / "root", "tied-alias", keep_alias)
    daemon = daemons("a", [tmp_path / "root"])
    tied = tied_skeleton(base, tmp_path)
    metactl("check", tied, ckpt, check=0)
    metactl("register", "tied", "--checkpoint", ckpt, "--skeleton", tied, "--daemon", daemon.address, check=0)
    skeleton = json.loads(tied.read_text())
    skeleton["tensors"].append({"name": "score.weight", "shape": [2, 64], "dtype": "F32"})
    with_head = write_json(tmp_path / "tied-head.json", skeleton)
    finding = "score.weight is in the skeleton but not in the checkpoint"
    assert f"  {finding}\n" in metactl("check", with_head, ckpt, check=3).stdout
    proc = metactl("register", "tied-head", "--checkpoint", ckpt, "--skeleton", with_head,
                   "--daemon", daemon.address, check=2)
    assert f"1 tensor would stay on meta: {finding}; fix: " in proc.stderr


def test_non_persistent_buffer_is_computed(tmp_path, base):
    skeleton = json.loads(base["skeleton"].read_text())
    skeleton["tensors"].insert(1, {"name": "model.rotary_emb.inv_freq", "shape": [4], "dtype": "F32",
                                   "kind": "buffer", "persistent": False, "init": "rope_inv_freq(base=10000,dim=8)"})
    path = write_json(tmp_path / "buffers.json", skeleton)
    proc = metactl("check", path, base["ckpt"], check=0)
    assert ("non-persistent buffers (1):\n  model.rotary_emb.inv_freq [4] F32: never read from a checkpoint; "
            "computed on load by rope_inv_freq(base=10000,dim=8)\n") in proc.stdout
    assert last_line(proc.stdout) == OK


def test_different_architecture_is_diagnosed(base, fixtures):
    gpt2 = fixtures / "safetensors" / "st_gpt2-1L-16d_tiny-llm-cicd_f32"
    proc = metactl("check", base["skeleton"], gpt2, check=3)
    assert ("  the checkpoint looks like a different architecture: 16 of 16 checkpoint tensors are not in the "
            "skeleton, and 21 of 21 skeleton tensors are not in the checkpoint\n") in proc.stdout
    assert last_line(proc.stdout) == "verdict: 21 tensors would stay on meta"


def test_json_report_contract(tmp_path, base):
    skeleton = json.loads(base["skeleton"].read_text())
    skeleton["tensors"].append({"name": "score.weight", "shape": [2, 64], "dtype": "F32"})
    path = write_json(tmp_path / "with-head.json", skeleton)
    out = tmp_path / "report.json"
    proc = metactl("check", path, base["ckpt"], "--format", "json", "-o", out, check=3)
    assert proc.stdout == ""
    report = json.loads(out.read_text())
    assert list(report) == ["format", "skeleton", "checkpoint", "model", "shapes_checked", "skeleton_tensors",
                            "checkpoint_tensors", "would_stay_meta", "missing_groups", "diagnosis",
                            "refused_conversions", "dtype_mismatches", "unexpected", "tied", "non_persistent", "verdict"]
    assert report["format"] == "metaload.check/1"
    assert report["skeleton_tensors"] == 22 and report["checkpoint_tensors"] == 21
    [finding] = report["would_stay_meta"]
    assert finding["tensor"] == "score.weight" and finding["problem"] == "missing"
    assert finding["message"] == "score.weight is in the skeleton but not in the checkpoint"
    assert "--init-missing" in finding["fix"]
    assert report["verdict"]["ok"] is False and report["verdict"]["would_stay_meta"] == 1


def index_only_copy(src, dest):
    dest.mkdir(parents=True)
    shutil.copy(src / "model.safetensors.index.json", dest / "model.safetensors.index.json")
    return dest


def test_index_only_folder_is_checked_by_name(tmp_path):
    full = save_sharded(llama_like_tensors(layers=2), tmp_path / "full", shards=3)
    skeleton = write_json(tmp_path / "model.json", derived_skeleton(full))
    index_only = index_only_copy(full, tmp_path / "index-only")
    proc = metactl("check", skeleton, index_only, check=0)
    assert NOTE_INDEX_ONLY in proc.stdout
    assert last_line(proc.stdout) == OK + " (shapes and dtypes not checked)"
    # The index file itself is accepted as well as its folder.
    metactl("check", skeleton, index_only / "model.safetensors.index.json", check=0)


def test_index_only_folder_finds_missing_names_but_not_shapes(tmp_path):
    full = save_sharded(llama_like_tensors(layers=2), tmp_path / "full", shards=3)
    skeleton = derived_skeleton(full)
    skeleton["tensors"][0]["shape"] = [1, 1]  # cannot be seen without the weights
    skeleton["tensors"].append({"name": "score.weight", "shape": [2, 64], "dtype": "F32"})
    path = write_json(tmp_path / "model.json", skeleton)
    proc = metactl("check", path, index_only_copy(full, tmp_path / "index-only"), "--format", "json", check=3)
    report = json.loads(proc.stdout)
    assert report["shapes_checked"] is False
    assert report["note"] == "shapes and dtypes not checked: only the index is present"
    assert [f["tensor"] for f in report["would_stay_meta"]] == ["score.weight"]
    assert report["verdict"]["line"] == "verdict: 1 tensor would stay on meta (shapes and dtypes not checked)"


def partial_download(tmp_path, absent_shard):
    """A 3-shard checkpoint with shard `absent_shard` (1-based) deleted, and its derived skeleton."""
    full = save_sharded(llama_like_tensors(layers=2), tmp_path / "full", shards=3)
    skeleton = write_json(tmp_path / "model.json", derived_skeleton(full))
    partial = tmp_path / "partial"
    shutil.copytree(full, partial)
    shard = f"model-{absent_shard:05d}-of-00003.safetensors"
    (partial / shard).unlink()
    index = json.loads((full / "model.safetensors.index.json").read_text())["weight_map"]
    return skeleton, partial, shard, sorted(name for name, file in index.items() if file == shard)


def test_folder_with_a_shard_missing_is_not_ok(tmp_path):
    skeleton, partial, shard, held = partial_download(tmp_path, 2)
    proc = metactl("check", skeleton, partial, check=3)
    assert "verdict: OK" not in proc.stdout
    assert last_line(proc.stdout) == (f"verdict: {len(held)} tensors would stay on meta: 1 of 3 shards the index "
                                      "names is not in the folder (shapes and dtypes not checked)")
    for name in held:
        assert (f"  {name} is in shard {shard}, which is not in the checkpoint's folder (the index names it)\n"
                f"    fix: download {shard}: the download is incomplete") in proc.stdout
    assert (f"  1 of 3 shards the index names is not in the folder: {shard}, holding {len(held)} tensors. The "
            "download is incomplete") in proc.stdout
    # inspect, plan and register refuse the same folder; check says why instead of "OK".
    assert shard in metactl("inspect", partial, check=2).stderr


def test_folder_with_a_shard_missing_json_names_the_shard_and_its_tensors(tmp_path):
    skeleton, partial, shard, held = partial_download(tmp_path, 3)
    report = json.loads(metactl("check", skeleton, partial, "--format", "json", check=3).stdout)
    assert report["shapes_checked"] is False
    assert report["note"] == "shapes and dtypes not checked: 1 of 3 shards is not in the folder"
    assert sorted(f["tensor"] for f in report["would_stay_meta"]) == held
    assert {f["shard"] for f in report["would_stay_meta"]} == {shard}
    [diagnosis] = report["diagnosis"]
    assert diagnosis["problem"] == "absent_shards"
    assert diagnosis["shards"] == [shard] and diagnosis["tensors"] == held
    assert report["verdict"]["ok"] is False and report["verdict"]["would_stay_meta"] == len(held)


def test_folder_missing_a_shard_the_skeleton_does_not_need_is_still_not_ok(tmp_path):
    # The missing shard holds only tensors the skeleton does not name: nothing to report per
    # tensor, but nothing loads a checkpoint with a shard missing, so never "OK".
    full = save_sharded(llama_like_tensors(layers=2), tmp_path / "full", shards=3)
    index = json.loads((full / "model.safetensors.index.json").read_text())["weight_map"]
    skeleton = derived_skeleton(full)
    skeleton["tensors"] = [t for t in skeleton["tensors"] if index[t["name"]] != "model-00003-of-00003.safetensors"]
    path = write_json(tmp_path / "model.json", skeleton)
    (full / "model-00003-of-00003.safetensors").unlink()
    proc = metactl("check", path, full, check=3)
    assert last_line(proc.stdout) == ("verdict: the checkpoint cannot be loaded: 1 of 3 shards the index names is "
                                      "not in the folder (none of the skeleton's tensors is in them; shapes and "
                                      "dtypes not checked)")
    report = json.loads(metactl("check", path, full, "--format", "json", check=3).stdout)
    assert report["verdict"]["ok"] is False and report["verdict"]["would_stay_meta"] == 0


HF_CASES = ["falcon-180b-chat", "gemma-2b-it", "llama3.1-8b_modelstock", "mistral-7b-v0.1_fp32_bin-index",
            "mixtral-8x7b_dolphin2.5", "phi3-mini-3.8b_slerp", "qwen2.5-3b_tied_finetune"]


@pytest.mark.parametrize("case", HF_CASES)
def test_hf_config_against_its_index_only_folder(fixtures, case):
    folder = fixtures / "hf" / case
    # Every one of these architectures is supported: "not supported" here is a regression, not a skip.
    proc = metactl("check", folder / "config.json", folder)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert NOTE_INDEX_ONLY in proc.stdout
    assert last_line(proc.stdout) == OK + " (shapes and dtypes not checked)"


@pytest.mark.parametrize("args, message", [
    (["check"], "SKELETON_OR_CONFIG"),
    (["check", "{skeleton}"], "SKELETON_OR_CONFIG"),
    (["check", "{tmp}/absent.json", "{ckpt}"], "absent.json"),
    (["check", "{skeleton}", "{tmp}/absent"], "absent"),
    (["check", "{tmp}/broken.json", "{ckpt}"], "broken.json"),
    (["check", "{skeleton}", "{tmp}"], "no safetensors checkpoint found"),
    (["check", "{skeleton}", "{tmp}/bad-index"], "model.safetensors.index.json"),
    (["check", "{skeleton}", "{ckpt}", "--format", "yaml"], "--format"),
    (["check", "{skeleton}", "{ckpt}", "--bogus", "1"], "--bogus"),
])
def test_bad_input_exits_2(tmp_path, base, args, message):
    (tmp_path / "broken.json").write_text('{"format": "metaload.skeleton/1", "tensors": [')
    (tmp_path / "bad-index").mkdir()
    (tmp_path / "bad-index" / "model.safetensors.index.json").write_text('{"weight_map": 3}')
    values = {"skeleton": base["skeleton"], "ckpt": base["ckpt"], "tmp": tmp_path}
    proc = metactl(*[a.format(**values) for a in args], check=2)
    assert proc.stderr.startswith("metactl check: "), proc.stderr
    assert message in proc.stderr


def test_fp8_codes_into_a_bf16_skeleton_are_refused_even_without_strict(tmp_path, base):
    """Codes read as values change every value: no --no-strict turns that into an OK."""
    def fp8(tensors):
        name = "model.layers.0.mlp.down_proj.weight"
        tensors[name] = tensors[name].to(torch.float8_e4m3fn)
        tensors[name + "_scale_inv"] = torch.ones(1, 1)
    ckpt = variant(tmp_path, "fp8", fp8)
    for flags in ([], ["--no-strict"]):
        proc = metactl("check", base["skeleton"], ckpt, *flags, check=3)
        assert ("  model.layers.0.mlp.down_proj.weight is BF16 in the skeleton: stored quantized as F8_E4M3 FP8 "
                "codes with scales beside it (model.layers.0.mlp.down_proj.weight_scale_inv)") in proc.stdout
        assert last_line(proc.stdout).startswith("verdict: refused \u2014 1 tensor"), proc.stdout
        report = json.loads(metactl("check", base["skeleton"], ckpt, "--format", "json", *flags, check=3).stdout)
        assert (report["verdict"]["ok"], report["verdict"]["refused_conversions"]) == (False, 1)
