"""TLS and auth to etcd (issue 23: etcd ran plaintext without auth, so anyone who reached it
could read and forge the registry). A real etcd (Debian's /usr/bin/etcd, etcd_server.py) serves
TLS and admits only clients with a certificate of its CA (--client-cert-auth); peers dial it with
`registry_tls: {ca, cert, key}` (docs/node-config.md). With etcd's auth enabled (users and a role
granted the prefix, set up through its JSON gateway), a peer is the etcd user its certificate's CN
names, or the one of `registry_auth: {user, password_file}`. Certificates are made by openssl at
test time (test_security.py's pki)."""
import json
import subprocess

import pytest

from checkpoints import llama_like_tensors, save_sharded
from conftest import METAD, free_port, metactl, wait_for
from etcd_server import Etcd, require_etcd
from robustness.test_security import pki  # noqa: F401 (a fixture: ca.pem, node-a, node-b, rogue of other-ca)


@pytest.fixture
def tls_etcd(tmp_path, pki):  # noqa: F811
    require_etcd()
    server = Etcd(tmp_path, pki=pki)
    yield server
    server.stop()


def registry_lines(etcd, pki, cert):  # noqa: F811
    return [f"registry: etcd://{etcd.endpoint}",
            f"registry_tls: {{ca: {pki}/ca.pem, cert: {pki}/{cert}.pem, key: {pki}/{cert}.key}}"]


def member_names(daemon):
    status = json.loads(metactl("status", "--daemon", daemon.address, "--format", "json", check=0).stdout)
    return sorted(m["name"] for m in status.get("members", []))


def test_peers_share_an_etcd_that_admits_only_client_certificates_of_its_ca(tmp_path, tls_etcd, pki, daemons):  # noqa: F811
    root = tmp_path / "storage"
    ckpt = save_sharded(llama_like_tensors(), root / "llama-tiny", shards=2)
    a = daemons("a", [root], port=free_port(), extra=registry_lines(tls_etcd, pki, "node-a"))
    b = daemons("b", [root], port=free_port(), extra=registry_lines(tls_etcd, pki, "node-b"))
    for d in (a, b):
        wait_for(lambda: member_names(d) == ["a", "b"], what=f"{d.name} to see both peers")
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    proc = metactl("plan", "tiny", "--daemon", b.address, "--format", "json", check=0)
    assert sorted({rank["node"] for rank in json.loads(proc.stdout)["ranks"]}) == ["a", "b"]
    assert "/metaload/models/a/tiny" in tls_etcd.range_prefix("/metaload/models/")


