"""Loading honours what the doctor finds: tensors the checkpoint lacks are an error naming
them, or explicitly initialized and reported; tied aliases share one storage, read once."""
import json

import torch

from checkpoints import llama_like_tensors, save_sharded, tensor_sha256
from conftest import metactl
from ranks import run_ranks


def _cluster_with(tmp_path, daemons, tensors, skeleton_edit, name, init_missing=None):
    root = tmp_path / "storage"
    ckpt = save_sharded(tensors, root / name, shards=2)
    a = daemons("a", [root], gpus=2)
    skeleton = json.loads(metactl("skeleton", ckpt, check=0).stdout)
    skeleton_edit(skeleton)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(skeleton))
    args = ["register", name, "--checkpoint", ckpt, "--skeleton", path, "--daemon", a.address]
    if init_missing:
        args += ["--init-missing", init_missing]
    return a, ckpt, path, args


def _add_head(skeleton):
    skeleton["tensors"].append({"name": "score.weight", "shape": [3, 64], "dtype": "F32"})


def test_missing_tensor_needs_an_explicit_policy(tmp_path, daemons):
    tensors = llama_like_tensors(layers=2)
    a, ckpt, path, args = _cluster_with(tmp_path, daemons, tensors, _add_head, "headed")
    refused = metactl(*args, check=2)  # refused before anything is read: bad input
    assert "score.weight is in the skeleton but not in the checkpoint" in refused.stderr
    metactl(*args, "--init-missing", "zeros", check=0)

    # The policy given at registration is the load's default: every rank initializes it.
    zeros = run_ranks(tmp_path, "headed", [a, a])
    entries = {t["name"]: t for _, _, _, r in zeros for t in r["tensors"]}
    assert all(rc == 0 for rc, *_ in zeros), zeros
    assert entries["score.weight"]["source"] == "init:zeros"
    assert entries["score.weight"]["sha256"] == tensor_sha256(torch.zeros(3, 64))
    for name, t in tensors.items():
        assert entries[name]["sha256"] == tensor_sha256(t), name

    # The same policy again is fine; another one conflicts (exit 2 on every rank, naming both).
    same = run_ranks(tmp_path, "headed", [a, a], extra=["--init-missing", "zeros"])
    assert all(rc == 0 for rc, *_ in same), same
    conflict = run_ranks(tmp_path, "headed", [a, a], extra=["--init-missing", "error"])
    for rc, out, err, report in conflict:
        assert rc == 2, err
        assert "--init-missing error conflicts with the policy headed was registered with (zeros)" in err
        assert "--replace --init-missing error" in err


def test_normal_init_is_the_same_on_every_run(tmp_path, daemons):
    tensors = llama_like_tensors(layers=2)
    a, ckpt, path, args = _cluster_with(tmp_path, daemons, tensors, _add_head, "headed", "normal:0.02")
    metactl(*args, check=0)
    digests = []
    for _ in range(2):
        results = run_ranks(tmp_path, "headed", [a], extra=["--init-missing", "normal:0.02"])
        rc, out, err, report = results[0]
        assert rc == 0, err
        entry = next(t for t in report["tensors"] if t["name"] == "score.weight")
        assert entry["source"] == "init:normal:0.02"
        digests.append(entry["sha256"])
    assert digests[0] == digests[1]
    assert digests[0] != tensor_sha256(torch.zeros(3, 64))


def test_bad_init_policy_is_bad_input(tmp_path, daemons):
    tensors = llama_like_tensors(layers=1)
    a, ckpt, path, args = _cluster_with(tmp_path, daemons, tensors, _add_head, "headed")
    proc = metactl(*args, "--init-missing", "normal:-1", check=2)
    assert '--init-missing "normal:-1": use error, zeros or normal:STD' in proc.stderr


def test_tied_alias_shares_the_stored_tensor_and_is_read_once(tmp_path, daemons):
    tensors = llama_like_tensors(layers=2)
    del tensors["lm_head.weight"]  # a tied checkpoint stores the embedding once

    def tie(skeleton):
        skeleton["tied"] = [["model.embed_tokens.weight", "lm_head.weight"]]

    a, ckpt, path, args = _cluster_with(tmp_path, daemons, tensors, tie, "tied")
    metactl(*args, check=0)
    results = run_ranks(tmp_path, "tied", [a, a])
    holders = []
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, err
        names = {t["name"]: t for t in report["tensors"]}
        if "lm_head.weight" in names:
            holders.append(rank)
            alias = names["lm_head.weight"]
            assert alias["tied_to"] == "model.embed_tokens.weight"
            assert alias["source"] == "tied"
            assert alias["sha256"] == tensor_sha256(tensors["model.embed_tokens.weight"])
            assert "model.embed_tokens.weight" in names, "the alias lives where the stored tensor is"
    assert len(holders) == 1
    # Read once: all ranks together read exactly the checkpoint's bytes, no second embedding.
    assert sum(r["bytes_read"] for _, _, _, r in results) == \
        sum(t.numel() * t.element_size() for t in tensors.values())
