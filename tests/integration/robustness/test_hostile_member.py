"""Issue 35: a member's credential — the one every node daemon holds — changes only what is its
own, as Kubernetes' Node authorizer limits a kubelet.

Before: re-publishing an admin's model under the same name was taken as a "refresh" when the
folder, skeleton, policy and layout matched. A member stripped every digest, or swapped the
registered config.json, and got "OK"; every rank then loaded what it was told, "verified". Now a
member publishes only what is registered on its own node (the name bound to its token), from
folders under the roots it joined with, and never changes a record registered on another node.

`require_digests: true` is the hostile-cluster switch: every record needs every tensor's digest,
and every rank fails a load whose content is not proven, as with --require-proof.
Forged records come from tests/integration/record_probe.cc, with a member's token.
"""
import copy
import json

from checkpoints import llama_like_config, llama_like_tensors, save_sharded, tensor_sha256
from conftest import metactl, wait_for
from ranks import check_reports, run_ranks
from record_forgery import layout_record, publish
from role_tokens import auth, write_tokens

ROLES = ("reader", "node-b", "mallory", "admin")


def _refusal(model, node, why):
    return f'PERMISSION_DENIED PublishModel of model "{model}" registered on node "{node}": {why}'


def test_a_member_cannot_strip_swap_or_claim_an_admins_record(tmp_path, daemons):
    tokens = write_tokens(tmp_path / "tokens", ROLES)
    root = tmp_path / "storage"
    tensors = llama_like_tensors()
    ckpt = save_sharded(tensors, root / "llama-tiny", shards=2, config=llama_like_config())
    a = daemons("a", [root], extra=auth(tokens, ["node-b", "mallory"]))
    b = daemons("b", [root], coordinator=a.address, extra=auth(tokens, ["node-b"]))
    m_root = tmp_path / "mallory-storage"
    m_root.mkdir()
    mallory = daemons("m", [m_root], coordinator=a.address, extra=["auth_tokens:", f"  member: {tokens}/mallory.token"])
    admin = ["--token-file", tokens / "admin.token"]
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, *admin, check=0)
    wait_for(lambda: all(f"{n} " in metactl("status", "--daemon", a.address, *admin).stdout for n in ("b", "m")),
             what="b and m to join")
    real = layout_record(a, "tiny", tokens / "admin.token")
    assert real["registered_on"] == "a" and all("digest" in t for t in real["tensors"]), real["tensors"][0]
    assert json.loads(real["hf_config_json"])["rope_theta"] == llama_like_config()["rope_theta"]

    stripped = copy.deepcopy(real)
    for t in stripped["tensors"]:
        del t["digest"]
    swapped = copy.deepcopy(real)
    config = json.loads(swapped["hf_config_json"])
    config.update(hidden_act="relu", rope_theta=3.0)
    swapped["hf_config_json"] = json.dumps(config)

    # node b's own member token (a compromised node): the record is the coordinator's, not b's.
    for forged in (stripped, swapped):
        as_b = dict(forged, registered_on="b")
        assert publish(a, as_b, tmp_path, token_file=tokens / "node-b.token") == (
            "PERMISSION_DENIED",
            'model "tiny" is registered on node a; node b\'s member may not change it (only what is registered '
            "on its own node): an admin replaces it with `metactl register --replace`"), forged
    # Claimed as the coordinator's own record: no member has that name.
    assert " ".join(publish(a, stripped, tmp_path, token_file=tokens / "node-b.token")) == _refusal(
        "tiny", "a", "no member has that name; a member publishes only what is registered on its own node, "
        "once it joined")
    # A made-up member claiming node b's records: b is bound to b's token.
    assert " ".join(publish(a, dict(stripped, registered_on="b"), tmp_path, token_file=tokens / "mallory.token")) \
        == _refusal("tiny", "b", "that node joined as token:member:node-b.token; this caller "
                    "(token:member:mallory.token) publishes only what is registered on its own node")
    # Its own node, but a folder it does not serve (the coordinator's checkpoint).
    assert " ".join(publish(a, dict(stripped, name="copy", registered_on="m"), tmp_path,
                            token_file=tokens / "mallory.token")) == _refusal(
        "copy", "m", f'its folder "{ckpt}" is not under the node\'s roots ({m_root}); a member publishes only '
        "folders it serves")
    assert "refused: PublishModel of model" in a.logs()

    # Nothing changed: the record keeps its digests and config.json, and ranks prove every byte.
    assert layout_record(a, "tiny", tokens / "admin.token") == real
    results = run_ranks(tmp_path, "tiny", [b, b], extra=["--source", "stream", "--token-file",
                                                         str(tokens / "reader.token")])
    held = {t["name"]: t["sha256"] for rc, _, err, report in results for t in report["tensors"]}
    assert all(rc == 0 for rc, *_ in results), results
    assert {name: held[name] for name in tensors} == {name: tensor_sha256(t) for name, t in tensors.items()}
    assert all("verified (gloo)" in out and "content proven" in out for _, out, _, _ in results), results

    # What a member registered on its own node stays its own: b refreshes it; an admin may
    # replace anyone's.
    assert publish(a, dict(real, registered_on="b", name="b-model"), tmp_path,
                   token_file=tokens / "node-b.token") == ("OK", "")
    b_model = dict(real, registered_on="b", name="b-model")
    for t in b_model["tensors"]:
        t.pop("digest")
    assert publish(a, b_model, tmp_path, token_file=tokens / "node-b.token") == ("OK", "")
    assert publish(a, dict(b_model, registered_on="m"), tmp_path, token_file=tokens / "mallory.token")[0] \
        == "PERMISSION_DENIED"
    assert publish(a, stripped, tmp_path, replace=True, token_file=tokens / "admin.token") == ("OK", "")


def _add_head(skeleton):
    skeleton["tensors"].append({"name": "score.weight", "shape": [3, 64], "dtype": "F32"})


def test_require_digests_refuses_records_without_them_and_ranks_require_proof(tmp_path, daemons):
    root = tmp_path / "storage"
    tensors = llama_like_tensors(layers=2)
    ckpt = save_sharded(tensors, root / "tiny", shards=2)
    a = daemons("a", [root], gpus=2, extra=["require_digests: true"])
    refused = metactl("register", "tiny", "--checkpoint", ckpt, "--no-digest", "--daemon", a.address, check=None)
    assert refused.returncode == 1, refused.stderr
    assert f'model "tiny": {len(tensors)} of its {len(tensors)} tensors have no digest ("' in refused.stderr
    assert ('", ...), and this daemon holds only models whose every tensor has one (require_digests in its node '
            "config): register it without --no-digest") in refused.stderr, refused.stderr

    # With digests every byte is proven: verified.
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    check_reports(run_ranks(tmp_path, "tiny", [a, a]), tensors)

    # A tensor an init policy fills is not proven: every rank fails, as with --require-proof,
    # without being asked to.
    skeleton = json.loads(metactl("skeleton", ckpt, check=0).stdout)
    _add_head(skeleton)
    path = tmp_path / "headed.json"
    path.write_text(json.dumps(skeleton))
    metactl("register", "headed", "--checkpoint", ckpt, "--skeleton", path, "--init-missing", "zeros", "--daemon",
            a.address, check=0)
    for rc, out, err, _ in run_ranks(tmp_path, "headed", [a, a]):
        assert rc == 3, (out, err)
        assert "loaded, not verified (gloo)" in err and "(the coordinator requires proof: require_digests)" in err, err
