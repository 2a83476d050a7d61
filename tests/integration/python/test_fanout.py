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


def run_ranks(llama, tmp_path, mode):
    """Four ranks from torchrun's variables (torchrun itself would stop the others when one is
    killed); returns each one's process and (stdout, stderr)."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(HERE / "fanout_rank.py"), str(llama), str(tmp_path / "r"), mode],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**ENV, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "4",
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}) for r in range(4)]
    try:
        outputs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            p.kill()
    return procs, outputs


def test_a_reader_killed_before_it_shares_leaves_its_replica_reading_from_storage(llama, tmp_path):
    procs, outputs = run_ranks(llama, tmp_path, "kill")
    assert procs[2].returncode == -9
    for rank in (0, 1, 3):
        assert procs[rank].returncode == 0, outputs[rank][1][-3000:]
        result = json.loads((tmp_path / f"r{rank}.json").read_text())
        # Every survivor's shards hold torch's bytes: rank 0 read itself what rank 2 was to send.
        assert result["wrong"] == [], (rank, result)
        # And it was told why the job cannot verify, instead of waiting for rank 2.
        assert result["raised"].startswith("LoadError: verification's all-reduce: not every rank of the group answered "
                                           "within 5 s") or "Connection" in result["raised"], (rank, result)
        assert result["seconds"] < 60, result



def test_batch_k_plus_1_is_read_while_batch_k_is_in_flight(llama, tmp_path):
    procs, outputs = run_ranks(llama, tmp_path, "pipeline")
    for rank, p in enumerate(procs):
        assert p.returncode == 0, outputs[rank][1][-3000:]
    results = [json.loads((tmp_path / f"r{rank}.json").read_text())["on"] for rank in range(4)]
    for rank, on in enumerate(results):
        assert on["mismatched"] == [], (rank, on["mismatched"])
        trace = [tuple(t) for t in on["trace"]]
        numbers = sorted({k for _, k in trace})
        assert len(numbers) >= 3, trace  # the ~0.45 MB of each replica group in batches of 64 KiB
        assert numbers == list(range(len(numbers))), trace
        assert all(event != "broken" for event, _ in trace), trace
        for k in numbers[:-1]:
            # Batch k's broadcasts were in flight before this rank began reading batch k+1, and
            # it waited for them only after.
            assert trace.index(("issued", k)) < trace.index(("read", k + 1)) < trace.index(("wait", k)), trace
            assert ("arrived", k) in trace, trace
        received = [s for s in on["sources"].values() if s.startswith("fanout:rank ")]
        assert received, on["sources"]
    total = checkpoint_bytes(llama)
    assert sum(on["bytes_read"] for on in results) == total
    assert sum(on["sent"] for on in results) == sum(on["received"] for on in results) > 0


def test_a_reader_killed_in_a_later_batch_leaves_its_replica_bit_exact_from_storage(llama, tmp_path):
    procs, outputs = run_ranks(llama, tmp_path, "kill-later")
    assert procs[2].returncode == -9, outputs[2][1][-3000:]
    for rank in (0, 1, 3):
        assert procs[rank].returncode == 0, outputs[rank][1][-3000:]
        result = json.loads((tmp_path / f"r{rank}.json").read_text())
        assert result["wrong"] == [], (rank, result)
        assert result["seconds"] < 60, result
        assert result["raised"], result  # verification cannot reach rank 2
    zero = json.loads((tmp_path / "r0.json").read_text())
    # Rank 0 got earlier batches from rank 2 before it died, and read the rest from storage.
    assert zero["arrived_from"] == [2], zero
    assert zero["read_after"] > 0, zero
    # The other replica group, untouched by the kill, fanned out everything.
    one = json.loads((tmp_path / "r1.json").read_text())
    assert one["arrived_from"] == [3] and one["read_after"] == 0, one
