"""etcd with a role per peer (issue 35): any peer could write the whole prefix, and one put
`members/node-b` under its own lease pointing at its own address. With etcd's TLS and auth on
(test_etcd_security.py's etcd: client certificates of ca.pem only, the user a certificate's
CN) and the roles deploy/etcd-peer-roles.sh creates (run with Debian's etcdctl, as a deployment
runs it), each peer writes only `members/<its node>` and `models/<its node>/`, and reads the
rest: peers a, b, c share the registry and plan over each other, while b's certificate (through
build/tests/etcd_put, metad's own etcd client) is refused every key of a's, and neither
replaces nor unregisters a's model through its daemon."""
import subprocess

import pytest

from checkpoints import llama_like_tensors, save_sharded
from cluster.test_etcd_registry import plan_nodes, status_json
from cluster.test_etcd_security import member_names, registry_lines
from conftest import BUILD_DIR, METAD, free_port, metactl, wait_for
from etcd_server import Etcd, require_etcd
from robustness.test_security import pki  # noqa: F401 (a fixture: ca.pem, node-a, node-b, node-c, client)

ETCD_PUT = BUILD_DIR / "tests" / "etcd_put"
DENIED = "etcdserver: permission denied"


@pytest.fixture
def roles_etcd(tmp_path, pki):  # noqa: F811
    require_etcd()
    server = Etcd(tmp_path, pki=pki)
    server.enable_peer_auth("/metaload/", {"a": "node-a", "b": "node-b", "c": "node-c"}, pki=pki)
    yield server
    server.stop()


def etcd_as(etcd, pki, cert, *args):  # noqa: F811
    """`etcd_put` with `cert`'s credentials: (exit code, stdout + stderr)."""
    proc = subprocess.run([str(ETCD_PUT), etcd.endpoint, str(pki / "ca.pem"), str(pki / f"{cert}.pem"),
                           str(pki / f"{cert}.key"), *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture
def peers(tmp_path, roles_etcd, pki, daemons):  # noqa: F811
    root = tmp_path / "storage"
    ckpts = {"tiny": save_sharded(llama_like_tensors(), root / "llama-tiny", shards=2),
             "other": save_sharded(llama_like_tensors(layers=2, seed=1), root / "llama-other", shards=2)}
    nodes = {name: daemons(name, [root], port=free_port(), extra=registry_lines(roles_etcd, pki, f"node-{name}"))
             for name in ("a", "b", "c")}
    for d in nodes.values():
        wait_for(lambda: member_names(d) == ["a", "b", "c"], what=f"{d.name} to see every peer")
    metactl("register", "tiny", "--checkpoint", ckpts["tiny"], "--daemon", nodes["a"].address, check=0)
    for d in nodes.values():
        wait_for(lambda: "tiny" in [m["name"] for m in status_json(d).get("models", [])], what=f"{d.name} to read tiny")
    return {**nodes, "ckpts": ckpts}


def test_three_peers_with_roles_of_their_own_share_the_registry_and_plan_over_each_other(peers):
    a, b, c = peers["a"], peers["b"], peers["c"]
    for d in (a, b, c):
        assert plan_nodes("tiny", d) == ["a", "b", "c"], d.name
    # Each publishes under its own keys: b registers a model of its own, every peer plans it.
    metactl("register", "other", "--checkpoint", peers["ckpts"]["other"], "--daemon", b.address, check=0)
    for d in (a, c):
        wait_for(lambda: "other" in [m["name"] for m in status_json(d).get("models", [])], what=f"{d.name} to read other")
        assert plan_nodes("other", d) == ["a", "b", "c"], d.name
    metactl("unregister", "other", "--daemon", b.address, check=0)  # its own: allowed
    wait_for(lambda: "other" not in [m["name"] for m in status_json(a).get("models", [])], what="a to drop other")


@pytest.mark.parametrize("args", [
    ("put", "/metaload/members/a", "forged"),           # another peer's member key
    ("put", "/metaload/members/node-b", "forged"),      # the attack: a member of a made-up name
    ("put", "/metaload/models/a/tiny", "forged"),       # a's record
    ("put", "/metaload/models/a/fresh", "forged"),      # a new record in a's range
    ("put", "/metaload/models/tiny", "forged"),         # outside every node's range
    ("delete", "/metaload/models/a/tiny"),
    ("delete", "/metaload/members/a"),
])
def test_a_peers_certificate_is_refused_every_key_but_its_own(peers, roles_etcd, pki, args):  # noqa: F811
    a, b = peers["a"], peers["b"]
    rc, out = etcd_as(roles_etcd, pki, "node-b", *args)
    assert rc == 1 and DENIED in out, out
    # Its own keys it may write (the refusal above is the role's, not a broken login).
    rc, out = etcd_as(roles_etcd, pki, "node-b", "put", "/metaload/models/b/probe", "x")
    assert (rc, out) == (0, "OK\n"), out
    rc, out = etcd_as(roles_etcd, pki, "node-b", "delete", "/metaload/models/b/probe")
    assert (rc, out) == (0, "OK\n"), out
    for d in (a, b, peers["c"]):
        assert member_names(d) == ["a", "b", "c"], d.name
        assert plan_nodes("tiny", d) == ["a", "b", "c"], d.name


def test_a_peer_neither_replaces_nor_unregisters_another_peers_model(peers):
    a, b = peers["a"], peers["b"]
    proc = metactl("register", "tiny", "--checkpoint", peers["ckpts"]["other"], "--daemon", b.address, "--replace",
                   check=None)
    assert proc.returncode != 0, proc
    assert 'model tiny is registered on node a (etcd key "/metaload/models/a/tiny") and etcd refused' in proc.stderr
    assert DENIED in proc.stderr and "only node a's daemon replaces or unregisters it" in proc.stderr, proc.stderr
    print(f"register --replace through b: exit {proc.returncode}: {proc.stderr.strip()}")
    proc = metactl("unregister", "tiny", "--daemon", b.address, check=None)
    assert proc.returncode != 0, proc
    assert 'model tiny is registered on node a (etcd key "/metaload/models/a/tiny") and etcd refused' in proc.stderr
    assert DENIED in proc.stderr, proc.stderr
    for d in (a, b):
        [model] = [m for m in status_json(d)["models"] if m["name"] == "tiny"]
        assert model["checkpoint_dir"] == str(peers["ckpts"]["tiny"]), d.name
        assert plan_nodes("tiny", d) == ["a", "b", "c"], d.name


def test_a_peer_configured_as_another_node_cannot_join(tmp_path, peers, roles_etcd, pki):  # noqa: F811
    # node-b's certificate with `node: d`: the member key is d's, which b's role may not write.
    config = tmp_path / "impostor.yaml"
    config.write_text("node: d\nlisten: 127.0.0.1:0\n" + "\n".join(registry_lines(roles_etcd, pki, "node-b")) + "\n")
    proc = subprocess.run([str(METAD), "--node-config", str(config)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc
    assert f"joining the registry etcd://{roles_etcd.endpoint}" in proc.stderr and DENIED in proc.stderr, proc.stderr
    assert member_names(peers["a"]) == ["a", "b", "c"]
