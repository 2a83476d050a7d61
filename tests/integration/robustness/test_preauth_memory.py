"""Nothing costly before authentication (docs/security.md "What an unauthenticated connection
can cost"): a client without the token opens 4 connections × 10 streams, each declaring a 60 MiB
gRPC message and sending all of it but the last KiB, as fast as the daemon's HTTP/2 windows let
it. metad must hold its resident memory (VmRSS) within 64 MiB of what it held before, while the
push runs and after the connections close, and keep answering a client that has the token.

Before the credentials were checked on the request headers (the token was checked in the
handler, once the whole message had arrived), this took metad from ~130 MiB to ~2.5 GiB.

The pusher speaks HTTP/2 itself over a socket (TLS through Python's ssl module): the client
preface, SETTINGS, HEADERS with HPACK literals (RFC 7541 6.2.2: never indexed, no Huffman), and
DATA within the windows the daemon grants, answering its PINGs and SETTINGS as a real client
would, so that the daemon keeps the connection open.
"""
import select
import socket
import ssl
import struct
import threading
import time

import pytest

from conftest import SANITIZED, metactl, proc_status
from test_security import TOKEN, client_flags, pki, secure  # noqa: F401 (pki is a fixture)

MiB = 1 << 20
DECLARED_BYTES = 60 * MiB
SHORT_BYTES = 1024  # each message stalls this far short of its declared length
CONNECTIONS = 4
STREAMS_PER_CONNECTION = 10
ALLOWED_GROWTH_BYTES = 64 * MiB

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 4, 5
ENHANCE_YOUR_CALM = 0xB
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _hpack_string(data):
    assert len(data) < 127
    return bytes([len(data)]) + data


def _headers_block(method_path, authority, extra=()):
    block = b""
    for name, value in ((":method", "POST"), (":scheme", "http"), (":path", method_path),
                        (":authority", authority), ("content-type", "application/grpc"), ("te", "trailers"),
                        *extra):
        block += b"\x10" + _hpack_string(name.encode()) + _hpack_string(value.encode())
    return block


