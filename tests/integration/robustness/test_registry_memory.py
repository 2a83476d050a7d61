"""A member publishing model after model of its own node (issue 35): before, each published
100k-tensor model cost the coordinator ~90 MiB and only `max_models` (256) bounded them, ~23 GiB
allowed. Now `max_registry_size` bounds the records' wire bytes together, and what the
coordinator holds for them (records, skeletons, meta tensors) is measured here against it.

A member may publish only records registered on its own node, from folders under its roots;
nothing stops it from making up as many of those as the registry takes. Prints (pytest -s) the
records' wire bytes, the coordinator's resident memory per wire byte, and the slowest
legitimate call made meanwhile."""
import json
import time

from conftest import metactl, proc_status, wait_for
from record_forgery import publish
from daemon_watch import MiB, Watch
from role_tokens import auth, write_tokens

TENSORS = 100_000
REGISTRY_MIB = 64


def made_up_record(name, folder, node):
    """A record of TENSORS small tensors in one file of `folder`, registered on `node`, with its
    skeleton: what a member may publish of its own node without a byte on disk."""
    tensors, skeleton = [], []
    for i in range(TENSORS):
        tensor = f"model.layers.{i // 8}.mlp.experts.{i % 8}.weight"
        tensors.append({"name": tensor, "dtype": "F32", "shape": ["4", "4"], "file": "model.safetensors",
                        "begin_offset": str(8 + 64 * i), "end_offset": str(8 + 64 * (i + 1))})
        skeleton.append({"name": tensor, "shape": [4, 4], "dtype": "F32"})
    return {"name": name, "checkpoint_dir": str(folder), "registered_on": node, "tensors": tensors,
            "skeleton_json": json.dumps({"format": "metaload.skeleton/1", "model": name, "tensors": skeleton})}


def test_a_member_publishing_made_up_models_is_stopped_by_max_registry_size(tmp_path, daemons):
    tokens = write_tokens(tmp_path / "tokens", ("reader", "node-b", "admin"))
    root = tmp_path / "b-storage"
    root.mkdir()
    a = daemons("a", [tmp_path], extra=[*auth(tokens, ["node-b"]), f"max_registry_size: {REGISTRY_MIB}MiB",
                                        "max_request_size: 64MiB", "max_models: 256"])
    b = daemons("b", [root], coordinator=a.address, extra=auth(tokens, ["node-b"]))
    admin = ["--token-file", tokens / "admin.token"]
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address, *admin).stdout, what="b to join")

    def legit():
        start = time.perf_counter()
        metactl("status", "--daemon", a.address, *admin, check=0)
        return time.perf_counter() - start

    outcomes = []
    with Watch(a, legit) as watch:
        for i in range(64):
            record = made_up_record(f"made-up-{i}", root / f"m{i}", "b")
            code, message = publish(a, record, tmp_path, token_file=tokens / "node-b.token")
            outcomes.append((code, message))
            if code != "OK":
                break
    slowest = watch.report(f"{len(outcomes)} publications of {TENSORS:,}-tensor models by a member")
    accepted = sum(code == "OK" for code, _ in outcomes)
    code, message = outcomes[-1]
    rss = proc_status(a.proc.pid)["VmRSS"]
    print(f"{accepted} models accepted; refused: {code} {message[:200]}; coordinator RSS {rss / MiB:.0f} MiB "
          f"({(rss - watch.baseline_rss) / MiB:.0f} MiB over its baseline, {REGISTRY_MIB} MiB of records allowed)")
    assert code == "RESOURCE_EXHAUSTED", outcomes[-1]
    assert message.startswith("the models registered hold ") and \
        f" this daemon holds (max_registry_size in its node config); unregister some" in message, message
    assert 1 <= accepted < 64
    # What the coordinator holds for the records stays a few times their wire bytes.
    assert rss - watch.baseline_rss < 14 * REGISTRY_MIB * MiB, rss  # measured: 10.6 times
    assert slowest < 5, slowest
