"""A real etcd on loopback for the tests of the etcd registry (`registry: etcd://...`).

etcd is Debian's /usr/bin/etcd (package etcd-server, installed by scripts/setup.sh), started
per test on free loopback ports with a temporary data dir. Without it the tests that use the
`etcd` fixture skip, unless METALOAD_REQUIRE_ETCD=1 or CI=true: then they fail.
"""
import base64
import json
import os
import pathlib
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest

from conftest import free_port, stop_process, wait_for

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
SOURCE_DIR = pathlib.Path(__file__).resolve().parents[2]
PEER_ROLES = SOURCE_DIR / "deploy" / "etcd-peer-roles.sh"
ETCDCTL = "/usr/bin/etcdctl"  # Debian's etcd-client, which scripts/setup.sh installs


def without_sanitizer_runtime():
    """This environment less LD_PRELOAD: scripts/setup.sh sanitize/tsan preload their runtime
    for the Python that imports our instrumented extension, and etcd (Go) preloaded with
    TSan's ignores SIGTERM."""
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


class Etcd:
    """A one-member etcd on loopback; `endpoint` is host:port of its client URL; `extra` more
    etcd flags (["--max-request-bytes", "67108864"]). With `pki` (a folder of openssl-made
    certificates, test_security.py's pki): TLS with node-a's certificate, and only clients with a
    certificate of ca.pem (--client-cert-auth); this helper itself uses client.pem. `endpoint`
    fixes the client address (a daemon was told it before etcd started)."""

    def __init__(self, tmp, extra=(), pki=None, endpoint=None):
        self.endpoint = endpoint or f"127.0.0.1:{free_port()}"
        peer = f"http://127.0.0.1:{free_port()}"
        self.log = open(pathlib.Path(tmp) / "etcd.log", "w+")
        scheme, self.ssl = "http", None
        if pki is not None:
            scheme = "https"
            extra = [*extra, "--cert-file", str(pki / "node-a.pem"), "--key-file", str(pki / "node-a.key"),
                     "--client-cert-auth", "--trusted-ca-file", str(pki / "ca.pem")]
            self.ssl = ssl.create_default_context(cafile=str(pki / "ca.pem"))
            self.ssl.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
        self.url = f"{scheme}://{self.endpoint}"
        self.proc = subprocess.Popen(
            [ETCD, "--name", "test", "--data-dir", str(pathlib.Path(tmp) / "etcd-data"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"test={peer}", *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=without_sanitizer_runtime())
        wait_for(self._answers, timeout=20, what=f"etcd at {self.endpoint}")

    def _answers(self):
        try:
            self.range_prefix("/")
            return True
        except OSError:
            return False

    def _call(self, path, body):
        # etcd 3.4's JSON gateway: the v3 API with base64 keys and values, no client needed.
        request = urllib.request.Request(f"{self.url}/v3/{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.ssl) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:  # what etcd said, for the assertion that follows
            raise RuntimeError(f"etcd {path}: HTTP {e.code}: {e.read()[:500]!r}") from None

    def enable_auth(self, prefix, users, strangers=()):
        """etcd's users and roles, set up as etcdctl would (user add, role grant-permission,
        user grant-role, auth enable): `users` may read and write keys under `prefix`, others
        nothing (`strangers` are users without a role). Under --client-cert-auth etcd takes the user from a client certificate's CN, and
        refuses the JSON gateway's requests from then on: this helper can no longer read or put."""
        b64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
        self._call("auth/user/add", {"name": "root", "password": "root-password"})
        self._call("auth/user/grant", {"user": "root", "role": "root"})
        self._call("auth/role/add", {"name": "metaload"})
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        self._call("auth/role/grant", {"name": "metaload", "perm": {"permType": "READWRITE", "key": b64(prefix),
                                                                     "range_end": b64(end)}})
        for user in users:
            self._call("auth/user/add", {"name": user, "password": f"{user}-password"})
            self._call("auth/user/grant", {"user": user, "role": "metaload"})
        for user in strangers:
            self._call("auth/user/add", {"name": user, "password": f"{user}-password"})
        self._call("auth/enable", {})

    def enable_peer_auth(self, prefix, peers, pki=None, passwords=None):
        """etcd's auth with a role per peer, set up by deploy/etcd-peer-roles.sh with etcd's own
        etcdctl, as a deployment runs it: `peers` maps node names to etcd users, each
        user may write only its node's keys; `passwords` maps users to password files. Then
        root, and auth enabled."""
        if not os.path.exists(ETCDCTL):
            pytest.skip(f"{ETCDCTL} is absent (Debian package etcd-client; scripts/setup.sh installs it)")
        env = {**without_sanitizer_runtime(), "ETCDCTL": ETCDCTL, "ETCDCTL_API": "3", "ETCDCTL_ENDPOINTS": self.url}
        if pki is not None:
            env.update(ETCDCTL_CACERT=str(pki / "ca.pem"), ETCDCTL_CERT=str(pki / "client.pem"),
                       ETCDCTL_KEY=str(pki / "client.key"))
        passwords = passwords or {}
        args = [f"{node}={user}" + (f":{passwords[user]}" if user in passwords else "") for node, user in peers.items()]
        proc = subprocess.run(["sh", str(PEER_ROLES), "--prefix", prefix, *args], env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc
        self._call("auth/user/add", {"name": "root", "password": "root-password"})
        self._call("auth/user/grant", {"user": "root", "role": "root"})
        self._call("auth/enable", {})

    def grant_lease(self, ttl_s):
        return int(self._call("lease/grant", {"TTL": ttl_s})["ID"])

    def put(self, key, value, lease=0):
        self._call("kv/put", {"key": base64.b64encode(key.encode()).decode(), "value": base64.b64encode(value).decode(),
                              "lease": lease})

    def range_prefix(self, prefix):
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        answer = self._call("kv/range", {"key": base64.b64encode(prefix.encode()).decode(),
                                         "range_end": base64.b64encode(end.encode()).decode()})
        return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", ""))
                for kv in answer.get("kvs", [])}

    def stop(self):
        stop_process(self.proc, timeout=10)
        self.log.close()


def require_etcd():
    if not os.path.exists(ETCD):
        message = f"{ETCD} is absent (Debian package etcd-server; scripts/setup.sh installs it)"
        if os.environ.get("METALOAD_REQUIRE_ETCD") == "1" or os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def etcd(tmp_path):
    require_etcd()
    server = Etcd(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def large_etcd(tmp_path):
    """An etcd that accepts requests of up to 64 MiB (etcd's default is 1.5 MiB): where a test
    puts a record larger than any metad accepts."""
    require_etcd()
    server = Etcd(tmp_path, extra=["--max-request-bytes", str(64 << 20)])
    yield server
    server.stop()
