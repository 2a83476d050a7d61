"""metactl's offline subcommands (inspect, skeleton, plan, synth) on real files, no daemon.

Oracles: the `safetensors` library and the files' own headers (parsed here, independently of
metaload: 8-byte little-endian length, then JSON), and transformers-style loading of what
`metactl synth` writes. Every bad input must exit 2 with a message naming what is wrong.
"""
import json
import pathlib
import shutil
import struct
import subprocess

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from conftest import METACTL, metactl

# Small enough to write in a blink, large enough for several shards of 1 MB.
SYNTH_DIMS = dict(layers=2, hidden=256, intermediate=512, heads=8, kv_heads=2, vocab=1000)
PLAN_KEYS = {"model", "strategy", "world_size", "ranks"}
RANK_KEYS = {"rank", "node", "gpu", "bytes", "budget", "units", "items"}
ITEM_KEYS = {"tensor", "dtype", "shape", "bytes", "file", "offsets"}
INSPECT_KEYS = {"name", "dtype", "shape", "file", "offsets"}
# synth writes a config.json, so the folder's skeleton is the config's: with the rotary buffers,
# which no file holds; the plan computes them on the rank (items with "init", no file).
ROTARY = ["model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq"]
COMPUTED_ITEM_KEYS = {"tensor", "dtype", "shape", "bytes", "init"}


def is_computed(item):
    """True for a plan item of a non-persistent buffer (checking its keys); False for a stored one."""
    if "init" not in item:
        return False
    assert set(item) == COMPUTED_ITEM_KEYS and item["tensor"] in ROTARY, item
    assert item["init"].startswith("rope_inv_freq("), item
    return True


def synth_args(out_dir, **overrides):
    dims = dict(SYNTH_DIMS, **overrides)
    args = ["synth", out_dir]
    for key, value in dims.items():
        args += [f"--{key.replace('_', '-')}", value]
    return args


