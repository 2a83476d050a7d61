"""Issue 35, item 2: a rank sends its token only to a server that proves it is the planned node.

Under mutual TLS a member joins as node N only with a certificate named tls.node_certificate
for N, but the address it announces (`advertise`) was never checked against that certificate:
ranks dialed whatever address the plan named and checked only that the server's certificate
was signed by the CA and named the host dialed. Here member b (its own certificate, node-b)
announces the address of a server that holds another CA-signed certificate ("mallory", valid
for 127.0.0.1 like every certificate here). Before, every rank that streamed from b opened an
HTTP/2 connection to that server and sent it its calls, reader token included (the impostor
printed "2 TLS handshakes, 1557 bytes received after them, the token among them: True"). Now the
coordinator sends the certificate name each server must carry (GetPlanResponse.
server_certificate), and the TLS handshake refuses the impostor before a byte of HTTP/2: the
rank fails over to a real server, or fails naming the mismatch when there is none.

The impostor is a TLS listener (Python's ssl, the "mallory" certificate) that records what it
receives after its handshakes; daemons and ranks are the real metad and metactl.
"""
import json
import socket
import ssl
import textwrap
import threading

import pytest

from checkpoints import llama_like_tensors, save_sharded, tensor_sha256
from conftest import free_port, metactl, wait_for
from pyproc import python
from ranks import check_reports, run_ranks
from test_security import TOKEN, client_flags, pki, secure  # noqa: F401 (pki: the fixture)


class Impostor:
    """A TLS server with `cert`: counts handshakes and keeps every byte a client sends after one."""

    def __init__(self, pki_dir, cert):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(pki_dir / f"{cert}.pem", pki_dir / f"{cert}.key")
        self.context.set_alpn_protocols(["h2"])
        self.listener = socket.create_server(("127.0.0.1", free_port()))
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.handshakes = 0
        self.received = b""
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    # An HTTP/2 SETTINGS frame (empty), then its acknowledgement: enough HTTP/2 for a gRPC client
    # to take the connection as ready and send its calls' headers.
    SETTINGS, SETTINGS_ACK = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]), bytes([0, 0, 0, 4, 1, 0, 0, 0, 0])

    def _one(self, conn):
        conn.settimeout(1)
        try:
            with self.context.wrap_socket(conn, server_side=True) as tls:
                with self.lock:
                    self.handshakes += 1
                tls.sendall(self.SETTINGS)
                acked = False
                while True:  # until the client closes, or 1 s of silence: then it is closed
                    data = tls.recv(65536)
                    if not data:
                        return
                    with self.lock:
                        self.received += data
                    if not acked:
                        tls.sendall(self.SETTINGS_ACK)
                        acked = True
        except (OSError, ssl.SSLError):
            return

    def close(self):
        self.listener.close()


@pytest.fixture
def impostor(pki):  # noqa: F811
    server = Impostor(pki, "mallory")
    yield server
    server.close()


def test_a_rank_sends_nothing_to_a_server_that_is_not_the_planned_node(tmp_path, daemons, pki,  # noqa: F811
                                                                      impostor):
    root_a, root_b = tmp_path / "storage-a", tmp_path / "storage-b"
    tensors = llama_like_tensors()
    ckpt = save_sharded(tensors, root_a / "llama-tiny", shards=3)
    only_b = save_sharded(tensors, root_b / "llama-b", shards=2)
    a = daemons("a", [root_a], extra=secure(pki, "node-a"))
    # b is who its certificate says, and serves both folders, but announces the impostor's address.
    port_b = free_port()
    b = daemons("b", [root_a, root_b], coordinator=a.address, port=port_b,
                extra=secure(pki, "node-b") + [f"advertise: {impostor.address}"])
    assert b.address == impostor.address  # what metad prints: the address it announces
    b.address = f"127.0.0.1:{port_b}"  # where it listens, which ranks are told to ask
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, *client_flags(pki), check=0)
    wait_for(lambda: f"as cert:node-b, serving at {impostor.address}" in a.logs(), what="b to join")
    # A model only b's folders hold: the impostor's address is its only server.
    metactl("register", "only-b", "--checkpoint", only_b, "--daemon", b.address, *client_flags(pki), check=0)

    # Ranks asking b stream from b's announced address first (their own node), then from a.
    flags = [str(f) for f in client_flags(pki)]
    results = run_ranks(tmp_path, "tiny", [b, b], extra=["--source", "stream", *flags])
    expected = (f'is not node "b": its certificate is named "mallory", and node "b"\'s must be named "node-b" '
                "(the coordinator's tls.node_certificate); nothing was sent to it, no token included")
    with impostor.lock:
        print(f"impostor: {impostor.handshakes} TLS handshakes, {len(impostor.received)} bytes received after "
              f"them, the token among them: {TOKEN.encode() in impostor.received}")
        assert impostor.handshakes >= 1, "no rank tried the impostor: the test proves nothing"
        assert impostor.received == b"", "a rank sent calls (and its token) to a server that is not node b"
    check_reports(results, tensors)  # every byte from a, as registered
    for rank, (rc, out, err, report) in enumerate(results):
        assert {t["source"] for t in report["tensors"]} == {"stream:a"}, rank
        assert any(expected in line and impostor.address in line for line in report["failovers"]), report["failovers"]
        assert TOKEN not in out + err

    # The Python package, through the same C++ core: metaload.load asks b too, and gets every byte from a.
    code = textwrap.dedent(f"""
        import hashlib, json, metaload, torch
        t = metaload.load("tiny", daemon="{b.address}", source="stream", rank=0, world_size=1, verify=False)
        print(json.dumps({{k: hashlib.sha256(v.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
                          for k, v in t.items()}}))
    """)
    handshakes = impostor.handshakes
    proc = python(code, env={"METALOAD_TLS_CA": str(pki / "ca.pem"), "METALOAD_TLS_CERT": str(pki / "client.pem"),
                             "METALOAD_TLS_KEY": str(pki / "client.key"), "METALOAD_TOKEN_FILE": str(pki / "token")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {k: tensor_sha256(v) for k, v in tensors.items()}
    with impostor.lock:
        assert impostor.handshakes > handshakes and impostor.received == b""

    # No other server: the load fails through verification (exit 3, as for any file no source
    # delivered), each tensor naming node, address and both names.
    results = run_ranks(tmp_path, "only-b", [a], extra=["--source", "stream", *flags])
    rc, out, err, report = results[0]
    assert rc == 3, err
    assert "not filled: every source failed (0 of " in err and f"the server at {impostor.address} {expected}" in err, err
    assert all(t["error"].startswith("every source failed") and expected in t["error"] for t in report["tensors"])
    with impostor.lock:
        assert impostor.received == b""
