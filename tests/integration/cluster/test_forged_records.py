"""Issue 23: a daemon serves only what it read itself.

A record a daemon did not build — a PublishModel from any token holder, a record written straight
into etcd, a state_dir file edited before a restart — names files and byte ranges. Before a byte
is served, the daemon that holds the file opens it under its roots and checks the record against
the file's own safetensors header. Each attack here was served before (the `.env` beside the
weights came back whole: "OK 44" from the probe, its secret in the bytes); now each is
PERMISSION_DENIED naming the model and the file, never showing its bytes, and one log line
names who sent the record and what differs. The answer says no more than that the file does not
hold what the record says (issue 35: it told the header's dtype, shape and offsets, one forged
record at a time, and a range past the end told the file's size). The real model, registered on
the daemon, still streams. Raw requests come from tests/integration/read_range_probe.cc and
record_probe.cc.
"""
import copy
import json

import pytest

from checkpoints import header_offsets, llama_like_tensors, save_sharded
from conftest import free_port, metactl, wait_for
from etcd_server import etcd  # noqa: F401 (a fixture: a real etcd on loopback)
from record_forgery import encoded, layout_record, probe, publish, u8

SECRET = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG\n"


def refusal(path, model):
    return f'ReadRange: "{path}" does not hold what the record of model "{model}" says'


def logged(path, model, why):
    """The daemon's log line of a refusal: what differs, which the answer does not say."""
    return f'{refusal(path, model)}: {why}'


def forged(real, name, tensors):
    """`real` (a record as GetLayout gives it) under another name, naming `tensors`."""
    record = copy.deepcopy(real)
    record["name"] = name
    record["tensors"] = tensors
    return record


@pytest.fixture
def cluster(tmp_path, daemons):
    """Coordinator a and agent b over one root: tiny registered, a `.env` beside its weights."""
    root = tmp_path / "storage"
    ckpt = save_sharded(llama_like_tensors(), root / "llama-tiny", shards=2)
    env = ckpt / ".env"
    env.write_text(SECRET)
    a = daemons("a", [root])
    b = daemons("b", [root], coordinator=a.address)
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address).stdout, what="node b to join")
    return {"a": a, "b": b, "ckpt": ckpt, "env": env, "real": layout_record(a, "tiny"),
            "shard": sorted(ckpt.glob("*.safetensors"))[0]}


def expect_refused(daemon, model, path, offset, length, why):
    code, message = probe(daemon, model, path, offset, length)
    assert (code, message) == ("PERMISSION_DENIED", refusal(path, model)), daemon.name
    assert logged(path, model, why) in daemon.logs(), daemon.logs()[-2000:]


def test_a_published_record_naming_a_file_beside_the_weights_is_refused_by_coordinator_and_agent(tmp_path, cluster):
    a, b, env = cluster["a"], cluster["b"], cluster["env"]
    record = forged(cluster["real"], "evil", [u8("secret", ".env", 0, len(SECRET))])
    assert publish(a, record, tmp_path) == ("OK", "")  # accepted as a record; not believed
    # One that claims more than the file holds: refused alike, not told "passes the end of ...
    # (44 bytes)", the file's size.
    long = forged(cluster["real"], "evil-long", [u8("secret", ".env", 0, 4096)])
    assert publish(a, long, tmp_path) == ("OK", "")
    for daemon in (a, b):
        assert probe(daemon, "evil", env, 0, len(SECRET)) == ("PERMISSION_DENIED", refusal(env, "evil")), daemon.name
        assert logged(env, "evil", "it is not a safetensors file (") in daemon.logs(), daemon.logs()[-2000:]
        assert probe(daemon, "evil-long", env, 0, 4096) == ("PERMISSION_DENIED", refusal(env, "evil-long")), daemon.name
    # Who sent it: the coordinator names the PublishModel's peer; the agent, its coordinator.
    assert f'does not hold what the record of model "evil" says' in a.logs()
    assert 'record sent by PublishModel from "ipv4:127.0.0.1:' in a.logs(), a.logs()[-2000:]
    assert f"record sent by coordinator {a.address} (GetLayout)" in b.logs(), b.logs()[-2000:]
    assert "wJalr" not in a.logs() + b.logs()


def test_published_ranges_inside_a_real_file_that_its_header_does_not_give_are_refused(tmp_path, cluster):
    a, b, shard, real = cluster["a"], cluster["b"], cluster["shard"], cluster["real"]
    offsets = sorted(header_offsets(shard).items(), key=lambda kv: kv[1])
    (first, (begin0, end0)), (second, (begin1, end1)) = offsets[0], offsets[1]
    # The real record's entries without their digests: a digest must fit its tensor's dtype and
    # shape (checked where records come in), and these are forged to misdescribe the bytes.
    held = {t["name"]: {k: v for k, v in t.items() if k != "digest"} for t in real["tensors"]}
    wrong_dtype = dict(held[first], dtype="U8", shape=[end0 - begin0])
    wrong_shape = dict(held[first], shape=list(reversed(held[first]["shape"])) + [1])
    cases = {
        "header": ([u8("header", shard.name, 0, begin0)], 0, begin0,
                   'tensor "header" is not in its safetensors header'),
        "straddle": ([u8("straddle", shard.name, end0 - 4, begin1 + 4)], end0 - 4, 8,
                     'tensor "straddle" is not in its safetensors header'),
        "dtype": ([wrong_dtype], begin0, 4, f'tensor "{first}" has dtype U8, the file\'s header says '
                  f'{held[first]["dtype"]}'),
        "shape": ([wrong_shape], begin0, 4, f'tensor "{first}" has shape '
                  f'[{", ".join(str(d) for d in wrong_shape["shape"])}], the file\'s header says '
                  f'[{", ".join(str(d) for d in held[first]["shape"])}]'),
    }
    # What the header holds, none of which a refusal may tell.
    facts = {held[first]["dtype"], str(begin0), str(end0), str(begin1), str(end1),
             ", ".join(str(d) for d in held[first]["shape"]), "header says", "not in its safetensors header"}
    for model, (tensors, offset, length, why) in cases.items():
        assert publish(a, forged(real, f"evil-{model}", tensors), tmp_path) == ("OK", ""), model
        for daemon in (a, b):
            expect_refused(daemon, f"evil-{model}", shard, offset, length, why)
            _, message = probe(daemon, f"evil-{model}", shard, offset, length)
            assert not [fact for fact in facts if fact in message.replace(str(shard), "")], (model, message)
    # The real model, registered on a and checked by b against the same file, still streams.
    for daemon in (a, b):
        assert probe(daemon, "tiny", shard, begin0, end1 - begin0) == ("OK", str(end1 - begin0)), daemon.name
    # A record that names the file's real tensors under a name of its own is served: the bytes
    # are the file's tensors, as its header gives them.
    assert publish(a, forged(real, "copy", [held[first]]), tmp_path) == ("OK", "")
    assert probe(b, "copy", shard, begin0, end0 - begin0) == ("OK", str(end0 - begin0))


