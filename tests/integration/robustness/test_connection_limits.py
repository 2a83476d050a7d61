"""max_connections and max_connections_per_client (docs/node-config.md, "Limits and memory"):
a daemon closes a connection past either limit as soon as it accepts it, keeps the ones it
holds, and admits new ones once others have closed. Connections here are real TCP connections
that speak HTTP/2 (the client preface and an empty SETTINGS frame), from distinct loopback
source addresses where a test needs distinct client hosts. The numbers measured are printed
(pytest -s shows them).
"""
import socket
import subprocess

import pytest

from conftest import METAD, SANITIZED, metactl, proc_status, wait_for

# The HTTP/2 client preface and an empty SETTINGS frame: to gRPC, a client that connected and
# then went quiet (held open until the 10 minute idle timeout).
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
# Measured on the 2-core test VM: ~20 KiB per idle connection.
MAX_BYTES_PER_IDLE_CONNECTION = 64 << 10


def connect(address, source="127.0.0.1"):
    host, port = address.rsplit(":", 1)
    conn = socket.socket()
    conn.bind((source, 0))
    conn.connect((host, int(port)))
    conn.sendall(H2_PREFACE)
    return conn


def answer(conn, timeout=10.0):
    """"open" when the daemon sends its HTTP/2 SETTINGS, "closed" when it closes the connection."""
    conn.settimeout(timeout)
    try:
        return "open" if conn.recv(4096) else "closed"
    except ConnectionResetError:
        return "closed"
    except socket.timeout:
        return "silent"


def still_open(conn):
    """Nothing more to read and not closed: the daemon still holds it."""
    conn.settimeout(0.3)
    try:
        return conn.recv(4096) != b""
    except socket.timeout:
        return True
    except ConnectionResetError:
        return False


def test_connections_past_either_limit_are_closed_and_others_are_admitted_once_some_close(tmp_path, daemons):
    root = tmp_path / "root"
    root.mkdir()
    d = daemons("a", [root], extra=["max_connections: 4", "max_connections_per_client: 3"])
    held = [connect(d.address) for _ in range(3)]
    try:
        assert [answer(c) for c in held] == ["open"] * 3
        # A fourth from the same host: over max_connections_per_client.
        over_host = connect(d.address)
        assert answer(over_host) == "closed"
        over_host.close()
        # Another host still gets one, the fourth in all.
        other = connect(d.address, source="127.0.0.2")
        held.append(other)
        assert answer(other) == "open"
        # A third host: over max_connections.
        over_total = connect(d.address, source="127.0.0.3")
        assert answer(over_total) == "closed"
        over_total.close()
        assert all(still_open(c) for c in held), "a refusal must not close the connections held"

        refused = metactl("status", "--daemon", d.address, "--timeout", "3")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert ("the daemon closed the connection at once: if it uses TLS, give --tls-ca (METALOAD_TLS_CA), and "
                "--tls-cert/--tls-key where it requires client certificates; or it already holds max_connections, "
                "or max_connections_per_client from this host (its log says which)") in refused.stderr, refused.stderr
        logs = d.logs()
        assert ("refused a connection from 127.0.0.1: 3 connections open, 3 from that host "
                "(max_connections_per_client); 1 refused since the last such line") in logs, logs
        assert "max_connections)" not in logs, "refusals are logged at most once every 10 s"

        # One of 127.0.0.1's closes: the next call from there is admitted.
        held.pop(0).close()
        wait_for(lambda: metactl("status", "--daemon", d.address, "--timeout", "3").returncode == 0, timeout=15,
                 what="a call once a held connection closed")
        assert all(still_open(c) for c in held)
    finally:
        for c in held:
            c.close()
    # Every connection gone, the whole allowance is free again.
    fresh = []
    try:
        wait_for(lambda: metactl("status", "--daemon", d.address, "--timeout", "3").returncode == 0, timeout=15,
                 what="a call once every connection closed")
        fresh = [connect(d.address) for _ in range(3)]
        assert [answer(c) for c in fresh] == ["open"] * 3
    finally:
        for c in fresh:
            c.close()


def test_the_default_allowance_holds_hundreds_of_idle_connections_in_bounded_memory(tmp_path, daemons):
    """Pushes against max_connections_per_client's default, 256, from one host, and measures what
    the idle connections cost the daemon."""
    root = tmp_path / "root"
    root.mkdir()
    d = daemons("a", [root])
    before = proc_status(d.proc.pid)
    held = []
    try:
        for _ in range(256):
            held.append(connect(d.address))
        assert [answer(c) for c in held] == ["open"] * 256
        extra = connect(d.address)
        assert answer(extra) == "closed", "the 257th from one host is past max_connections_per_client"
        extra.close()
        held.append(connect(d.address, source="127.0.0.2"))
        assert answer(held[-1]) == "open", "another host is still admitted"
        during = proc_status(d.proc.pid)
        per_connection = (during["VmRSS"] - before["VmRSS"]) / 257
        print(f"\n257 idle connections: RSS {before['VmRSS'] >> 20} -> {during['VmRSS'] >> 20} MiB "
              f"({per_connection / 1024:.1f} KiB each), fds {before['fds']} -> {during['fds']}")
        assert during["fds"] >= before["fds"] + 257
        if not SANITIZED:
            assert per_connection <= MAX_BYTES_PER_IDLE_CONNECTION
    finally:
        for c in held:
            c.close()
    wait_for(lambda: proc_status(d.proc.pid)["fds"] <= before["fds"] + 1, timeout=15,
             what="the daemon to close the connections its clients closed")


@pytest.mark.parametrize("lines, error", [
    (["max_connections: 0"], 'max_connections: "0" is not a count from 1 to 65536'),
    (["max_connections: 65537"], 'max_connections: "65537" is not a count from 1 to 65536'),
    (["max_connections: 8", "max_connections_per_client: 9"],
     "max_connections_per_client: 9 is more than max_connections (8)"),
])
def test_bad_connection_limits_are_refused_at_start(tmp_path, lines, error):
    config = tmp_path / "node.yaml"
    config.write_text("\n".join(["node: a", "listen: 127.0.0.1:0", *lines]) + "\n")
    proc = subprocess.run([str(METAD), "--node-config", str(config)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"metad: {config}: {error}" in proc.stderr, proc.stderr
