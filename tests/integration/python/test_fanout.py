"""Read once, fan out (issue 22): ranks that hold the same bytes read them once between them.

One torchrun launch of 4 CPU ranks on Gloo (fanout_rank.py) shards a Llama that transformers
built and saved over an HSDP mesh (2 replicas x fsdp 2: parameters placed (Replicate(),
Shard(0))) and fills it with metaload.materialize twice: with fan-out (the default) every
checkpoint byte leaves storage once — each tensor read by one replica and broadcast to the
other — and without it every replica reads its shards itself. Both are compared bit for bit
with from_pretrained. With the fan-out cut into small batches, the exchange's trace shows each
batch's broadcasts in flight while the next batch is read, and a reader killed in a later batch
leaves its replica bit-exact, read from storage.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from checkpoints import checkpoint_bytes
from conftest import BUILD_DIR, free_port

HERE = pathlib.Path(__file__).resolve().parent
VENV_BIN = pathlib.Path(sys.executable).parent
ENV = {**os.environ, "PYTHONPATH": str(BUILD_DIR / "python"), "OMP_NUM_THREADS": "1",
       "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fanout") / "llama"
    code = f"""
import torch
from transformers import AutoModelForCausalLM, LlamaConfig
torch.manual_seed(22)
config = LlamaConfig(vocab_size=1002, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                     num_key_value_heads=2, num_hidden_layers=3, max_position_embeddings=64,
                     tie_word_embeddings=False)
AutoModelForCausalLM.from_config(config).save_pretrained("{folder}")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder


def test_hsdp_replicas_read_each_byte_once_and_match_from_pretrained(llama, tmp_path):
    proc = subprocess.run([str(VENV_BIN / "torchrun"), "--nproc-per-node", "4", "--master-addr", "127.0.0.1",
                           "--master-port", str(free_port()), str(HERE / "fanout_rank.py"), str(llama),
                           str(tmp_path / "r")], capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr[-5000:]
    results = [json.loads((tmp_path / f"r{rank}.json").read_text()) for rank in range(4)]
    total = checkpoint_bytes(llama)
    for rank, r in enumerate(results):
        for mode in ("on", "off"):
            assert r[mode]["mismatched"] == [], (rank, mode, r[mode]["mismatched"])
            assert r[mode]["placements"] == ["(Replicate(), Shard(dim=0))"], r[mode]["placements"]
        on = r["on"]
        fanned = [n for n, s in on["sources"].items() if s.startswith("fanout:rank ")]
        assert fanned and len(fanned) < len(on["sources"]), on["sources"]
        # From the other replica of the same shard: global ranks r and r ^ 2 on this mesh.
        assert {on["sources"][n] for n in fanned} == {f"fanout:rank {rank ^ 2}"}, on["sources"]
        assert not any(s.startswith("fanout") for s in r["off"]["sources"].values())
        assert on["verified"] == r["off"]["verified"] > 0
        # What a rank holds arrived once: read itself, or received.
        assert on["bytes_read"] + on["received"] == r["off"]["bytes_read"], (rank, on, r["off"]["bytes_read"])
        assert on["received"] > 0 and on["sent"] > 0
    # Every byte left storage once with fan-out, once per replica without.
    assert sum(r["on"]["bytes_read"] for r in results) == total
    assert sum(r["off"]["bytes_read"] for r in results) == 2 * total
    assert sum(r["on"]["sent"] for r in results) == sum(r["on"]["received"] for r in results)
    print(f"\nstorage bytes / checkpoint: fan-out {sum(r['on']['bytes_read'] for r in results) / total:.2f}, "
          f"without {sum(r['off']['bytes_read'] for r in results) / total:.2f}")


def run_ranks(llama, tmp_path, mode, env_of_rank):
    """Four ranks from torchrun's variables (torchrun itself would stop the others when one is
    killed), rank r with env_of_rank(r) added; returns each one's process and (stdout, stderr)."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(HERE / "fanout_rank.py"), str(llama), str(tmp_path / "r"), mode],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**ENV, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "4",
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **env_of_rank(r)})
             for r in range(4)]
    try:
        outputs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            p.kill()
    return procs, outputs


def survivors(procs, outputs, tmp_path):
    assert procs[2].returncode == -9, outputs[2][1][-3000:]
    results = {}
    for rank in (0, 1, 3):
        assert procs[rank].returncode == 0, outputs[rank][1][-3000:]
        result = json.loads((tmp_path / f"r{rank}.json").read_text())
        # Every survivor's shards hold torch's bytes: what rank 2 did not send was read from storage.
        assert result["wrong"] == [], (rank, result)
        # And it was told why the job cannot verify, instead of waiting for rank 2.
        assert result["raised"].startswith("LoadError: verification's all-reduce: not every rank of the group answered "
                                           "within 5 s") or "Connection" in result["raised"], (rank, result)
        assert result["seconds"] < 60, result
        results[rank] = result
    return results


def test_a_reader_killed_after_its_first_chunk_leaves_its_replica_reading_from_storage(llama, tmp_path):
    procs, outputs = run_ranks(llama, tmp_path, "kill",
                               lambda r: {"METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS": "1"} if r == 2 else {})
    results = survivors(procs, outputs, tmp_path)
    zero = results[0]
    assert any("read from storage instead" in note for note in zero["notes"]), zero["notes"]
    # At most what was in flight when it died (4 chunks ahead, one piece each here) arrived.
    assert sum(s == "fanout:rank 2" for s in zero["sources"].values()) <= 5, zero["sources"]


def test_a_reader_killed_midway_leaves_its_replica_bit_exact_from_storage(llama, tmp_path):
    # 16 KiB chunks: each replica group's ~0.45 MB in ~30 of them; rank 2 dies after its 8th.
    procs, outputs = run_ranks(llama, tmp_path, "kill", lambda r: {
        "METALOAD_FANOUT_TEST_CHUNK_BYTES": "16384", **({"METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS": "8"} if r == 2 else {})})
    results = survivors(procs, outputs, tmp_path)
    zero = results[0]
    # Rank 0 got pieces from rank 2 before it died, and read the rest from storage.
    assert any(s == "fanout:rank 2" for s in zero["sources"].values()), zero["sources"]
    assert zero["received"] > 0
    assert any("stopped at piece" in note and "read from storage instead" in note for note in zero["notes"]), zero
    # The other replica group, untouched by the kill, fanned out everything it shares.
    one = results[1]
    assert any(s == "fanout:rank 3" for s in one["sources"].values()) and one["notes"] == [], one
