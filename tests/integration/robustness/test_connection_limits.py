"""max_connections and max_connections_per_client (docs/node-config.md, "Limits and memory"):
they count authenticated connections, those whose first call passed authentication (connections
before it have caps of their own: test_preauth_connections.py). A daemon holding either closes a
new connection as soon as it accepts it, keeps the ones it holds, and admits new ones once others
have closed. Connections here are real TCP connections that speak HTTP/2 (h2_raw.py), each held
one having made one call (these daemons need no token: any call authenticates), from distinct
loopback source addresses where a test needs distinct client hosts. The numbers measured are
printed (pytest -s shows them).
"""
import subprocess

import pytest

import h2_raw
from conftest import METAD, SANITIZED, metactl, proc_status, wait_for

# Measured on the 2-core test VM: ~20 KiB per idle connection.
MAX_BYTES_PER_IDLE_CONNECTION = 64 << 10


def authenticated(address, source="127.0.0.1"):
    """A connection that made one call and then went quiet (held until the 10 minute idle
    timeout)."""
    conn = h2_raw.Connection(address, source)
    assert conn.call(), "the call was answered"
    return conn


def closed_at_once(address, source="127.0.0.1"):
    """Whether a new connection from `source` is closed as soon as it is accepted."""
    conn = h2_raw.Connection(address, source)
    try:
        return conn.answered() == "closed"
    finally:
        conn.close()


def still_open(conn):
    """Not closed by the daemon: it still holds it."""
    conn.drain()
    return not conn.closed


def test_connections_past_either_limit_are_closed_and_others_are_admitted_once_some_close(tmp_path, daemons):
    root = tmp_path / "root"
    root.mkdir()
    d = daemons("a", [root], extra=["max_connections: 4", "max_connections_per_client: 3"])
    held = [authenticated(d.address) for _ in range(3)]
    try:
        # A fourth from the same host: over max_connections_per_client.
        assert closed_at_once(d.address)
        # Another host still gets one, the fourth in all.
        held.append(authenticated(d.address, source="127.0.0.2"))
        # A third host: over max_connections.
        assert closed_at_once(d.address, source="127.0.0.3")
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
        fresh = [authenticated(d.address) for _ in range(3)]
    finally:
        for c in fresh:
            c.close()


def test_the_default_allowance_holds_hundreds_of_idle_connections_in_bounded_memory(tmp_path, daemons):
    """Pushes against max_connections_per_client's default, 256, from one host, and measures what
    the idle connections (each authenticated by one call) cost the daemon."""
    root = tmp_path / "root"
    root.mkdir()
    d = daemons("a", [root])
    before = proc_status(d.proc.pid)
    held = []
    try:
        for _ in range(256):
            held.append(authenticated(d.address))
        assert closed_at_once(d.address), "the 257th from one host is past max_connections_per_client"
        held.append(authenticated(d.address, source="127.0.0.2"))
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
    (["preauth_timeout: 0s"], 'preauth_timeout: "0s" is not a duration from 1s to 1h'),
    (["preauth_timeout: soon"], 'preauth_timeout: "soon" is not a duration from 1s to 1h'),
    (["max_preauth_bytes: 0"], "max_preauth_bytes: 0 is outside 1MiB..1GiB"),
    (["max_preauth_bytes: 1EiB"], "max_preauth_bytes: bad size"),
    (["max_preauth_connections: 0"], 'max_preauth_connections: "0" is not a count from 1 to 65536'),
    (["max_preauth_connections: 8", "max_preauth_connections_per_client: 9"],
     "max_preauth_connections_per_client: 9 is more than max_preauth_connections (8)"),
])
def test_bad_connection_limits_are_refused_at_start(tmp_path, lines, error):
    config = tmp_path / "node.yaml"
    config.write_text("\n".join(["node: a", "listen: 127.0.0.1:0", *lines]) + "\n")
    proc = subprocess.run([str(METAD), "--node-config", str(config)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"metad: {config}: {error}" in proc.stderr, proc.stderr