class HalfSentPush:
    """`connections` HTTP/2 connections to `address`, each with `streams` calls of `method` that
    declare DECLARED_BYTES and send all but SHORT_BYTES of it. start() returns at once; the
    connections stay open, every byte the daemon allows sent, until close(). With
    `authenticate_first`, each connection first completes one GetStatus call with
    `extra_headers` (its token) and waits for the answer, so that the daemon counts it
    authenticated before the push."""

    def __init__(self, address, method, connections, streams, tls_context=None, extra_headers=(),
                 authenticate_first=False):
        self.address, self.method, self.streams = address, method, streams
        self.tls_context, self.extra_headers = tls_context, extra_headers
        self.authenticate_first = authenticate_first
        self.sockets = [self._connect() for _ in range(connections)]
        self.sent_bytes = [0] * connections
        self.refused_streams = [0] * connections
        self.reset_codes = set()  # HTTP/2 error codes of the RST_STREAMs received
        self.closing = threading.Event()
        self.threads = [threading.Thread(target=self._push, args=(i,), daemon=True) for i in range(connections)]

    def _connect(self):
        host, port = self.address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=10)
        if self.tls_context is not None:
            sock = self.tls_context.wrap_socket(sock, server_hostname="localhost")
        return sock

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def _push(self, index):
        sock = self.sockets[index]
        try:
            self._speak(index, sock)
        except (OSError, ValueError):
            pass  # the daemon closed it (or close() did): what it costs then is the question

    def _complete_status_call(self, sock):
        """GetStatus on stream 1 with an empty message; returns once its answer's HEADERS came."""
        sock.sendall(_frame(HEADERS, END_HEADERS, 1,
                            _headers_block("/metaload.v1.Metad/GetStatus", self.address, self.extra_headers))
                     + _frame(DATA, END_STREAM, 1, b"\x00" + struct.pack(">I", 0)))
        inbox = b""
        while True:
            received = sock.recv(1 << 16)
            if received == b"":
                raise OSError("closed before the authenticating call was answered")
            inbox += received
            while len(inbox) >= 9:
                length = int.from_bytes(inbox[:3], "big")
                if len(inbox) < 9 + length:
                    break
                kind, flags, stream = inbox[3], inbox[4], int.from_bytes(inbox[5:9], "big") & 0x7FFFFFFF
                inbox = inbox[9 + length:]
                if kind == SETTINGS and not flags & ACK:
                    sock.sendall(_frame(SETTINGS, ACK, 0))
                elif kind == HEADERS and stream == 1:
                    return

    def _speak(self, index, sock):
        sock.sendall(PREFACE + _frame(SETTINGS, 0, 0))
        connection_window, initial_window, max_frame = 65535, 65535, 16384
        first = 1
        if self.authenticate_first:
            self._complete_status_call(sock)
            first = 3
        ids = [first + 2 * i for i in range(self.streams)]
        windows, left = {}, {}
        block = _headers_block(self.method, self.address, self.extra_headers)
        for stream in ids:
            sock.sendall(_frame(HEADERS, END_HEADERS, stream, block))
            windows[stream], left[stream] = initial_window, DECLARED_BYTES + 5 - SHORT_BYTES
        # Each message opens with gRPC's prefix: not compressed, then the declared length.
        heads = {stream: b"\x00" + struct.pack(">I", DECLARED_BYTES) for stream in ids}
        inbox = b""
        chunk = bytes(max_frame)
        while not self.closing.is_set():
            # Send what the windows allow, round-robin, one frame per stream per turn.
            frames = []
            for stream in ids:
                allowed = min(connection_window, windows[stream], left[stream], max_frame)
                if allowed <= 0:
                    continue
                payload = (heads.pop(stream, b"") + chunk)[:allowed]
                frames.append(_frame(DATA, 0, stream, payload))
                connection_window -= len(payload)
                windows[stream] -= len(payload)
                left[stream] -= len(payload)
                self.sent_bytes[index] += len(payload)
            if frames:
                sock.sendall(b"".join(frames))
            # Stalled: wait for the daemon; else only take what it has sent meanwhile.
            readable, _, _ = select.select([sock], [], [], 0 if frames else 0.05)
            if not readable and not (self.tls_context and sock.pending()):
                continue
            try:
                received = sock.recv(1 << 16)
            except ssl.SSLWantReadError:
                continue
            if received == b"":
                return
            inbox += received
            while len(inbox) >= 9:
                length = int.from_bytes(inbox[:3], "big")
                if len(inbox) < 9 + length:
                    break
                kind, flags = inbox[3], inbox[4]
                stream = int.from_bytes(inbox[5:9], "big") & 0x7FFFFFFF
                payload, inbox = inbox[9:9 + length], inbox[9 + length:]
                if kind == SETTINGS and not flags & ACK:
                    for at in range(0, len(payload), 6):
                        key, value = struct.unpack(">HI", payload[at:at + 6])
                        if key == SETTINGS_INITIAL_WINDOW_SIZE:
                            for s in ids:
                                windows[s] += value - initial_window
                            initial_window = value
                        elif key == SETTINGS_MAX_FRAME_SIZE:
                            max_frame = value
                            chunk = bytes(max_frame)
                    sock.sendall(_frame(SETTINGS, ACK, 0))
                elif kind == PING and not flags & ACK:
                    sock.sendall(_frame(PING, ACK, 0, payload))
                elif kind == WINDOW_UPDATE:
                    increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
                    if stream == 0:
                        connection_window += increment
                    elif stream in windows:
                        windows[stream] += increment
                elif kind in (RST_STREAM, HEADERS) and stream in left:
                    if kind == RST_STREAM:
                        self.reset_codes.add(int.from_bytes(payload[:4], "big"))
                    # Refused (RST_STREAM, or a trailers-only answer): nothing more to send on it.
                    if left[stream] > 0:
                        self.refused_streams[index] += 1
                    left[stream] = 0
                elif kind == GOAWAY:
                    return

    def close(self):
        self.closing.set()
        for t in self.threads:
            t.join(timeout=10)
        for sock in self.sockets:
            try:
                sock.close()
            except OSError:
                pass


def _rss(daemon):
    return proc_status(daemon.proc.pid)["VmRSS"]


def _push_and_watch(daemon, push, authenticated_status):
    """Baseline VmRSS, then the push; returns (baseline, peak while pushing, after close), each in
    bytes, having checked that the authenticated client is answered while the push holds."""
    authenticated_status()  # warm: the first call's own allocations belong to the baseline
    time.sleep(1.5)
    baseline = _rss(daemon)
    push.start()
    peak = baseline
    deadline = time.monotonic() + 12
    last_sent, still_since = -1, time.monotonic()
    # Until every byte the daemon lets through has gone: 2 s without progress, or 12 s at most.
    while time.monotonic() < deadline and time.monotonic() - still_since < 2:
        time.sleep(0.2)
        peak = max(peak, _rss(daemon))
        sent = sum(push.sent_bytes)
        if sent != last_sent:
            last_sent, still_since = sent, time.monotonic()
    authenticated_status()
    peak = max(peak, _rss(daemon))
    push.close()
    # The daemon notices the closed connections at once; give it 3 s to let their memory go.
    time.sleep(3)
    after = _rss(daemon)
    authenticated_status()
    return baseline, peak, after, sum(push.sent_bytes)


