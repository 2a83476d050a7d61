"""A fault proxy in front of an S3 server: what a bucket does to its clients, on loopback.

Run as a process of its own (`python s3_fault_proxy.py --upstream 127.0.0.1:PORT`), it prints
"listening on 127.0.0.1:PORT" and passes HTTP/1.1 between S3 clients and the server (moto's,
tests/integration/s3_server.py), one upstream connection per client connection, every header
as sent (SigV4 signs the Host header: it reaches the server unchanged). On the way it

- answers S3 errors itself (`503 SlowDown` with S3's XML body, or any status and code) for the
  next N matching requests, for a fraction of them (seeded), or forever;
- drops a connection after K bytes of a response body (FIN after exactly K bytes), or stalls
  it there (headers and K bytes, then nothing, the connection held open);
- adds first-byte latency (before each response's status line) and caps bandwidth per
  connection and in aggregate (token buckets, FIFO among connections);
- counts requests and the body bytes it passed to clients per object key and Range, so that a
  test asserts how many bytes the bucket served.

`--cloud-bucket` is the benchmark's cloud bucket (issue 38: 30 ms first byte, 100 MB/s per
connection, 1.5 GB/s in all; each settable by its own flag); without it nothing is shaped.

Control, on the same port under `/_proxy/` (no S3 bucket name starts with "_"):
  POST   /_proxy/faults   a JSON rule or list of rules, appended (Rule below)
  DELETE /_proxy/faults   forgets every rule
  POST   /_proxy/shape    {"first_byte_latency_ms", "connection_bytes_per_s", "aggregate_bytes_per_s"}
  GET    /_proxy/stats    {"requests", "body_bytes", "by_key": {key: {"requests", "body_bytes",
                          "ranges": {range: {"requests", "body_bytes"}}}}, "faults": [rule + "applied"],
                          "stalls_s": [seconds each stalled response was held until its client closed it]}
  DELETE /_proxy/stats    counts back to zero
Keys are the request path, percent-decoded, without the query (path-style: "/bucket/key").
Only 2xx/206 GET bodies count into `body_bytes`: the bytes of objects served.

Tests use FaultProxy (a handle on the process) through the `s3_fault_proxy` fixture.
"""
import argparse
import asyncio
import json
import pathlib
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

CLOUD_BUCKET = {"first_byte_latency_ms": 30.0, "connection_bytes_per_s": 100e6, "aggregate_bytes_per_s": 1.5e9}
CONTROL_PREFIX = "/_proxy/"
MAX_HEAD_BYTES = 64 * 1024  # a request's or response's status line and headers
MAX_CONTROL_BODY_BYTES = 1 << 20
COPY_BYTES = 256 * 1024  # read from upstream at most this much at once
RULE_KINDS = ("error", "drop", "stall")


class BadRequest(Exception):
    pass


# --- rules ----------------------------------------------------------------------------------


class Rule:
    """One fault: `kind` error (answered here: `status`, S3 `code`), drop (the connection closed
    after `after_bytes` of the body) or stall (no byte after `after_bytes`, held open until the
    client gives up or, with `stall_s`, that many seconds, then closed). It
    applies to the next `count` matching requests (None: every one), each with probability
    `fraction`; a request matches when its method is `method` (if given), its key contains
    `key` (if given) and, with `ranged`, it has a Range header. A drop or stall is spent on a
    body shorter than `after_bytes` too, which then passes whole."""

    FIELDS = {"kind", "count", "fraction", "method", "key", "ranged", "after_bytes", "status", "code", "stall_s"}

    def __init__(self, spec):
        if not isinstance(spec, dict):
            raise BadRequest(f"a rule is a JSON object, not {spec!r:.80}")
        unknown = set(spec) - self.FIELDS
        if unknown:
            raise BadRequest(f"unknown rule fields {sorted(unknown)}; known: {sorted(self.FIELDS)}")
        self.kind = spec.get("kind")
        if self.kind not in RULE_KINDS:
            raise BadRequest(f"rule kind {self.kind!r}: use one of {list(RULE_KINDS)}")
        self.count = _int_field(spec, "count", None, minimum=0)
        self.fraction = spec.get("fraction", 1.0)
        if not isinstance(self.fraction, (int, float)) or isinstance(self.fraction, bool) or \
                not 0.0 <= self.fraction <= 1.0:
            raise BadRequest(f"fraction {self.fraction!r}: a number from 0 to 1")
        self.method = _str_field(spec, "method")
        self.key = _str_field(spec, "key")
        self.ranged = spec.get("ranged", False)
        if not isinstance(self.ranged, bool):
            raise BadRequest(f"ranged {self.ranged!r}: true or false")
        self.after_bytes = _int_field(spec, "after_bytes", 0, minimum=0)
        self.stall_s = spec.get("stall_s")
        if self.stall_s is not None and (not isinstance(self.stall_s, (int, float)) or isinstance(self.stall_s, bool)
                                         or not 0 < self.stall_s <= 3600):
            raise BadRequest(f"stall_s {self.stall_s!r}: seconds, more than 0 and at most 3600")
        self.status = _int_field(spec, "status", 503, minimum=400, maximum=599)
        self.code = _str_field(spec, "code") or ("SlowDown" if self.status == 503 else "InternalError")
        self.spec = dict(spec)
        self.applied = 0

    def matches(self, method, key, has_range):
        if self.count is not None and self.applied >= self.count:
            return False
        if self.method is not None and method != self.method:
            return False
        if self.key is not None and self.key not in key:
            return False
        return has_range or not self.ranged

    def describe(self):
        return dict(self.spec, applied=self.applied)


