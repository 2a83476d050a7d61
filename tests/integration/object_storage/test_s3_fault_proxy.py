"""The fault proxy itself (s3_fault_proxy.py), in front of a tiny origin in this process that
serves objects with Range and keeps connections alive as S3 does: bytes pass bit-exact both
ways, each fault happens exactly as asked (a 503 SlowDown's XML, a drop at K bytes, a stall),
the caps and the first-byte latency hold within 20 %, the counts are exact, and its control
refuses malformed rules. The end-to-end fault tests put it in front of the real S3 server."""
import http.client
import http.server
import json
import os
import socket
import threading
import time

import pytest

from s3_fault_proxy import s3_fault_proxy  # noqa: F401 (a fixture)
from s3_server import s3_server  # noqa: F401 (a fixture: moto on loopback)

OBJECT = os.urandom(8 << 20)  # /bucket/model.safetensors
SMALL = os.urandom(100_000)   # /bucket/small


class Origin(http.server.BaseHTTPRequestHandler):
    """GET/HEAD with one "bytes=a-b" Range; PUT (Content-Length or chunked) answers the sha of
    what arrived, so that a test compares the bytes the origin got."""
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # its head and body are two writes
    objects = {"/bucket/model.safetensors": OBJECT, "/bucket/small": SMALL}

    def log_message(self, *args):
        pass

    def _object(self):
        data = self.objects.get(self.path)
        if data is None:
            self.send_error(404)
            return None, None
        rng = self.headers.get("Range")
        if rng is None:
            return data, 200
        first, last = rng.removeprefix("bytes=").split("-")
        return data[int(first):int(last) + 1], 206

    def _answer(self, with_body):
        data, status = self._object()
        if data is not None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if with_body:
                self.wfile.write(data)

    def do_GET(self):
        self._answer(with_body=True)

    def do_HEAD(self):
        self._answer(with_body=False)

    def do_PUT(self):
        if self.headers.get("Transfer-Encoding") == "chunked":
            body = b""
            while (size := int(self.rfile.readline().strip(), 16)) != 0:
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers["Content-Length"]))
        answer = f"{len(body)} {hash(body)}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


@pytest.fixture
def origin():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def connect(proxy):
    host, port = proxy.address.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=30)


def get(conn, path, rng=None, method="GET"):
    conn.request(method, path, headers={"Range": rng} if rng else {})
    response = conn.getresponse()
    return response.status, response.read()


def raw_get(proxy, path):
    """The response to one GET as raw bytes, read until the proxy closes the connection."""
    host, port = proxy.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {proxy.address}\r\nConnection: close\r\n\r\n".encode())
        received = b""
        while data := s.recv(1 << 20):
            received += data
    head, _, body = received.partition(b"\r\n\r\n")
    return head.decode(), body


def test_bytes_pass_bit_exact_both_ways_and_are_counted_per_key_and_range(origin, s3_fault_proxy):
    proxy = s3_fault_proxy(origin)
    conn = connect(proxy)  # one connection, kept alive across every request
    assert get(conn, "/bucket/model.safetensors") == (200, OBJECT)
    assert get(conn, "/bucket/model.safetensors", "bytes=1000-1999999") == (206, OBJECT[1000:2000000])
    assert get(conn, "/bucket/model.safetensors", "bytes=1000-1999999") == (206, OBJECT[1000:2000000])
    assert get(conn, "/bucket/small", method="HEAD") == (200, b"")
    assert get(conn, "/bucket/missing") [0] == 404
    upload = os.urandom(3_000_000)
    conn.request("PUT", "/bucket/up", body=upload)
    assert conn.getresponse().read() == f"{len(upload)} {hash(upload)}".encode()
    conn.request("PUT", "/bucket/up", body=iter([upload[:1000], upload[1000:]]), encode_chunked=True,
                 headers={"Transfer-Encoding": "chunked"})
    assert conn.getresponse().read() == f"{len(upload)} {hash(upload)}".encode()
    conn.request("PUT", "/bucket/up", body=upload, headers={"Expect": "100-continue"})
    assert conn.getresponse().read() == f"{len(upload)} {hash(upload)}".encode()
    conn.close()

    stats = proxy.stats()
    assert stats["requests"] == 8
    # Only the bodies of objects served count: 8 MiB whole, twice the 1,999,000-byte range.
    assert stats["body_bytes"] == len(OBJECT) + 2 * 1_999_000
    assert stats["by_key"]["/bucket/model.safetensors"] == {
        "requests": 3, "body_bytes": len(OBJECT) + 2 * 1_999_000,
        "ranges": {"": {"requests": 1, "body_bytes": len(OBJECT)},
                   "bytes=1000-1999999": {"requests": 2, "body_bytes": 2 * 1_999_000}}}
    assert stats["by_key"]["/bucket/small"]["body_bytes"] == 0
    assert stats["by_key"]["/bucket/up"]["requests"] == 3
    proxy.reset_stats()
    assert proxy.stats()["requests"] == 0