def _figures(baseline, peak, after, sent):
    figures = (f"VmRSS {baseline / MiB:.0f} MiB before, {peak / MiB:.0f} MiB at most while pushing, "
               f"{after / MiB:.0f} MiB after close; the push sent {sent / MiB:.0f} MiB")
    print(figures)
    return figures


def _check(baseline, peak, after, sent):
    figures = _figures(baseline, peak, after, sent)
    assert peak - baseline <= ALLOWED_GROWTH_BYTES, figures
    assert after - baseline <= ALLOWED_GROWTH_BYTES, figures



@pytest.mark.skipif(SANITIZED, reason="an ASan build's memory figures are not the daemon's")
@pytest.mark.parametrize("method", ["GetStatus", "RegisterModel"])
def test_unauthenticated_half_sent_messages_cost_no_memory_plaintext(tmp_path, daemons, pki, method):
    root = tmp_path / "root"
    root.mkdir()
    a = daemons("a", [root], extra=[f"auth_token_file: {pki}/token"])
    push = HalfSentPush(a.address, f"/metaload.v1.Metad/{method}", CONNECTIONS, STREAMS_PER_CONNECTION)
    status = lambda: metactl("status", "--daemon", a.address, "--token-file", pki / "token",  # noqa: E731
                             "--timeout", "10", check=0)
    _check(*_push_and_watch(a, push, status))


@pytest.mark.skipif(SANITIZED, reason="an ASan build's memory figures are not the daemon's")
def test_unauthenticated_half_sent_messages_cost_no_memory_tls(tmp_path, daemons, pki):
    root = tmp_path / "root"
    root.mkdir()
    a = daemons("a", [root], extra=secure(pki, "node-a", mutual=False))
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    context.set_alpn_protocols(["h2"])
    push = HalfSentPush(a.address, "/metaload.v1.Metad/GetStatus", CONNECTIONS, STREAMS_PER_CONNECTION,
                        tls_context=context)
    flags = client_flags(pki, cert=None)
    status = lambda: metactl("status", "--daemon", a.address, *flags, "--timeout", "10", check=0)  # noqa: E731
    _check(*_push_and_watch(a, push, status))


@pytest.mark.skipif(SANITIZED, reason="an ASan build's memory figures are not the daemon's")
def test_a_wrong_token_is_refused_before_the_message_too(tmp_path, daemons, pki):
    root = tmp_path / "root"
    root.mkdir()
    a = daemons("a", [root], extra=[f"auth_token_file: {pki}/token"])
    push = HalfSentPush(a.address, "/metaload.v1.Metad/PublishModel", CONNECTIONS, STREAMS_PER_CONNECTION,
                        extra_headers=[("authorization", "Bearer not-the-token")])
    status = lambda: metactl("status", "--daemon", a.address, "--token-file", pki / "token",  # noqa: E731
                             "--timeout", "10", check=0)
    _check(*_push_and_watch(a, push, status))
    assert TOKEN not in a.logs()