def test_a_forged_replacement_of_the_real_model_serves_none_of_the_file_beside_it(tmp_path, cluster):
    a, b, env = cluster["a"], cluster["b"], cluster["env"]
    record = forged(cluster["real"], "tiny", [u8("secret", ".env", 0, len(SECRET))])
    code, _ = publish(a, record, tmp_path, replace=True)
    for daemon in (a, b):
        code, message = probe(daemon, "tiny", env, 0, len(SECRET))
        assert code == "PERMISSION_DENIED", (daemon.name, code, message)
        assert "wJalr" not in message


def test_a_state_dir_record_edited_before_a_restart_is_refused_naming_the_file(tmp_path, daemons):
    root = tmp_path / "storage"
    ckpt = save_sharded(llama_like_tensors(), root / "llama-tiny", shards=2)
    env = ckpt / ".env"
    env.write_text(SECRET)
    state_dir = tmp_path / "state"
    c = daemons("c", [root], port=free_port(), extra=[f"state_dir: {state_dir}"])
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", c.address, check=0)
    record = forged(layout_record(c, "tiny"), "evil", [u8("secret", ".env", 0, len(SECRET))])
    c.kill9()
    forged_file = state_dir / "models" / "evil.pb"
    forged_file.write_bytes(encoded(record, tmp_path))
    c.restart()
    assert probe(c, "evil", env, 0, len(SECRET)) == ("PERMISSION_DENIED", refusal(env, "evil"))
    assert logged(env, "evil", "it is not a safetensors file (") in c.logs(), c.logs()[-2000:]
    assert f'record sent by state_dir file "{forged_file}"' in c.logs(), c.logs()[-2000:]
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    begin, end = next(iter(header_offsets(shard).values()))
    assert probe(c, "tiny", shard, begin, end - begin) == ("OK", str(end - begin))


def peer_models(daemon):
    status = json.loads(metactl("status", "--daemon", daemon.address, "--format", "json", check=0).stdout)
    return sorted(m["name"] for m in status.get("models", []))


def etcd_peers(tmp_path, etcd, daemons, extra=()):  # noqa: F811
    root = tmp_path / "storage"
    ckpt = save_sharded(llama_like_tensors(), root / "llama-tiny", shards=2)
    (ckpt / ".env").write_text(SECRET)
    config = [f"registry: etcd://{etcd.endpoint}", "member_timeout: 6s", *extra]
    p = daemons("p", [root], port=free_port(), extra=config)
    q = daemons("q", [root], port=free_port(), extra=config)
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", p.address, check=0)
    wait_for(lambda: peer_models(q) == ["tiny"], what="q to read tiny from etcd")
    return p, q, ckpt


def test_a_record_written_straight_into_etcd_is_refused_by_the_peers_naming_the_key(tmp_path, etcd, daemons):  # noqa: F811
    p, q, ckpt = etcd_peers(tmp_path, etcd, daemons)
    env = ckpt / ".env"
    record = forged(layout_record(p, "tiny"), "evil", [u8("secret", ".env", 0, len(SECRET))])
    etcd.put("/metaload/models/p/evil", encoded(record, tmp_path))
    for daemon in (p, q):
        wait_for(lambda: "evil" in peer_models(daemon), what=f"{daemon.name} to read the forged record")
        assert probe(daemon, "evil", env, 0, len(SECRET)) == ("PERMISSION_DENIED", refusal(env, "evil")), daemon.name
        assert logged(env, "evil", "it is not a safetensors file (") in daemon.logs(), daemon.logs()[-2000:]
        assert 'record sent by etcd key "/metaload/models/p/evil"' in daemon.logs(), daemon.logs()[-2000:]


def test_a_record_written_straight_into_etcd_past_max_models_is_skipped_and_logged(tmp_path, etcd, daemons):  # noqa: F811
    p, q, ckpt = etcd_peers(tmp_path, etcd, daemons, extra=["max_models: 1"])
    etcd.put("/metaload/models/p/extra", encoded(forged(layout_record(p, "tiny"), "extra",
                                                      layout_record(p, "tiny")["tensors"]), tmp_path))
    for daemon in (p, q):
        wait_for(lambda: 'registry: skipped etcd key "/metaload/models/p/extra"' in daemon.logs(),
                 what=f"{daemon.name} to skip the record past max_models")
        assert "max_models in its node config" in daemon.logs()
        assert peer_models(daemon) == ["tiny"], daemon.name