def read_header(path):
    """{name: (dtype, shape, absolute begin, absolute end)} straight from the file's header."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    header.pop("__metadata__", None)
    data_begin = 8 + length
    return {name: (entry["dtype"], entry["shape"], data_begin + entry["data_offsets"][0],
                   data_begin + entry["data_offsets"][1]) for name, entry in header.items()}


def checkpoint_headers(folder):
    """Every tensor of every .safetensors file in `folder`, with its file name."""
    tensors = {}
    for path in sorted(pathlib.Path(folder).glob("*.safetensors")):
        for name, (dtype, shape, begin, end) in read_header(path).items():
            tensors[name] = (dtype, shape, path.name, begin, end)
    return tensors


def expected_llama_shapes(config):
    h, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    head_dim, inter, vocab = h // heads, config["intermediate_size"], config["vocab_size"]
    shapes = {"model.embed_tokens.weight": [vocab, h], "model.norm.weight": [h]}
    if not config["tie_word_embeddings"]:
        shapes["lm_head.weight"] = [vocab, h]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [heads * head_dim, h], p + "self_attn.k_proj.weight": [kv * head_dim, h],
            p + "self_attn.v_proj.weight": [kv * head_dim, h], p + "self_attn.o_proj.weight": [h, heads * head_dim],
            p + "mlp.gate_proj.weight": [inter, h], p + "mlp.up_proj.weight": [inter, h],
            p + "mlp.down_proj.weight": [h, inter]})
    return shapes


@pytest.fixture(scope="module")
def synth_ckpt(tmp_path_factory):
    """A sharded synthetic Llama checkpoint, written once for the whole module."""
    out = tmp_path_factory.mktemp("synth") / "tiny-llama"
    metactl(*synth_args(out, shard_size="1MB"), check=0)
    return out


def fixture_safetensors_files(fixtures):
    files = sorted((fixtures / "safetensors").rglob("*.safetensors"))
    assert files, f"no .safetensors files under {fixtures / 'safetensors'}"
    return files


# --- inspect --------------------------------------------------------------------------------

def test_inspect_json_matches_safetensors_library_on_every_fixture_file(fixtures):
    for path in fixture_safetensors_files(fixtures):
        report = json.loads(metactl("inspect", path, "--format", "json", check=0).stdout)
        assert set(report) == {"tensors"}, path
        header = read_header(path)
        with safe_open(str(path), "np") as library_view:
            assert sorted(t["name"] for t in report["tensors"]) == sorted(library_view.keys()), path
            for t in report["tensors"]:
                assert set(t) == INSPECT_KEYS, (path, t)
                library_slice = library_view.get_slice(t["name"])
                assert t["shape"] == list(library_slice.get_shape()), (path, t["name"])
                assert t["dtype"] == library_slice.get_dtype(), (path, t["name"])
                assert t["file"] == path.name, (path, t["name"])
                assert t["offsets"] == list(header[t["name"]][2:]), (path, t["name"])
        # Documented order: by offset within the file.
        begins = [t["offsets"][0] for t in report["tensors"]]
        assert begins == sorted(begins), path


def test_inspect_sharded_folder_lists_every_tensor_in_file_then_offset_order(synth_ckpt):
    report = json.loads(metactl("inspect", synth_ckpt, "--format", "json", check=0).stdout)
    expected = checkpoint_headers(synth_ckpt)
    assert len(expected) > 0 and len({v[2] for v in expected.values()}) > 1, "want several shards"
    got = {t["name"]: (t["dtype"], t["shape"], t["file"], *t["offsets"]) for t in report["tensors"]}
    assert got == expected
    order = [(t["file"], t["offsets"][0]) for t in report["tensors"]]
    assert order == sorted(order)
    index = json.loads((synth_ckpt / "model.safetensors.index.json").read_text())
    assert {t["name"]: t["file"] for t in report["tensors"]} == index["weight_map"]


def test_inspect_index_file_path_gives_the_same_report_as_its_folder(synth_ckpt):
    by_folder = metactl("inspect", synth_ckpt, "--format", "json", check=0).stdout
    by_index = metactl("inspect", synth_ckpt / "model.safetensors.index.json", "--format", "json", check=0).stdout
    assert by_folder == by_index


def test_inspect_table_has_a_row_per_tensor_and_a_total_line(synth_ckpt):
    out = metactl("inspect", synth_ckpt, check=0).stdout.splitlines()
    expected = checkpoint_headers(synth_ckpt)
    assert out[0].split() == ["name", "dtype", "shape", "bytes", "file"]
    rows = out[1:-1]
    assert len(rows) == len(expected)
    assert {row.split()[0] for row in rows} == set(expected)
    files = {v[2] for v in expected.values()}
    assert out[-1].startswith(f"{len(expected)} tensors, ") and f" in {len(files)} files " in out[-1]
    assert "model-00001-of-" in out[1] and "BF16" in out[1]


# --- synth ----------------------------------------------------------------------------------

def test_synth_output_loads_with_safetensors_torch_and_shapes_match_config(synth_ckpt):
    import torch
    config = json.loads((synth_ckpt / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["torch_dtype"] == "bfloat16"
    assert config["hidden_size"] == SYNTH_DIMS["hidden"] and config["num_hidden_layers"] == SYNTH_DIMS["layers"]
    loaded = {}
    for shard in sorted(synth_ckpt.glob("*.safetensors")):
        loaded.update(load_file(str(shard)))
    assert {name: list(t.shape) for name, t in loaded.items()} == expected_llama_shapes(config)
    for name, tensor in loaded.items():
        assert tensor.dtype == torch.bfloat16, name
        assert torch.isfinite(tensor.float()).all(), f"{name} holds NaN or Inf"
        assert tensor.float().abs().max() < 1.0 and tensor.float().abs().min() > 0, name
    embed = loaded["model.embed_tokens.weight"].float()
    assert embed.std() > 0.01, "weights should look random, not constant"


@pytest.mark.parametrize("dtype,torch_name", [("f16", "float16"), ("f32", "float32")])
def test_synth_other_dtypes_write_finite_values(tmp_path, dtype, torch_name):
    import torch
    metactl(*synth_args(tmp_path / "ckpt", layers=1, dtype=dtype), check=0)
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["torch_dtype"] == torch_name
    for name, tensor in load_file(str(tmp_path / "ckpt" / "model.safetensors")).items():
        assert tensor.dtype == getattr(torch, torch_name), name
        assert torch.isfinite(tensor).all(), name


def test_synth_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        metactl(*synth_args(tmp_path / name, seed=seed), check=0)
    read = lambda name: (tmp_path / name / "model.safetensors").read_bytes()  # noqa: E731
    assert read("a") == read("b")
    assert read("a") != read("c")


def test_synth_tie_embeddings_writes_no_lm_head(tmp_path):
    proc = metactl(*synth_args(tmp_path / "tied"), "--tie-embeddings", check=0)
    names = set(read_header(tmp_path / "tied" / "model.safetensors"))
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    assert json.loads((tmp_path / "tied" / "config.json").read_text())["tie_word_embeddings"] is True
    assert f"{len(names)} tensors" in proc.stdout


def test_synth_prints_a_summary_with_files_tensors_bytes_and_seconds(synth_ckpt, tmp_path):
    out = metactl(*synth_args(tmp_path / "s", shard_size="1MB"), check=0).stdout
    files = len(list((tmp_path / "s").glob("*.safetensors")))
    assert len(out.splitlines()) == 1
    assert f"{files} files, {len(checkpoint_headers(tmp_path / 's'))} tensors, " in out and out.rstrip().endswith(" s")


def test_synth_refuses_an_existing_checkpoint_unless_overwrite(tmp_path):
    out = tmp_path / "ckpt"
    metactl(*synth_args(out, shard_size="1MB"), check=0)
    proc = metactl(*synth_args(out), check=2)
    assert str(out) in proc.stderr and "--overwrite" in proc.stderr
    (out / "notes.txt").write_text("keep me")
    # One shard now: the old shards and index must go, or readers would see a mix.
    metactl(*synth_args(out), "--overwrite", check=0)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "notes.txt"]


# --- skeleton -------------------------------------------------------------------------------

def test_skeleton_of_a_folder_without_config_lists_every_checkpoint_tensor_and_layers_as_no_split(
        synth_ckpt, tmp_path):
    folder = tmp_path / "no-config"
    shutil.copytree(synth_ckpt, folder)
    (folder / "config.json").unlink()
    out = tmp_path / "model.json"
    proc = metactl("skeleton", folder, "-o", out, check=0)
    assert proc.stderr == ""  # nothing passed over, nothing to note
    skeleton = json.loads(out.read_text())
    expected = checkpoint_headers(folder)
    assert {t["name"]: (t["dtype"], t["shape"]) for t in skeleton["tensors"]} == \
        {name: v[:2] for name, v in expected.items()}
    assert skeleton["tensors"][0]["name"] == "model.embed_tokens.weight"
    assert skeleton["tensors"][-1]["name"] == "lm_head.weight"
    no_split = {m["path"] for m in skeleton["modules"] if m.get("no_split")}
    assert no_split == {f"model.layers.{i}" for i in range(SYNTH_DIMS["layers"])}
    # stdout, with no -o and with -o -, gives the same bytes as the file.
    assert metactl("skeleton", folder, check=0).stdout == out.read_text()
    assert metactl("skeleton", folder, "-o", "-", check=0).stdout == out.read_text()


def test_skeleton_of_a_folder_with_config_is_the_configs(synth_ckpt, tmp_path):
    out = tmp_path / "model.json"
    proc = metactl("skeleton", synth_ckpt, "-o", out, check=0)
    assert proc.stderr == ""
    assert out.read_text() == metactl("skeleton", synth_ckpt / "config.json", check=0).stdout
    assert metactl("skeleton", synth_ckpt, check=0).stdout == out.read_text()


def test_skeleton_of_config_json_matches_the_checkpoint_beside_it(synth_ckpt, tmp_path):
    # The config-built skeleton also has what a checkpoint cannot show: the rotary buffers.
    # (tests/integration/cli/test_hf_skeletons.py compares every architecture with transformers.)
    metactl("skeleton", synth_ckpt / "config.json", "-o", tmp_path / "model.json", check=0)
    skeleton = json.loads((tmp_path / "model.json").read_text())
    persistent = {t["name"]: (t["dtype"], t["shape"]) for t in skeleton["tensors"] if t.get("persistent", True)}
    assert persistent == {name: v[:2] for name, v in checkpoint_headers(synth_ckpt).items()}
    buffers = [t["name"] for t in skeleton["tensors"] if not t.get("persistent", True)]
    assert buffers == ["model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq"]
    assert skeleton["model"] == synth_ckpt.name and skeleton["architecture"] == "LlamaForCausalLM"


# --- plan -----------------------------------------------------------------------------------

def plan_json(*args):
    return json.loads(metactl("plan", *args, "--format", "json", check=0).stdout)


def test_plan_json_is_byte_identical_across_runs(synth_ckpt):
    args = ("plan", synth_ckpt, "--gpus", 4, "--nodes", 2, "--format", "json")
    assert metactl(*args, check=0).stdout == metactl(*args, check=0).stdout


def test_plan_json_has_exactly_the_contract_keys_and_covers_every_tensor_once(synth_ckpt):
    plan = plan_json(synth_ckpt, "--gpus", 4, "--nodes", 2)
    assert set(plan) == PLAN_KEYS and plan["world_size"] == 4 and plan["strategy"] == "layers"
    expected = checkpoint_headers(synth_ckpt)
    seen, computed = [], []
    for index, rank in enumerate(plan["ranks"]):
        assert set(rank) == RANK_KEYS
        assert rank["rank"] == index and (rank["node"], rank["gpu"]) == (f"node{index // 2}", index % 2)
        assert rank["bytes"] == sum(item["bytes"] for item in rank["items"]) > 0
        for item in rank["items"]:
            if is_computed(item):
                computed.append(item["tensor"])
                continue
            assert set(item) == ITEM_KEYS
            dtype, shape, file, begin, end = expected[item["tensor"]]
            assert (item["dtype"], item["shape"], item["file"], item["offsets"]) == (dtype, shape, file, [begin, end])
            assert item["bytes"] == end - begin
            seen.append(item["tensor"])
    assert sorted(seen) == sorted(expected)
    assert computed == ROTARY
    layer_ranks = {}
    for rank in plan["ranks"]:
        for item in rank["items"]:
            if item["tensor"].startswith("model.layers."):
                layer = ".".join(item["tensor"].split(".")[:3])
                layer_ranks.setdefault(layer, set()).add(rank["rank"])
    assert all(len(ranks) == 1 for ranks in layer_ranks.values()), f"a layer was split: {layer_ranks}"


def test_plan_from_skeleton_and_checkpoint_equals_plan_from_folder(synth_ckpt, tmp_path):
    skeleton = tmp_path / "model.json"
    metactl("skeleton", synth_ckpt, "-o", skeleton, check=0)
    from_folder = metactl("plan", synth_ckpt, "--gpus", 3, "--format", "json", check=0).stdout
    out = tmp_path / "plan.json"
    metactl("plan", skeleton, "--checkpoint", synth_ckpt, "--gpus", 3, "--format", "json", "-o", out, check=0)
    assert out.read_text() == from_folder


def test_plan_from_skeleton_alone_has_items_without_files(synth_ckpt, tmp_path):
    skeleton = tmp_path / "model.json"
    metactl("skeleton", synth_ckpt, "-o", skeleton, check=0)
    plan = plan_json(skeleton, "--gpus", 2)
    items = [item for rank in plan["ranks"] for item in rank["items"]]
    assert items and all("file" not in item and "offsets" not in item for item in items)
    assert "checkpoint: none" in metactl("plan", skeleton, "--gpus", 2, check=0).stdout


def test_plan_of_a_transformers_written_fixture_checkpoint(fixtures):
    folder = fixtures / "safetensors" / "st_gpt2-1L-16d_tiny-llm-cicd_f32"
    plan = plan_json(folder, "--gpus", 2)
    planned = {item["tensor"]: item["offsets"] for rank in plan["ranks"] for item in rank["items"]}
    assert planned == {name: [v[2], v[3]] for name, v in read_header(folder / "model.safetensors").items()}


def test_plan_table_has_a_header_and_a_row_per_rank(synth_ckpt):
    out = metactl("plan", synth_ckpt, "--gpus", 4, "--nodes", 2, "--gpu-memory", "24GiB", check=0).stdout
    lines = out.splitlines()
    assert lines[0].startswith("cluster: 2 nodes") and "24.00 GiB" in lines[0] and str(synth_ckpt) in lines[0]
    assert "strategy layers" in out and "4 ranks" in out
    rank_rows = [line for line in lines if line.split() and line.split()[0].isdigit()]
    assert [row.split()[0] for row in rank_rows] == ["0", "1", "2", "3"]
    assert "lm_head" in rank_rows[-1] and "model.embed_tokens" in rank_rows[0]


# --- plan: strategies, --dtype, --reserve -------------------------------------------------

GiB = 1 << 30


def held_items(plan, expected):
    """{tensor: [(rank, slice or None)]} after checking every item against the file's header:
    offsets are always the whole stored tensor's, bytes are the slice's in the held dtype."""
    held = {}
    for rank in plan["ranks"]:
        assert rank["bytes"] == sum(item["bytes"] for item in rank["items"])
        for item in rank["items"]:
            if is_computed(item):
                continue
            assert set(item) <= ITEM_KEYS | {"slice", "to_dtype"}, item
            dtype, shape, file, begin, end = expected[item["tensor"]]
            assert (item["dtype"], item["shape"], item["file"], item["offsets"]) == (dtype, shape, file, [begin, end])
            whole_bytes = (end - begin) * (2 if item.get("to_dtype") == "F32" else 1)
            cut = item.get("slice")
            assert item["bytes"] == (whole_bytes * cut["length"] // shape[cut["dim"]] if cut else whole_bytes)
            held.setdefault(item["tensor"], []).append((rank["rank"], cut))
    assert sorted(held) == sorted(expected)
    return held


def assert_tiles(shape, cuts):
    """The slices of one tensor cover one dim exactly once, in order; ranks past the end of an
    uneven split hold an empty slice at the end, as DTensor does."""
    assert len({cut["dim"] for cut in cuts}) == 1, cuts
    dim = cuts[0]["dim"]
    position = 0
    for cut in sorted(cuts, key=lambda c: (c["start"], -c["length"])):
        assert cut["start"] == position and (cut["length"] > 0 or position == shape[dim]), cuts
        position += cut["length"]
    assert position == shape[dim], cuts


def test_plan_tp_json_splits_by_rules_and_each_group_covers_each_tensor_once(synth_ckpt):
    plan = plan_json(synth_ckpt, "--gpus", 4, "--strategy", "tp", "--tp", 2)
    assert set(plan) == PLAN_KEYS | {"group_size"}
    assert (plan["strategy"], plan["group_size"], plan["world_size"]) == ("tp", 2, 4)
    expected = checkpoint_headers(synth_ckpt)
    for name, held in held_items(plan, expected).items():
        groups = {rank // 2 for rank, _ in held}
        assert len(groups) == 1 and len(held) == 2, (name, held)  # one stage, both ranks of its group
        cuts = [cut for _, cut in held]
        if all(cut is None for cut in cuts):
            assert "norm" in name, name  # replicated inside the group
        else:
            assert_tiles(expected[name][1], cuts)
    by_name = {item["tensor"]: item for rank in plan["ranks"] for item in rank["items"]}
    assert by_name["model.layers.0.self_attn.q_proj.weight"]["slice"]["dim"] == 0  # column-parallel
    assert by_name["model.layers.0.self_attn.o_proj.weight"]["slice"]["dim"] == 1  # row-parallel
    assert by_name["lm_head.weight"]["slice"]["dim"] == 0  # vocab-parallel


def test_plan_tp_default_pp_is_world_over_tp_so_no_replicas(synth_ckpt):
    # What README.md and docs/cli.md say: on 4 ranks --tp 2 is 2 pipeline stages; --pp 1 makes
    # 2 data-parallel replicas.
    stages = plan_json(synth_ckpt, "--gpus", 4, "--strategy", "tp", "--tp", 2)
    assert stages["group_size"] == 2 and "replicas" not in stages
    assert "plan for tiny-llama: strategy tp (tp 2 \u00d7 pp 2), 4 ranks, " in \
        metactl("plan", synth_ckpt, "--gpus", 4, "--strategy", "tp", "--tp", 2, check=0).stdout
    replicas = plan_json(synth_ckpt, "--gpus", 4, "--strategy", "tp", "--tp", 2, "--pp", 1)
    assert replicas["group_size"] == 2 and replicas["replicas"] == 2
    assert "plan for tiny-llama: strategy tp (tp 2 \u00d7 pp 1 \u00d7 2 replicas), 4 ranks, " in \
        metactl("plan", synth_ckpt, "--gpus", 4, "--strategy", "tp", "--tp", 2, "--pp", 1, check=0).stdout


def test_plan_tp_table_shows_the_shape_and_each_ranks_place(synth_ckpt):
    out = metactl("plan", synth_ckpt, "--gpus", 8, "--strategy", "tp", "--tp", 2, "--pp", 2, check=0).stdout
    assert "plan for tiny-llama: strategy tp (tp 2 \u00d7 pp 2 \u00d7 2 replicas), 8 ranks, " in out
    rows = [line for line in out.splitlines() if line.split() and line.split()[0].isdigit()]
    assert len(rows) == 8
    assert "replica 1/2, stage 1/2, tp 1/2: 8 sliced, 2 whole  model.embed_tokens \u2026 model.layers.0 (2 units)" \
        in rows[0]
    # The last stage also computes the two rotary buffers (model.rotary_emb: one more unit).
    assert "replica 2/2, stage 2/2, tp 2/2: 8 sliced, 5 whole  model.layers.1 \u2026 lm_head (4 units)" in rows[7]


def test_plan_fsdp_chunks_every_tensor_on_dim_0_across_all_ranks(synth_ckpt):
    plan = plan_json(synth_ckpt, "--gpus", 3, "--strategy", "fsdp")
    assert (plan["strategy"], plan["group_size"]) == ("fsdp", 3) and "replicas" not in plan
    expected = checkpoint_headers(synth_ckpt)
    for name, held in held_items(plan, expected).items():
        cuts = [cut for _, cut in held]
        assert all(cut is not None and cut["dim"] == 0 for cut in cuts), name
        assert_tiles(expected[name][1], cuts)
        rows = expected[name][1][0]
        assert cuts[0]["length"] == -(-rows // 3), name  # ceil(rows / world), like FSDP2's Shard(0)
    out = metactl("plan", synth_ckpt, "--gpus", 3, "--strategy", "fsdp", check=0).stdout
    assert "plan for tiny-llama: strategy fsdp, 3 ranks, " in out
    assert "dim-0 chunk 2/3 of 21 tensors, 2 whole  -" in out  # the rotary buffers, computed whole


def chunk_lengths(rows, chunks):
    """What DTensor's Shard(0) gives each rank: torch.chunk's pieces, padded with empty ones."""
    pieces = [len(p) for p in torch.arange(rows).chunk(chunks)]
    return pieces + [0] * (chunks - len(pieces))


def test_plan_tp_splits_dims_that_do_not_divide_like_torch_chunk(tmp_path):
    # 6 heads and 3 key/value heads divide by tp 3; the vocabulary of 1000 and the MLP of 200 do
    # not, and split as DTensor's Shard(0) does: 334, 334, 332 and 67, 67, 66.
    ckpt = tmp_path / "uneven"
    metactl(*synth_args(ckpt, hidden=96, heads=6, kv_heads=3, intermediate=200), check=0)
    plan = plan_json(ckpt, "--gpus", 3, "--strategy", "tp", "--tp", 3)
    held = held_items(plan, checkpoint_headers(ckpt))
    for name, holders in held.items():
        cuts = [cut for _, cut in holders]
        if any(cut is not None for cut in cuts):
            assert_tiles(checkpoint_headers(ckpt)[name][1], cuts)
    lengths = lambda name: [cut["length"] for _, cut in sorted(held[name])]
    assert lengths("model.embed_tokens.weight") == lengths("lm_head.weight") == chunk_lengths(1000, 3) \
        == [334, 334, 332]
    assert lengths("model.layers.1.mlp.gate_proj.weight") == chunk_lengths(200, 3) == [67, 67, 66]
    assert lengths("model.layers.1.self_attn.q_proj.weight") == [32, 32, 32]
    # The fullest rank (rank 0) is the one budgets are checked against.
    assert plan["ranks"][0]["bytes"] == max(rank["bytes"] for rank in plan["ranks"])


def test_plan_fsdp_dim_smaller_than_the_world_gives_empty_slices(tmp_path):
    # 3 vocabulary rows over 4 ranks: 1, 1, 1 and an empty slice, 0 bytes, on rank 3.
    ckpt = tmp_path / "short"
    metactl(*synth_args(ckpt, vocab=3), check=0)
    plan = plan_json(ckpt, "--gpus", 4, "--strategy", "fsdp")
    held = held_items(plan, checkpoint_headers(ckpt))
    embed = sorted(held["model.embed_tokens.weight"])
    assert [cut["length"] for _, cut in embed] == chunk_lengths(3, 4) == [1, 1, 1, 0]
    assert embed[3] == (3, {"dim": 0, "start": 3, "length": 0})
    item = next(i for i in plan["ranks"][3]["items"] if i["tensor"] == "model.embed_tokens.weight")
    assert item["bytes"] == 0
    for name, holders in held.items():
        assert len(holders) == 4, name  # every rank has its piece of every tensor
        assert_tiles(checkpoint_headers(ckpt)[name][1], [cut for _, cut in holders])


def test_plan_replicate_gives_every_rank_everything(synth_ckpt):
    plan = plan_json(synth_ckpt, "--gpus", 3, "--strategy", "replicate")
    assert (plan["strategy"], plan["replicas"]) == ("replicate", 3) and "group_size" not in plan
    expected = checkpoint_headers(synth_ckpt)
    for name, held in held_items(plan, expected).items():
        assert [rank for rank, cut in held] == [0, 1, 2] and all(cut is None for _, cut in held), name
    out = metactl("plan", synth_ckpt, "--gpus", 3, "--strategy", "replicate", check=0).stdout
    assert out.count("all 23 tensors  -") == 3  # 21 stored, 2 rotary buffers computed


def stored_bytes(plan):
    """Each rank's bytes of stored tensors (the rotary buffers are F32 already: never converted)."""
    return [sum(item["bytes"] for item in rank["items"] if not is_computed(item)) for rank in plan["ranks"]]


