"""The Python package reads a checkpoint through a second storage back end: transformers
save_pretrained()s a tiny Llama (sharded safetensors), its files are put into the in-memory back
end ("mem://", registered in the process by the tests-only _native._test_memory_put), and
metaload.materialize, metaload.StorageReader (under dcp.load) and metaload.from_pretrained read
it from there: every tensor equal, bit for bit, to transformers' own from_pretrained of the
folder, and from_pretrained's config and generation config equal to transformers' too. Nothing
of the package opens a checkpoint file itself: headers, index, config.json and
generation_config.json go through the C++ seam.
"""
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import pathlib, sys
    import torch
    import torch.distributed.checkpoint as dcp
    from transformers import AutoModelForCausalLM, LlamaConfig
    import metaload
    from metaload import _native

    folder = pathlib.Path(sys.argv[1])
    config = LlamaConfig(vocab_size=1002, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).to(torch.bfloat16).save_pretrained(folder, max_shard_size="150KB")
    files = sorted(p.name for p in folder.iterdir())
    assert sum(f.endswith(".safetensors") for f in files) > 1, files
    for f in files:
        _native._test_memory_put(f"mem://bucket/tiny-llama/{f}", (folder / f).read_bytes())
    transformers_model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    reference = transformers_model.state_dict()

    def meta_model():
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)

    def differing(model):
        got = model.state_dict()
        assert set(got) == set(reference), set(got) ^ set(reference)
        return [k for k, v in reference.items() if not (got[k].dtype == v.dtype and torch.equal(got[k], v))]

    model = meta_model()
    report = metaload.materialize(model, checkpoint="mem://bucket/tiny-llama", device="cpu")
    assert not differing(model), differing(model)
    print("materialize from mem://:", report.bytes_read, "bytes,", len(reference), "tensors equal")

    assert metaload.StorageReader.validate_checkpoint_id("mem://bucket/tiny-llama")
    model = meta_model().to_empty(device="cpu")
    state = model.state_dict()
    dcp.load(state, storage_reader=metaload.StorageReader("mem://bucket/tiny-llama"),
             planner=metaload.LoadPlanner())
    model.load_state_dict(state)
    assert not differing(model), differing(model)
    print("dcp.load from mem://:", len(reference), "tensors equal")

    model = metaload.from_pretrained("mem://bucket/tiny-llama", dtype=torch.bfloat16)
    assert not differing(model), differing(model)
    # config.json and generation_config.json came through the seam, made by transformers' own rules.
    mine, theirs = model.config.to_dict(), transformers_model.config.to_dict()
    assert mine.pop("_name_or_path") == "mem://bucket/tiny-llama", mine
    theirs.pop("_name_or_path")
    assert mine == theirs, {k: (mine.get(k), theirs.get(k)) for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k)}
    assert model.generation_config.to_dict() == transformers_model.generation_config.to_dict()
    print("from_pretrained from mem://:", len(reference), "tensors equal, config and generation config equal")

    try:
        metaload.materialize(meta_model(), checkpoint="gs://bucket/tiny-llama", device="cpu")
        raise AssertionError("a scheme without a back end was read")
    except metaload.BadInputError as e:
        print("refused:", e)
""")


def test_materialize_storage_reader_and_from_pretrained_read_a_checkpoint_from_memory_bit_exact(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "tiny-llama")], capture_output=True,
                          text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
                                                       "PYTHONPATH": __import__("os").environ.get("PYTHONPATH", "")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("materialize from mem://:") and lines[0].endswith("tensors equal"), lines
    assert lines[1].startswith("dcp.load from mem://:"), lines
    assert lines[2].startswith("from_pretrained from mem://:"), lines
    assert lines[3] == ("refused: gs://bucket/tiny-llama: no storage back end for gs:// locations in this build "
                        "(POSIX paths, mem://, s3://)"), lines
