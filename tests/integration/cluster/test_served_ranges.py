"""Issue 13 §2: a daemon streams only bytes inside tensors of registered models.

A coordinator "a" and a node agent "b" share one root holding a registered checkpoint and, beside
its weights, a `.env` file with a token. Raw ReadRange requests (tests/integration/
read_range_probe.cc, a hostile client) for the `.env`, a safetensors header or bytes past the
last tensor are PERMISSION_DENIED by both, with the daemon's exact message naming the path; a
rank loading through the agent with --source stream still gets every tensor bit-exact; once the
model is unregistered its files are refused too, by the agent within its short cache time.
"""
import pytest

from checkpoints import header_offsets, llama_like_tensors, save_sharded
from conftest import metactl, wait_for
from ranks import check_reports, run_ranks
from record_forgery import probe


@pytest.fixture
def shared_root(tmp_path, daemons):
    root = tmp_path / "storage"
    tensors = llama_like_tensors()
    ckpt = save_sharded(tensors, root / "llama-tiny", shards=2)
    env = ckpt / ".env"
    env.write_text("HF_TOKEN=hf_secret\n")
    a = daemons("a", [root])
    b = daemons("b", [root], coordinator=a.address)
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address).stdout, what="node b to join")
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    return {"a": a, "b": b, "ckpt": ckpt, "env": env, "shard": shard, "tensors": tensors}


def test_a_file_beside_the_weights_is_refused_by_coordinator_and_agent(shared_root):
    env = shared_root["env"]
    for daemon in (shared_root["a"], shared_root["b"]):
        assert probe(daemon, "tiny", env, 0, 6) == (
            "PERMISSION_DENIED", f'ReadRange: "{env}" is not a file of registered model "tiny"'), daemon.name


def test_header_bytes_and_bytes_past_the_last_tensor_are_refused(shared_root):
    shard = shared_root["shard"]
    offsets = header_offsets(shard)
    first = min(begin for begin, _ in offsets.values())
    last = max(end for _, end in offsets.values())
    for daemon in (shared_root["a"], shared_root["b"]):
        assert probe(daemon, "tiny", shard, 0, 8) == (
            "PERMISSION_DENIED",
            f'ReadRange: bytes [0, 8) of "{shard}" are not inside a tensor of registered model "tiny"'), daemon.name
        assert probe(daemon, "tiny", shard, first - 1, 2) == (
            "PERMISSION_DENIED", f'ReadRange: bytes [{first - 1}, {first + 1}) of "{shard}" are not inside a tensor '
            'of registered model "tiny"'), daemon.name
        assert probe(daemon, "tiny", shard, last - 4, 8) == (
            "PERMISSION_DENIED", f'ReadRange: bytes [{last - 4}, {last + 4}) of "{shard}" are not inside a tensor '
            'of registered model "tiny"'), daemon.name
        # Every tensor of the file at once (neighbours are merged), and a piece of one, are served.
        assert probe(daemon, "tiny", shard, first, last - first) == ("OK", str(last - first)), daemon.name
        assert probe(daemon, "tiny", shard, first + 3, 5) == ("OK", "5"), daemon.name
        # Another model's name does not open this one's files.
        code, message = probe(daemon, "other", shard, first, 8)
        assert code == "PERMISSION_DENIED", daemon.name
        assert message.startswith(f'ReadRange: "{shard}" is not a file of a registered model: '), message
        assert 'no model "other" is registered (registered: tiny)' in message, message


def test_a_stream_through_the_agent_still_loads_bit_exact(tmp_path, shared_root):
    b = shared_root["b"]
    results = run_ranks(tmp_path, "tiny", [b, b], extra=["--source", "stream"])
    check_reports(results, shared_root["tensors"])
    for rank, (rc, out, err, report) in enumerate(results):
        assert {t["source"] for t in report["tensors"]} <= {"stream:a", "stream:b"}, rank


def test_an_unregistered_models_files_are_refused(shared_root):
    a, b, shard = shared_root["a"], shared_root["b"], shared_root["shard"]
    begin, end = next(iter(header_offsets(shard).values()))
    for daemon in (a, b):
        assert probe(daemon, "tiny", shard, begin, end - begin) == ("OK", str(end - begin)), daemon.name
    metactl("unregister", "tiny", "--daemon", a.address, check=0)
    assert probe(a, "tiny", shard, begin, end - begin) == (
        "PERMISSION_DENIED",
        f'ReadRange: "{shard}" is not a file of a registered model: no model "tiny" is registered (registered: none)')
    # The agent asks its coordinator again once its answer is two seconds old.
    wait_for(lambda: probe(b, "tiny", shard, begin, end - begin)[0] == "PERMISSION_DENIED", timeout=5,
             what="the agent to refuse the unregistered model")
    code, message = probe(b, "tiny", shard, begin, end - begin)
    assert message.startswith(f'ReadRange: "{shard}" is not a file of a registered model: '), message
    assert message.endswith('no model "tiny" is registered (registered: none)'), message