@pytest.mark.parametrize("strategy", [[], ["--strategy", "tp", "--tp", "2"], ["--strategy", "fsdp"]])
def test_plan_dtype_fp32_converts_every_bf16_tensor_and_counts_its_bytes(synth_ckpt, strategy):
    stored = plan_json(synth_ckpt, "--gpus", 2, *strategy)
    converted = plan_json(synth_ckpt, "--gpus", 2, *strategy, "--dtype", "fp32")
    held_items(converted, checkpoint_headers(synth_ckpt))
    items = [item for rank in converted["ranks"] for item in rank["items"] if not is_computed(item)]
    assert items and all(item["dtype"] == "BF16" and item["to_dtype"] == "F32" for item in items)
    assert stored_bytes(converted) == [2 * size for size in stored_bytes(stored)]
    table = metactl("plan", synth_ckpt, "--gpus", 2, *strategy, "--dtype", "fp32", check=0).stdout
    assert ", converted to F32 on load\n" in table
    # The stored type already: nothing to convert, the same plan byte for byte.
    args = ("plan", synth_ckpt, "--gpus", 2, *strategy, "--format", "json")
    assert metactl(*args, "--dtype", "bf16", check=0).stdout == metactl(*args, check=0).stdout


@pytest.mark.parametrize("reserve,budget", [
    (None, 80 * GiB - 8 * GiB), ("25%", 60 * GiB), ("0.5", 40 * GiB), ("8GiB", 72 * GiB), ("0", 80 * GiB),
])
@pytest.mark.parametrize("strategy", [[], ["--strategy", "fsdp"]])
def test_plan_reserve_comes_off_every_gpu_for_every_strategy(synth_ckpt, reserve, budget, strategy):
    flags = ["--reserve", reserve] if reserve else []
    plan = plan_json(synth_ckpt, "--gpus", 2, *strategy, *flags)
    assert [rank["budget"] for rank in plan["ranks"]] == [budget, budget]
    header = metactl("plan", synth_ckpt, "--gpus", 2, *strategy, *flags, check=0).stdout.splitlines()[0]
    assert f"; budget {budget // GiB}.00 GiB per GPU (--reserve " in header