def test_slowdown_for_the_next_requests_then_the_object(origin, s3_fault_proxy):
    proxy = s3_fault_proxy(origin, ["--fault", json.dumps({"kind": "error", "count": 2, "method": "GET"})])
    conn = connect(proxy)
    for _ in range(2):
        conn.request("GET", "/bucket/small", headers={"Range": "bytes=0-9"})
        response = conn.getresponse()
        body = response.read().decode()
        assert (response.status, response.reason) == (503, "Slow Down")
        assert response.getheader("Content-Type") == "application/xml"
        assert body.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                               '<Message>Please reduce your request rate.</Message>'
                               '<Resource>/bucket/small</Resource><RequestId>'), body
    assert get(conn, "/bucket/small", "bytes=0-9") == (206, SMALL[:10])  # the same connection, still alive
    stats = proxy.stats()
    assert stats["faults"] == [{"kind": "error", "count": 2, "method": "GET", "applied": 2}]
    assert stats["body_bytes"] == 10  # the error bodies are not the bucket's bytes


def test_a_fraction_of_requests_fail_seeded_and_other_errors(origin, s3_fault_proxy):
    proxy = s3_fault_proxy(origin, ["--seed", "7"])
    proxy.add_faults({"kind": "error", "fraction": 0.25, "key": "small"},
                     {"kind": "error", "status": 500, "key": "model"})
    conn = connect(proxy)
    statuses = [get(conn, "/bucket/small", "bytes=0-0")[0] for _ in range(200)]
    assert statuses.count(503) + statuses.count(206) == 200
    assert 30 <= statuses.count(503) <= 70, statuses.count(503)
    conn.request("GET", "/bucket/model.safetensors")
    response = conn.getresponse()
    assert (response.status, response.reason) == (500, "Internal Server Error")
    assert "<Code>InternalError</Code>" in response.read().decode()
    assert [f["applied"] for f in proxy.stats()["faults"]] == [statuses.count(503), 1]
    proxy.clear_faults()
    assert get(conn, "/bucket/model.safetensors", "bytes=0-3") == (206, OBJECT[:4])


@pytest.mark.parametrize("after_bytes", [0, 1, 1_234_567])
def test_a_drop_happens_at_exactly_k_bytes_of_the_body(origin, s3_fault_proxy, after_bytes):
    proxy = s3_fault_proxy(origin)
    proxy.add_faults({"kind": "drop", "count": 1, "after_bytes": after_bytes})
    head, body = raw_get(proxy, "/bucket/model.safetensors")
    assert head.startswith("HTTP/1.0 200") or head.startswith("HTTP/1.1 200"), head
    assert f"Content-Length: {len(OBJECT)}" in head
    assert body == OBJECT[:after_bytes]  # exactly K bytes, then the connection's end
    assert proxy.stats()["body_bytes"] == after_bytes
    assert raw_get(proxy, "/bucket/model.safetensors")[1] == OBJECT  # count 1: the next passes whole