@pytest.mark.skipif(SANITIZED, reason="an ASan build's memory figures are not the daemon's")
def test_a_token_holders_half_sent_messages_are_capped_and_given_back(tmp_path, daemons, pki):
    """The same push with the token, on connections that have authenticated (one GetStatus call
    each, answered): gRPC 1.51 buffers each declared message whole before it checks the 128 KiB a
    daemon takes per message, so what its transports hold is capped (32 MiB, which RegisterModel
    and PublishModel, uploaded in pieces, made possible; streams past it are cancelled) and, once
    the connections close, the freed memory goes back to the kernel. Before: +2.4 GiB while
    pushing and after close; with a cap of 4 x max_request_size (256 MiB), +356 to +585 MiB."""
    root = tmp_path / "root"
    root.mkdir()
    a = daemons("a", [root], extra=[f"auth_token_file: {pki}/token"])
    push = HalfSentPush(a.address, "/metaload.v1.Metad/GetStatus", CONNECTIONS, STREAMS_PER_CONNECTION,
                        extra_headers=[("authorization", f"Bearer {TOKEN}")], authenticate_first=True)
    status = lambda: metactl("status", "--daemon", a.address, "--token-file", pki / "token",  # noqa: E731
                             "--timeout", "10", check=0)
    baseline, peak, after, sent = _push_and_watch(a, push, status)
    figures = _figures(baseline, peak, after, sent)
    # gRPC reclaims once the cap is exceeded, so the peak overshoots it, the more the busier the
    # machine and the wider the windows gRPC has granted: on new connections +65 to +131 MiB
    # measured alone on 2 cores (+318 beside ctest -j2); on connections that completed a call
    # first (which new ones must do now, max_preauth_bytes) +384 to +513 MiB, once +642 (the old
    # cap's: +325 to +585 MiB alone; uncapped +2,410). Given back after close, below.
    assert peak - baseline <= 1024 * MiB, figures
    # Cancelled by gRPC's reclaimer: ENHANCE_YOUR_CALM, which a gRPC client reads as
    # RESOURCE_EXHAUSTED.
    assert sum(push.refused_streams) > 0 and ENHANCE_YOUR_CALM in push.reset_codes, (figures, push.reset_codes)
    assert after - baseline <= ALLOWED_GROWTH_BYTES, figures


@pytest.mark.skipif(SANITIZED, reason="an ASan build's memory figures are not the daemon's")
def test_a_token_holders_never_ending_messages_on_a_new_connection_are_cut_at_max_preauth_bytes(
        tmp_path, daemons, pki):
    """The same push with the token on new connections: gRPC hands a unary call to the service
    only once its message has arrived whole, so none of these calls ever reaches it, and each
    connection is closed once it has sent max_preauth_bytes (8 MiB), looked at every 100 ms. What
    arrives before that look is what gRPC's windows let in (~4 MiB a stream, 10 streams a
    connection): +29 to +82 MiB measured alone, +176 MiB beside ctest -j2; given back after close."""
    root = tmp_path / "root"
    root.mkdir()
    a = daemons("a", [root], extra=[f"auth_token_file: {pki}/token"])
    push = HalfSentPush(a.address, "/metaload.v1.Metad/GetStatus", CONNECTIONS, STREAMS_PER_CONNECTION,
                        extra_headers=[("authorization", f"Bearer {TOKEN}")])
    status = lambda: metactl("status", "--daemon", a.address, "--token-file", pki / "token",  # noqa: E731
                             "--timeout", "10", check=0)
    baseline, peak, after, sent = _push_and_watch(a, push, status)
    figures = _figures(baseline, peak, after, sent)
    assert peak - baseline <= 256 * MiB, figures
    assert after - baseline <= ALLOWED_GROWTH_BYTES, figures
    # Which closes them first depends on the machine's load: the budget (logged "... before a call
    # of its reached the service (max_preauth_bytes 8.00 MiB)"), or gRPC's reclaimer once the
    # transports' 32 MiB cap is passed (seen beside ctest -j2). Either way none holds memory.


@pytest.mark.skipif(SANITIZED, reason="an ASan build's memory figures are not the daemon's")
@pytest.mark.parametrize("method", ["RegisterModel", "PublishModel"])
def test_a_readers_uploads_are_refused_before_a_byte_is_read(tmp_path, daemons, method):
    """Only an admin uploads a skeleton (RegisterModel) and only a member or an admin a record
    (PublishModel): a reader's token is refused on the call's headers (the upload's reactor starts
    with them, before any piece), so a rank's token makes the daemon hold nothing of its 40
    half-sent 60 MiB messages."""
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    for who in ("reader", "member", "admin"):
        (tokens / f"{who}.token").write_text(f"secret-of-{who}\n")
    root = tmp_path / "root"
    root.mkdir()
    a = daemons("a", [root], extra=["auth_tokens:", f"  reader: {tokens}/reader.token",
                                    f"  member: {tokens}/member.token", f"  admin: {tokens}/admin.token"])
    push = HalfSentPush(a.address, f"/metaload.v1.Metad/{method}", CONNECTIONS, STREAMS_PER_CONNECTION,
                        extra_headers=[("authorization", "Bearer secret-of-reader")])
    status = lambda: metactl("status", "--daemon", a.address, "--token-file", tokens / "admin.token",  # noqa: E731
                             "--timeout", "10", check=0)
    _check(*_push_and_watch(a, push, status))
    # Every stream was answered (PERMISSION_DENIED) and reset, none left reading.
    assert sum(push.refused_streams) == CONNECTIONS * STREAMS_PER_CONNECTION, push.refused_streams