@pytest.mark.parametrize("args,message", [
    (["--gpus", "2", "--reserve", "1.5"],
     '--reserve "1.5": use a fraction below 1 (0.1), a percentage below 100 (10%) or a size (8GiB)'),
    (["--gpus", "2", "--reserve", "2GiB", "--gpu-memory", "1GiB"],
     "--reserve 2.00 GiB leaves nothing of node node0's 1.00 GiB GPUs"),
    (["--gpus", "2", "--dtype", "int8"], '--dtype "int8": use bf16, fp16 or fp32'),
    (["--gpus", "2", "--tp", "2"], "--tp is for --strategy tp (the strategy is layers)"),
    (["--gpus", "2", "--strategy", "fsdp", "--pp", "2"], "--pp is for --strategy tp (the strategy is fsdp)"),
    (["--gpus", "3", "--strategy", "tp", "--tp", "3"],
     "tensor model.layers.0.self_attn.q_proj.weight [256, 256]: its 8 attention heads do not divide by --tp 3 "
     "(each rank of a tensor-parallel group holds whole heads)"),
    (["--gpus", "16", "--strategy", "tp", "--tp", "16"],
     "--tp 16: ranks 0..15 would span nodes node0 and node1 (node node0 has 8 GPUs); a tensor-parallel group "
     "stays inside one node"),
    (["--gpus", "8", "--strategy", "tp", "--tp", "2", "--pp", "3"],
     "--tp 2 x --pp 3 must divide the world size 8 (the rest are data-parallel replicas)"),
    (["--gpus", "2", "--gpu-memory", "1500KiB"],
     "the model's 6 units (3.10 MiB) do not fit in order on 2 GPUs with budgets of 1.32 MiB (--gpu-memory "
     "1.46 MiB minus --reserve 10%): 4 units from model.layers.1 on (1.55 MiB) are left over; would fit: "
     "4 GPUs (--gpus 4) or larger GPUs (--gpu-memory)"),
    (["--gpus", "2", "--gpu-memory", "1MiB"],
     "unit model.layers.0 needs 1.06 MiB but a GPU's budget is 921.60 KiB (--gpu-memory 1.00 MiB minus "
     "--reserve 10%): 167.40 KiB over, and the layers strategy never splits a unit; would fit: --strategy tp "
     "--tp 2 on 4 GPUs (--gpus 4) or larger GPUs (--gpu-memory)"),
    (["--gpus", "2", "--gpu-memory", "2MiB", "--strategy", "replicate"],
     "rank 0 (node node0, gpu 0) needs 3.10 MiB but its budget is 1.80 MiB (--gpu-memory 2.00 MiB minus "
     "--reserve 10%): 1.30 MiB over; replicate holds the whole model on every GPU; would fit: --strategy tp "
     "--tp 2 --pp 1, --strategy fsdp, or larger GPUs (--gpu-memory)"),
    (["--gpus", "2", "--gpu-memory", "1MiB", "--strategy", "fsdp", "--dtype", "fp32"],
     "rank 0 (node node0, gpu 0) needs 3.10 MiB but its budget is 921.60 KiB (--gpu-memory 1.00 MiB minus "
     "--reserve 10%): 2.20 MiB over; fsdp spreads the model over all 2 GPUs; would fit: 7 GPUs (--gpus 7) or "
     "larger GPUs (--gpu-memory)"),
])
def test_plan_strategy_refusals_exit_2_with_the_exact_message(synth_ckpt, args, message):
    proc = metactl("plan", synth_ckpt, *args, check=2)
    assert proc.stderr == f"metactl plan: {message}\n" and proc.stdout == ""