def test_a_stall_sends_k_bytes_then_nothing_until_the_client_gives_up(origin, s3_fault_proxy):
    proxy = s3_fault_proxy(origin)
    proxy.add_faults({"kind": "stall", "after_bytes": 100})
    host, port = proxy.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=0.5) as s:
        s.sendall(b"GET /bucket/model.safetensors HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        with pytest.raises(socket.timeout):
            while data := s.recv(1 << 20):
                received += data
    assert received.partition(b"\r\n\r\n")[2] == OBJECT[:100]


def timed_gets(proxy, connections, path):
    """Seconds until `connections` parallel GETs of `path` all arrived (bit-exact)."""
    bodies = [None] * connections

    def one(i):
        bodies[i] = get(connect(proxy), path)[1]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(connections)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    assert bodies == [OBJECT] * connections
    return elapsed


def test_the_caps_and_the_first_byte_latency_hold_within_20_percent(origin, s3_fault_proxy):
    mb = len(OBJECT) / 1e6
    proxy = s3_fault_proxy(origin, ["--connection-bytes-per-s", 16e6])
    # One connection at 16 MB/s: 8.4 MB in 0.52 s; two do not share a connection's cap.
    assert timed_gets(proxy, 1, "/bucket/model.safetensors") == pytest.approx(mb / 16, rel=0.2)
    assert timed_gets(proxy, 2, "/bucket/model.safetensors") == pytest.approx(mb / 16, rel=0.2)
    # In aggregate 24 MB/s: three uncapped connections share it, 25.2 MB in 1.05 s.
    proxy.shape(connection_bytes_per_s=0, aggregate_bytes_per_s=24e6)
    assert timed_gets(proxy, 3, "/bucket/model.safetensors") == pytest.approx(3 * mb / 24, rel=0.2)

    proxy.shape(aggregate_bytes_per_s=0, first_byte_latency_ms=150)
    conn = connect(proxy)
    for _ in range(3):  # every request, on a connection kept alive too
        start = time.monotonic()
        conn.request("GET", "/bucket/small", headers={"Range": "bytes=0-0"})
        response = conn.getresponse()
        assert time.monotonic() - start == pytest.approx(0.15, rel=0.2)
        assert response.read() == SMALL[:1]


def test_cloud_bucket_defaults_are_those_of_the_issue(origin, s3_fault_proxy):
    import s3_fault_proxy as module
    assert module.CLOUD_BUCKET == {"first_byte_latency_ms": 30.0, "connection_bytes_per_s": 100e6,
                                   "aggregate_bytes_per_s": 1.5e9}
    proxy = s3_fault_proxy(origin, ["--cloud-bucket", "--first-byte-latency-ms", "0"])
    # 100 MB/s per connection: 8.4 MB in 84 ms at least.
    elapsed = timed_gets(proxy, 1, "/bucket/model.safetensors")
    assert elapsed >= 0.8 * len(OBJECT) / 100e6, elapsed


MALFORMED_RULES = [
    (b"{", "not JSON"),
    (b'{"kind": "explode"}', "rule kind 'explode': use one of ['error', 'drop', 'stall']"),
    (b'{"kind": "drop", "after_bytes": -1}', "after_bytes -1: an integer from 0 to any"),
    (b'{"kind": "error", "status": 200}', "status 200: an integer from 400 to 599"),
    (b'{"kind": "error", "fraction": 2}', "fraction 2: a number from 0 to 1"),
    (b'{"kind": "error", "count": true}', "count True: an integer from 0 to any"),
    (b'{"kind": "error", "bogus": 1}', "unknown rule fields ['bogus']"),
    (b'[{"kind": "error"}, 1]', "a rule is a JSON object, not 1"),
]


def test_the_control_refuses_malformed_rules_and_adds_none_of_them(origin, s3_fault_proxy):
    proxy = s3_fault_proxy(origin)
    conn = connect(proxy)
    for body, error in MALFORMED_RULES:
        conn.request("POST", "/_proxy/faults", body=body)
        response = conn.getresponse()
        assert response.status == 400, body
        assert json.loads(response.read())["error"].startswith(error), body
    conn.request("POST", "/_proxy/shape", body=b'{"aggregate_bytes_per_s": -1}')
    response = conn.getresponse()
    assert (response.status, json.loads(response.read())) == (
        400, {"error": "aggregate_bytes_per_s -1: a number from 0 (off) to 1e12"})
    assert proxy.stats()["faults"] == []  # nothing half-added
    assert get(conn, "/bucket/small", "bytes=0-1") == (206, SMALL[:2])


def test_in_front_of_the_real_s3_server_signed_requests_pass_and_a_slowdown_is_retried(s3_server,
                                                                                         s3_fault_proxy):
    """SigV4 signs the Host header: the proxy passes it unchanged, so moto accepts what boto3
    signed for the proxy's address; boto3 retries the SlowDown and gets the object bit-exact."""
    s3_server.create_bucket("models")
    s3_server.put("models", "ckpt/small", SMALL)
    proxy = s3_fault_proxy(s3_server.endpoint.removeprefix("http://"))
    proxy.add_faults({"kind": "error", "count": 2, "method": "GET"})
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config
    client = boto3.client("s3", endpoint_url=proxy.endpoint, region_name=s3_server.region,
                          aws_access_key_id=s3_server.access_key_id,
                          aws_secret_access_key=s3_server.secret_access_key,
                          config=Config(s3={"addressing_style": "path"},
                                        retries={"mode": "standard", "max_attempts": 3}))
    got = client.get_object(Bucket="models", Key="ckpt/small", Range="bytes=10-99")
    assert got["Body"].read() == SMALL[10:100]
    assert got["ResponseMetadata"]["RetryAttempts"] == 2
    stats = proxy.stats()
    assert stats["by_key"]["/models/ckpt/small"] == {
        "requests": 3, "body_bytes": 90, "ranges": {"bytes=10-99": {"requests": 3, "body_bytes": 90}}}
