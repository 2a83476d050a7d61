"""The Python package reads a checkpoint from an S3 bucket (a real S3 server: moto on loopback,
tests/integration/s3_server.py): transformers save_pretrained()s a tiny Llama in sharded
safetensors, the folder is uploaded, and metaload.materialize(checkpoint="s3://...") and
metaload.from_pretrained read it through the C++ back end: every tensor equal, bit for bit, to
transformers' own from_pretrained of the folder.
"""
import subprocess
import sys
import textwrap

from s3_server import s3_server  # noqa: F401 (a fixture: a real S3 server on loopback)

SAVE = textwrap.dedent("""
    import sys, torch
    from transformers import AutoModelForCausalLM, LlamaConfig
    config = LlamaConfig(vocab_size=1002, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).to(torch.bfloat16).save_pretrained(sys.argv[1], max_shard_size="150KB")
""")

READ = textwrap.dedent("""
    import sys, torch
    from transformers import AutoModelForCausalLM
    import metaload
    folder, url = sys.argv[1], sys.argv[2]
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    expected = reference.state_dict()

    def differing(model):
        got = model.state_dict()
        assert set(got) == set(expected), set(got) ^ set(expected)
        return [k for k, v in expected.items() if not (got[k].dtype == v.dtype and torch.equal(got[k], v))]

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(reference.config, dtype=torch.bfloat16)
    report = metaload.materialize(model, checkpoint=url, device="cpu")
    assert not differing(model), differing(model)
    print("materialize from s3://:", len(expected), "tensors equal")
    model = metaload.from_pretrained(url, dtype=torch.bfloat16)
    assert not differing(model), differing(model)
    print("from_pretrained from s3://:", len(expected), "tensors equal")
""")


def test_materialize_and_from_pretrained_read_a_bucket_bit_exact(tmp_path, s3_server):
    folder = tmp_path / "tiny-llama"
    subprocess.run([sys.executable, "-c", SAVE, str(folder)], check=True, timeout=300,
                   env=s3_server.env(HF_HUB_OFFLINE="1"))
    assert sum(p.suffix == ".safetensors" for p in folder.iterdir()) > 1
    s3_server.create_bucket("models")
    url = s3_server.upload_folder(folder, "models", "tiny-llama")
    proc = subprocess.run([sys.executable, "-c", READ, str(folder), url], capture_output=True, text=True,
                          timeout=300, env=s3_server.env(HF_HUB_OFFLINE="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("materialize from s3://:") and lines[0].endswith("tensors equal"), lines
    assert lines[1].startswith("from_pretrained from s3://:") and lines[1].endswith("tensors equal"), lines