@pytest.mark.parametrize("case", ["plaintext", "no client certificate", "certificate of another CA"])
def test_a_peer_without_an_admitted_certificate_exits_1_naming_etcd(tmp_path, tls_etcd, pki, case):  # noqa: F811
    lines = {"plaintext": [f"registry: etcd://{tls_etcd.endpoint}"],
             "no client certificate": [f"registry: etcd://{tls_etcd.endpoint}", f"registry_tls: {{ca: {pki}/ca.pem}}"],
             "certificate of another CA": registry_lines(tls_etcd, pki, "rogue")}[case]
    config = tmp_path / "x.yaml"
    config.write_text("node: x\nlisten: 127.0.0.1:0\n" + "\n".join(lines) + "\n")
    proc = subprocess.run([str(METAD), "--node-config", str(config)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc
    assert f"joining the registry etcd://{tls_etcd.endpoint} (prefix /metaload/)" in proc.stderr, proc.stderr
    assert tls_etcd.range_prefix("/metaload/members/") == {}


def test_a_missing_registry_tls_file_is_refused_naming_the_key(tmp_path, tls_etcd, pki):  # noqa: F811
    config = tmp_path / "x.yaml"
    config.write_text(f"node: x\nlisten: 127.0.0.1:0\nregistry: etcd://{tls_etcd.endpoint}\n"
                      f"registry_tls: {{ca: {tmp_path}/nonexistent.pem}}\n")
    proc = subprocess.run([str(METAD), "--node-config", str(config)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc
    assert "registry_tls.ca: " in proc.stderr and f"{tmp_path}/nonexistent.pem" in proc.stderr, proc.stderr


def test_with_etcd_auth_a_certificate_is_the_etcd_user_and_only_granted_users_may_join(
        tmp_path, tls_etcd, pki, daemons):  # noqa: F811
    # node-a's CN is an etcd user granted /metaload/; mallory's (a certificate of the same CA) is not.
    tls_etcd.enable_auth("/metaload/", ["node-a"])
    root = tmp_path / "storage"
    root.mkdir()
    a = daemons("a", [root], port=free_port(), extra=registry_lines(tls_etcd, pki, "node-a"))
    wait_for(lambda: member_names(a) == ["a"], what="a to join")
    config = tmp_path / "mallory.yaml"
    config.write_text("node: mallory\nlisten: 127.0.0.1:0\n" + "\n".join(registry_lines(tls_etcd, pki, "mallory")) + "\n")
    proc = subprocess.run([str(METAD), "--node-config", str(config)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc
    assert f"joining the registry etcd://{tls_etcd.endpoint}" in proc.stderr, proc.stderr
    assert "etcdserver: permission denied" in proc.stderr, proc.stderr
    assert member_names(a) == ["a"], "mallory's member key was written"


@pytest.fixture
def auth_etcd(tmp_path):
    """A plaintext etcd on loopback with auth enabled: users node-a and node-b (password
    "<user>-password") may read and write /metaload/; mallory exists and may not."""
    require_etcd()
    server = Etcd(tmp_path)
    server.enable_auth("/metaload/", ["node-a", "node-b"], strangers=["mallory"])
    yield server
    server.stop()


def login_lines(etcd, tmp_path, user, password):
    secret = tmp_path / f"{user}.password"
    secret.write_text(password + "\n")
    return [f"registry: etcd://{etcd.endpoint}", f"registry_auth: {{user: {user}, password_file: {secret}}}"]


def test_with_etcd_auth_peers_log_in_with_a_password_and_share_the_registry(tmp_path, auth_etcd, daemons):
    root = tmp_path / "storage"
    ckpt = save_sharded(llama_like_tensors(), root / "llama-tiny", shards=2)
    a = daemons("a", [root], port=free_port(), extra=login_lines(auth_etcd, tmp_path, "node-a", "node-a-password"))
    b = daemons("b", [root], port=free_port(), extra=login_lines(auth_etcd, tmp_path, "node-b", "node-b-password"))
    for d in (a, b):
        wait_for(lambda: member_names(d) == ["a", "b"], what=f"{d.name} to see both peers")
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    proc = metactl("plan", "tiny", "--daemon", b.address, "--format", "json", check=0)
    assert sorted({rank["node"] for rank in json.loads(proc.stdout)["ranks"]}) == ["a", "b"]
    assert "node-a-password" not in a.logs()


@pytest.mark.parametrize("user, password, message", [
    (None, None, "etcdserver: user name is empty"),
    ("node-a", "wrong", "Authenticate as node-a: etcdserver: authentication failed, invalid user ID or password"),
    ("mallory", "mallory-password", "etcdserver: permission denied"),
])
def test_with_etcd_auth_a_peer_without_a_granted_login_exits_1_naming_etcd(
        tmp_path, auth_etcd, daemons, user, password, message):
    root = tmp_path / "storage"
    root.mkdir()
    a = daemons("a", [root], port=free_port(), extra=login_lines(auth_etcd, tmp_path, "node-a", "node-a-password"))
    wait_for(lambda: member_names(a) == ["a"], what="a to join")
    lines = [f"registry: etcd://{auth_etcd.endpoint}"] if user is None else login_lines(auth_etcd, tmp_path, user, password)
    config = tmp_path / "x.yaml"
    config.write_text("node: x\nlisten: 127.0.0.1:0\n" + "\n".join(lines) + "\n")
    proc = subprocess.run([str(METAD), "--node-config", str(config)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc
    assert f"joining the registry etcd://{auth_etcd.endpoint}" in proc.stderr and message in proc.stderr, proc.stderr
    if password:
        assert password not in proc.stderr, "a password was printed"
    assert member_names(a) == ["a"]