@pytest.mark.parametrize("refused,suggested", [
    (["--gpus", "2", "--gpu-memory", "1500KiB"], ["--gpus", "4", "--gpu-memory", "1500KiB"]),
    (["--gpus", "2", "--gpu-memory", "1MiB"], ["--gpus", "4", "--gpu-memory", "1MiB", "--strategy", "tp", "--tp", "2"]),
    (["--gpus", "2", "--gpu-memory", "1MiB", "--strategy", "fsdp", "--dtype", "fp32"],
     ["--gpus", "7", "--gpu-memory", "1MiB", "--strategy", "fsdp", "--dtype", "fp32"]),
])
def test_what_a_refusal_says_would_fit_does_fit(synth_ckpt, refused, suggested):
    metactl("plan", synth_ckpt, *refused, check=2)
    metactl("plan", synth_ckpt, *suggested, check=0)


def test_plan_with_a_skeleton_tensor_missing_from_the_checkpoint_exits_2_naming_it(synth_ckpt, tmp_path):
    skeleton = json.loads(metactl("skeleton", synth_ckpt, check=0).stdout)
    skeleton["tensors"].insert(3, {"name": "model.layers.0.extra_proj.weight", "shape": [4, 4], "dtype": "BF16"})
    path = tmp_path / "model.json"
    path.write_text(json.dumps(skeleton))
    proc = metactl("plan", path, "--checkpoint", synth_ckpt, "--gpus", 2, check=2)
    assert "model.layers.0.extra_proj.weight" in proc.stderr