def _int_field(spec, name, default, minimum=None, maximum=None):
    value = spec.get(name, default)
    if value is None and default is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or (minimum is not None and value < minimum) or \
            (maximum is not None and value > maximum):
        raise BadRequest(f"{name} {value!r}: an integer from {minimum} to {maximum if maximum is not None else 'any'}")
    return value


def _str_field(spec, name):
    value = spec.get(name)
    if value is not None and (not isinstance(value, str) or len(value) > 1024):
        raise BadRequest(f"{name} {value!r:.80}: a string of at most 1024 characters")
    return value


def slowdown_body(status, code, resource):
    messages = {"SlowDown": "Please reduce your request rate.",
                "InternalError": "We encountered an internal error. Please try again."}
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f'<Message>{messages.get(code, "Injected by s3_fault_proxy.")}</Message>'
            f'<Resource>{_xml_escape(resource)}</Resource><RequestId>{uuid.uuid4().hex[:16]}</RequestId>'
            '</Error>').encode()


def _xml_escape(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --- shaping --------------------------------------------------------------------------------


class TokenBucket:
    """A rate cap as a virtual clock: each take(n) is scheduled after the bytes taken before it
    (FIFO, so that connections sharing the aggregate bucket share it fairly), with a burst of
    `burst_s` seconds' worth (one slice: a cap holds over tens of milliseconds already). rate
    None or 0: no cap."""

    def __init__(self, bytes_per_s, burst_s=0.005):
        self.set_rate(bytes_per_s)
        self.burst_s = burst_s
        self.next_free = 0.0

    def set_rate(self, bytes_per_s):
        self.bytes_per_s = bytes_per_s or 0

    async def take(self, n):
        if not self.bytes_per_s:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        start = max(self.next_free, now - self.burst_s)
        self.next_free = start + n / self.bytes_per_s
        if self.next_free - self.burst_s > now:
            await asyncio.sleep(self.next_free - self.burst_s - now)

    def slice_bytes(self):
        """How many bytes to send at once under this cap: ~5 ms' worth, 4 KiB to 256 KiB."""
        if not self.bytes_per_s:
            return COPY_BYTES
        return int(min(COPY_BYTES, max(4096, self.bytes_per_s * 0.005)))


class Stats:
    def __init__(self):
        self.reset()

    def reset(self):
        self.requests = 0
        self.body_bytes = 0
        self.by_key = {}
        self.stalls_s = []  # how long each stalled response was held before the client closed it

    def count_request(self, key, range_header):
        self.requests += 1
        entry = self.by_key.setdefault(key, {"requests": 0, "body_bytes": 0, "ranges": {}})
        entry["requests"] += 1
        ranged = entry["ranges"].setdefault(range_header or "", {"requests": 0, "body_bytes": 0})
        ranged["requests"] += 1
        return entry, ranged

    def add_body(self, counted, n):
        entry, ranged = counted
        self.body_bytes += n
        entry["body_bytes"] += n
        ranged["body_bytes"] += n

    def describe(self):
        return {"requests": self.requests, "body_bytes": self.body_bytes, "by_key": self.by_key,
                "stalls_s": self.stalls_s}


# --- HTTP -----------------------------------------------------------------------------------


class Head:
    """A request's or response's start line and headers, kept as sent (order, case)."""

    def __init__(self, start, headers):
        self.start = start
        self.headers = headers  # [(name, value)]

    def get(self, name):
        for n, v in self.headers:
            if n.lower() == name:
                return v
        return None

    def encode(self):
        lines = [self.start] + [f"{n}: {v}" for n, v in self.headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def read_head(reader):
    """The next head on `reader`; None at a clean end of the connection before one."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise BadRequest("the connection ended inside a head") from None
    except asyncio.LimitOverrunError:
        raise BadRequest(f"a head longer than {MAX_HEAD_BYTES} bytes") from None
    lines = raw.decode("latin-1").split("\r\n")[:-2]
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(f"a malformed header line {line!r:.80}")
        headers.append((name, value.strip()))
    return Head(lines[0], headers)


def body_framing(head, request, method=None, status=None):
    """("length", n), ("chunked", None) or ("close", None): how the body after `head` ends."""
    if not request and (method == "HEAD" or status in (204, 304) or 100 <= status < 200):
        return "length", 0
    if (head.get("transfer-encoding") or "").lower().endswith("chunked"):
        return "chunked", None
    length = head.get("content-length")
    if length is not None:
        if not length.isdigit() or len(length) > 18:
            raise BadRequest(f"Content-Length {length!r:.40}")
        return "length", int(length)
    return ("length", 0) if request else ("close", None)


async def body_pieces(reader, framing):
    """Yields (raw bytes to forward, payload bytes among them) until the body ends."""
    kind, length = framing
    if kind == "length":
        left = length
        while left:
            data = await reader.read(min(left, COPY_BYTES))
            if not data:
                raise ConnectionError(f"the body ended {left} bytes short")
            left -= len(data)
            yield data, len(data)
    elif kind == "close":
        while data := await reader.read(COPY_BYTES):
            yield data, len(data)
    else:  # chunked: forwarded as framed, payload counted
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size_text = size_line.split(b";")[0].strip()
            if not size_text or len(size_text) > 16:
                raise BadRequest(f"a chunk size {size_line!r:.40}")
            size = int(size_text, 16)
            yield size_line, 0
            if size == 0:
                while True:  # trailers, then the empty line
                    line = await reader.readuntil(b"\r\n")
                    yield line, 0
                    if line == b"\r\n":
                        return
            left = size
            while left:
                data = await reader.read(min(left, COPY_BYTES))
                if not data:
                    raise ConnectionError("a chunked body ended inside a chunk")
                left -= len(data)
                yield data, len(data)
            yield await reader.readexactly(2), 0


class Proxy:
    def __init__(self, upstream, shape, rules, seed):
        self.upstream_host, port = upstream.rsplit(":", 1)
        self.upstream_port = int(port)
        self.rules = [Rule(r) for r in rules]
        self.random = random.Random(seed)
        self.stats = Stats()
        self.shape = {}
        self.aggregate = TokenBucket(0)
        self.connections = set()
        self.set_shape(shape)

    def set_shape(self, shape):
        for name, value in shape.items():
            if name not in CLOUD_BUCKET:
                raise BadRequest(f"unknown shape {name!r}; known: {sorted(CLOUD_BUCKET)}")
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0 or value > 1e12:
                raise BadRequest(f"{name} {value!r}: a number from 0 (off) to 1e12")
            self.shape[name] = float(value)
        self.aggregate.set_rate(self.shape.get("aggregate_bytes_per_s", 0))

    def pick_rule(self, method, key, has_range):
        for rule in self.rules:
            if rule.matches(method, key, has_range) and self.random.random() < rule.fraction:
                rule.applied += 1
                return rule
        return None

    async def serve(self, reader, writer):
        task = asyncio.current_task()
        self.connections.add(task)
        connection = TokenBucket(self.shape.get("connection_bytes_per_s", 0))
        upstream = None
        try:
            while True:
                head = await read_head(reader)
                if head is None:
                    return
                parts = head.start.split(" ")
                if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                    raise BadRequest(f"a request line {head.start!r:.80}")
                method, target = parts[0], parts[1]
                path = urllib.parse.urlsplit(target).path
                if path.startswith(CONTROL_PREFIX):
                    await self.control(method, path, head, reader, writer)
                    continue
                key = urllib.parse.unquote(path)
                range_header = head.get("range")
                counted = self.stats.count_request(key, range_header)
                rule = self.pick_rule(method, key, range_header is not None)
                if rule is not None and rule.kind == "error":
                    async for _ in body_pieces(reader, body_framing(head, True)):
                        pass
                    await self.answer_error(writer, method, rule, key)
                    continue
                if upstream is None:
                    upstream = await asyncio.open_connection(self.upstream_host, self.upstream_port,
                                                             limit=MAX_HEAD_BYTES)
                keep = await self.forward(head, method, reader, writer, upstream, rule, counted, connection)
                if not keep:
                    return
        except (BadRequest, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
            if isinstance(e, BadRequest) and not writer.is_closing():
                body = str(e).encode()
                writer.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: text/plain\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        finally:
            self.connections.discard(task)
            for w in (writer, upstream[1] if upstream else None):
                if w is not None:
                    w.close()

    async def answer_error(self, writer, method, rule, key):
        body = slowdown_body(rule.status, rule.code, key)
        reason = {503: "Slow Down", 500: "Internal Server Error"}.get(rule.status, "Error")
        head = (f"HTTP/1.1 {rule.status} {reason}\r\nContent-Type: application/xml\r\n"
                f"Content-Length: {len(body)}\r\nx-amz-request-id: {uuid.uuid4().hex[:16]}\r\n\r\n").encode()
        await self.first_byte_latency()
        writer.write(head if method == "HEAD" else head + body)
        await writer.drain()

    async def first_byte_latency(self):
        latency_ms = self.shape.get("first_byte_latency_ms", 0)
        if latency_ms:
            await asyncio.sleep(latency_ms / 1000)

    async def forward(self, head, method, reader, writer, upstream, rule, counted, connection):
        """One request upstream and its response back; False when the connection must end."""
        up_reader, up_writer = upstream
        up_writer.write(head.encode())
        request_framing = body_framing(head, True)
        expects_continue = (head.get("expect") or "").lower() == "100-continue"
        response = None
        body_unread = False  # the server answered before the body it did not want
        if expects_continue:  # the server's interim answer decides whether the body follows
            await up_writer.drain()
            response = await read_head(up_reader)
            if response is None:
                raise ConnectionError("the server closed the connection")
            if response.start.split(" ")[1] == "100":
                writer.write(response.encode())
                response = None
            else:
                body_unread = request_framing != ("length", 0)
        if response is None:
            async for raw, _ in body_pieces(reader, request_framing):
                up_writer.write(raw)
                await up_writer.drain()
            await up_writer.drain()
            response = await read_head(up_reader)
            while response is not None and response.start.split(" ")[1] == "100":
                response = await read_head(up_reader)
            if response is None:
                raise ConnectionError("the server closed the connection")
        status = int(response.start.split(" ")[1])
        framing = body_framing(response, False, method, status)
        counts = method == "GET" and 200 <= status < 300
        await self.first_byte_latency()
        writer.write(response.encode())
        sent = 0
        async for raw, payload in body_pieces(up_reader, framing):
            view = memoryview(raw)
            while view:
                n = min(len(view), connection.slice_bytes(), self.aggregate.slice_bytes())
                if rule is not None and payload and sent + n > rule.after_bytes:
                    n = rule.after_bytes - sent
                    if n > 0:
                        await self.send(writer, view[:n], connection)
                        sent += n
                        if counts:
                            self.stats.add_body(counted, n)
                    await writer.drain()
                    if rule.kind == "stall":  # until the client gives up, or stall_s
                        began = time.monotonic()
                        try:
                            await asyncio.wait_for(reader.read(), timeout=rule.stall_s)
                        except asyncio.TimeoutError:
                            pass
                        self.stats.stalls_s.append(round(time.monotonic() - began, 3))
                    return False
                await self.send(writer, view[:n], connection)
                view = view[n:]
                if payload:
                    sent += n
                    if counts:
                        self.stats.add_body(counted, n)
        await writer.drain()
        if body_unread or (rule is not None and rule.after_bytes == sent):  # a drop at the body's very end
            return False
        return framing[0] != "close" and (response.get("connection") or "").lower() != "close" and \
            (head.get("connection") or "").lower() != "close"

    async def send(self, writer, data, connection):
        await connection.take(len(data))
        await self.aggregate.take(len(data))
        writer.write(bytes(data))
        await writer.drain()

    async def control(self, method, path, head, reader, writer):
        framing = body_framing(head, True)
        if framing[0] != "length" or framing[1] > MAX_CONTROL_BODY_BYTES:
            raise BadRequest(f"a control body must have a Content-Length of at most {MAX_CONTROL_BODY_BYTES}")
        body = await reader.readexactly(framing[1])
        status, answer = 200, None
        try:
            if (method, path) == ("GET", "/_proxy/stats"):
                answer = dict(self.stats.describe(), faults=[r.describe() for r in self.rules])
            elif (method, path) == ("DELETE", "/_proxy/stats"):
                self.stats.reset()
            elif (method, path) == ("POST", "/_proxy/faults"):
                specs = _json(body)
                specs = specs if isinstance(specs, list) else [specs]
                self.rules += [Rule(s) for s in specs]
            elif (method, path) == ("DELETE", "/_proxy/faults"):
                self.rules = []
            elif (method, path) == ("POST", "/_proxy/shape"):
                shape = _json(body)
                if not isinstance(shape, dict):
                    raise BadRequest("a shape is a JSON object")
                self.set_shape(shape)
            else:
                status, answer = 404, {"error": f"no control {method} {path}"}
        except BadRequest as e:
            status, answer = 400, {"error": str(e)}
        data = json.dumps(answer if answer is not None else {"ok": True}).encode()
        writer.write(f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        await writer.drain()


def _json(body):
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"not JSON: {e}") from None


async def main_async(args):
    shape = dict(CLOUD_BUCKET) if args.cloud_bucket else {}
    for name in CLOUD_BUCKET:
        value = getattr(args, name)
        if value is not None:
            shape[name] = value
    rules = [json.loads(r) for r in args.fault]
    proxy = Proxy(args.upstream, shape, rules, args.seed)
    host, port = args.listen.rsplit(":", 1)
    server = await asyncio.start_server(proxy.serve, host, int(port), limit=MAX_HEAD_BYTES,
                                        reuse_address=True)
    sock = server.sockets[0]
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print(f"listening on {host}:{sock.getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="host:port of the S3 server")
    parser.add_argument("--listen", default="127.0.0.1:0", help="host:port (port 0: any free one)")
    parser.add_argument("--cloud-bucket", action="store_true",
                        help="30 ms first byte, 100 MB/s per connection, 1.5 GB/s in all")
    parser.add_argument("--first-byte-latency-ms", dest="first_byte_latency_ms", type=float)
    parser.add_argument("--connection-bytes-per-s", dest="connection_bytes_per_s", type=float,
                        help="0: no cap")
    parser.add_argument("--aggregate-bytes-per-s", dest="aggregate_bytes_per_s", type=float, help="0: no cap")
    parser.add_argument("--fault", action="append", default=[], help="a rule as JSON (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="for rules with a fraction")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        asyncio.run(main_async(args))
    except KeyboardInterrupt:
        pass


# --- the handle tests use ------------------------------------------------------------------


class FaultProxy:
    """The proxy as a process of its own in front of `upstream` (host:port); `args` more flags
    (["--cloud-bucket"], ["--fault", json.dumps(rule)]). `endpoint` is its http:// URL, what
    clients take for the S3 endpoint; stop() ends it (SIGTERM, then SIGKILL after 5 s)."""

    def __init__(self, tmp, upstream, args=(), name="s3-proxy"):
        self.log = open(pathlib.Path(tmp) / f"{name}.log", "w+")
        self.proc = subprocess.Popen([sys.executable, __file__, "--upstream", upstream, *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        match = re.search(r"listening on (\S+)", line)
        if not match:
            self.stop()
            raise RuntimeError(f"the fault proxy did not start: {line!r}\n{pathlib.Path(self.log.name).read_text()}")
        self.address = match.group(1)
        self.endpoint = f"http://{self.address}"

    def _control(self, method, what, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.endpoint}{CONTROL_PREFIX}{what}", data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"fault proxy {method} {what}: HTTP {e.code}: {e.read()[:500]!r}") from None

    def add_faults(self, *rules):
        """Rules as dicts (Rule's fields), tried in the order added."""
        self._control("POST", "faults", list(rules))

    def clear_faults(self):
        self._control("DELETE", "faults")

    def shape(self, **shape):
        self._control("POST", "shape", shape)

    def stats(self):
        return self._control("GET", "stats")

    def reset_stats(self):
        self._control("DELETE", "stats")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.log.close()
        return self.proc.returncode


@pytest.fixture
def s3_fault_proxy(tmp_path):
    """Factory: s3_fault_proxy(upstream, args=...) starts a FaultProxy; all stop at teardown."""
    started = []

    def start(upstream, args=(), name="s3-proxy"):
        started.append(FaultProxy(tmp_path, upstream, args, name=f"{name}-{len(started)}"))
        return started[-1]

    yield start
    for proxy in reversed(started):
        proxy.stop()


if __name__ == "__main__":
    sys.exit(main())