# --- bad input: exit 2, and the message names the thing ------------------------------------

@pytest.fixture
def corrupt_file(tmp_path):
    """A .safetensors file whose header length runs past its end."""
    path = tmp_path / "broken.safetensors"
    path.write_bytes(struct.pack("<Q", 1 << 20) + b'{"a": {}}')
    return path


@pytest.mark.parametrize("args,named", [
    (["inspect", "{tmp}/absent.safetensors"], "absent.safetensors"),
    (["inspect", "{ckpt}", "--format", "xml"], "xml"),
    (["inspect", "{ckpt}", "--colour"], "--colour"),
    (["inspect"], "PATH"),
    (["inspect", "{corrupt}"], "broken.safetensors"),
    (["plan", "{corrupt}", "--gpus", "2"], "broken.safetensors"),
    (["plan", "{tmp}/absent", "--gpus", "2"], "absent"),
    (["plan", "{ckpt}"], "--gpus"),
    (["plan", "{ckpt}", "--gpus", "0"], "--gpus"),
    (["plan", "{ckpt}", "--gpus", "many"], "--gpus"),
    (["plan", "{ckpt}", "--gpus", "3", "--nodes", "2"], "--nodes"),
    (["plan", "{ckpt}", "--gpus", "2", "--gpu-memory", "lots"], "--gpu-memory"),
    (["plan", "{ckpt}", "--gpus", "2", "--format", "yaml"], "yaml"),
    (["plan", "{ckpt}", "--gpus", "2", "--strategy", "zigzag"], "zigzag"),
    (["plan", "{ckpt}", "--gpus", "2", "--tp", "2"], "--tp"),
    (["plan", "tiny", "--daemon", "127.0.0.1:1", "--format", "hf-device-map"], "not with --daemon"),
    (["plan", "{ckpt}", "--gpus", "2", "--checkpoint", "{ckpt}"], "--checkpoint"),
    (["plan", "{tmp}/not-json.json", "--gpus", "2"], "not-json.json"),
    (["plan", "{tmp}/bert/config.json", "--gpus", "2"], "architecture \"BertModel\" is not supported"),
    (["skeleton", "{tmp}/bert/config.json"], "metactl skeleton CHECKPOINT_DIR"),
    (["skeleton"], "CHECKPOINT_DIR"),
    (["skeleton", "{tmp}/absent"], "absent"),
    (["skeleton", "{corrupt}"], "broken.safetensors"),
    (["synth", "{tmp}/s", "--hidden", "100", "--heads", "16"], "--hidden"),
    (["synth", "{tmp}/s", "--heads", "16", "--kv-heads", "5"], "--kv-heads"),
    (["synth", "{tmp}/s", "--dtype", "int8"], "--dtype"),
    (["synth", "{tmp}/s", "--layers", "0"], "--layers"),
    (["synth", "{tmp}/s", "--shard-size", "0"], "--shard-size"),
    (["synth"], "OUT_DIR"),
    (["frobnicate"], "frobnicate"),
])
def test_bad_input_exits_2_naming_the_problem(synth_ckpt, corrupt_file, tmp_path, args, named):
    (tmp_path / "not-json.json").write_text("{ nope")
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text('{"architectures": ["BertModel"]}')
    subst = {"tmp": tmp_path, "ckpt": synth_ckpt, "corrupt": corrupt_file}
    proc = metactl(*[a.format(**subst) for a in args], check=2)
    assert named.format(**subst) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_too_small_gpu_memory_names_the_largest_unit_and_its_size(synth_ckpt):
    proc = metactl("plan", synth_ckpt, "--gpus", 2, "--gpu-memory", "100KB", check=2)
    # A decoder layer of these dims (about 1.1 MiB) is the largest unit; it cannot be split.
    assert "unit model.layers.0 needs 1.06 MiB but a GPU's budget is " in proc.stderr, proc.stderr


def test_metactl_without_arguments_exits_2_with_usage():
    proc = metactl(check=2)
    assert "usage: metactl" in proc.stderr


@pytest.mark.parametrize("command,flags", [
    ("inspect", ["--format"]),
    ("skeleton", ["--output", "-o", "--name"]),
    ("plan", ["--gpus", "--nodes", "--gpu-memory", "--strategy", "--tp", "--pp", "--reserve", "--dtype",
              "--checkpoint", "--format", "hf-device-map", "--output", "group_size", "replicas", "slice",
              "to_dtype"]),
    ("synth", ["--layers", "--hidden", "--intermediate", "--heads", "--kv-heads", "--vocab", "--dtype",
               "--shard-size", "--seed", "--tie-embeddings", "--overwrite"]),
])
def test_help_exits_0_and_explains_every_flag_with_an_example(command, flags):
    out = metactl(command, "--help", check=0).stdout
    assert out.startswith(f"usage: metactl {command}")
    for flag in flags:
        assert flag in out, f"{command} --help does not mention {flag}"
    assert f"metactl {command} " in out.split("examples:")[1], "an example should show the command"


def loaded_libraries(proc):
    """The shared objects the dynamic loader opened for `proc` (run with LD_DEBUG=files)."""
    return [line.split("file=", 1)[1].split()[0] for line in proc.stderr.splitlines()
            if "file=" in line and "[0];  needed by" in line]


@pytest.mark.parametrize("args", [
    ["inspect", "{ckpt}", "--format", "json"],
    ["check", "{ckpt}", "{ckpt}"],
    ["plan", "{ckpt}", "--gpus", "2", "--strategy", "fsdp", "--format", "json"],
    ["skeleton", "{ckpt}", "-o", "-"],
    ["status", "--daemon", "127.0.0.1:1"],  # no daemon there: exits 1, still without LibTorch
])
def test_commands_that_touch_no_tensor_never_load_libtorch(synth_ckpt, args):
    # LibTorch's loading and static initializers cost ~0.5 s a process (issue 22 item 5).
    proc = metactl(*[a.format(ckpt=synth_ckpt) for a in args], env={"LD_DEBUG": "files"})
    assert proc.returncode == (1 if args[0] == "status" else 0), proc.stderr[-3000:]
    libraries = loaded_libraries(proc)
    assert libraries, "LD_DEBUG=files listed no library: the check below would prove nothing"
    assert not [lib for lib in libraries if "libtorch" in lib or "libc10" in lib], libraries


def test_load_runs_the_rank_executable_beside_metactl_with_libtorch(tmp_path):
    proc = metactl("load", "--help", env={"LD_DEBUG": "files"}, check=0)
    assert proc.stdout.startswith("usage: metactl load NAME"), proc.stdout
    assert any("libtorch_cpu" in lib for lib in loaded_libraries(proc))
    # A metactl copied without it says what is missing (exit 1), instead of failing obscurely.
    alone = tmp_path / "metactl"
    shutil.copy(METACTL, alone)
    proc = subprocess.run([str(alone), "load", "llama", "--rank", "0"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1, proc
    assert proc.stderr == (f"metactl load: cannot run {tmp_path}/metactl-load (installed beside metactl): "
                           "No such file or directory\n"), proc.stderr
