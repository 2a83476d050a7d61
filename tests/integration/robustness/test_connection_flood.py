"""A cheap loop must not keep a daemon down (daemon/net/accept_loop.h, issue 20): a daemon limited
to 1,024 descriptors takes 1,500 connect/close cycles as fast as one client can make them (each
closed at once, or after sending the HTTP/2 preface, so that gRPC has to take it) while another
client opens a new connection every ~10 ms throughout and for 2 s after, from the same host,
and is never refused for longer than 100 ms; the daemon's descriptors come back to where they
were. And a daemon out of descriptors closes each new connection at once (its reserve
descriptor) instead of leaving it to hang, logs which limit to raise, and serves again once
connections close. Connections here speak HTTP/2: the client preface and an empty SETTINGS
frame, answered by the daemon's SETTINGS. The numbers measured are printed (pytest -s).
"""
import json
import socket
import subprocess
import sys
import time

import pytest

from conftest import metactl, proc_status, wait_for

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
FD_LIMIT = 1024
FLOOD_CYCLES = 1500
POLL_INTERVAL_S = 0.010
POLL_AFTER_S = 2.0
MAX_REFUSAL_S = 0.100

# The flood, in a process of its own so that the poller's timing does not wait on it: connect,
# send `hex` (maybe nothing), close, as fast as possible.
FLOOD = """
import json, socket, sys, time
host, port, cycles, sent = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), bytes.fromhex(sys.argv[4])
failed = 0
start = time.perf_counter()
for _ in range(cycles):
    s = socket.socket()
    try:
        s.connect((host, port))
        s.sendall(sent)
    except OSError:
        failed += 1
    s.close()
print(json.dumps({"seconds": time.perf_counter() - start, "failed": failed}))
"""


def split(address):
    host, port = address.rsplit(":", 1)
    return host, int(port)


def answered(address, timeout=1.0):
    """Whether a new connection is answered with the daemon's HTTP/2 SETTINGS within `timeout`."""
    conn = socket.socket()
    conn.settimeout(timeout)
    try:
        conn.connect(split(address))
        conn.sendall(H2_PREFACE)
        frame = conn.recv(9)
        return len(frame) == 9 and frame[3] == 4  # a SETTINGS frame
    except OSError:  # refused, reset, timed out
        return False
    finally:
        conn.close()


def refusal_windows(polls):
    """[(start, seconds)]: from the start of each run of failed polls to the start of the next poll
    answered (to the end of the last poll when none was)."""
    windows, failed_since = [], None
    for start, ok, took in polls:
        if not ok and failed_since is None:
            failed_since = start
        elif ok and failed_since is not None:
            windows.append((failed_since, start - failed_since))
            failed_since = None
    if failed_since is not None:
        windows.append((failed_since, polls[-1][0] + polls[-1][2] - failed_since))
    return windows


@pytest.mark.parametrize("sent", [b"", H2_PREFACE], ids=["nothing", "the_preface"])
def test_a_connect_close_flood_never_refuses_a_polling_client_for_more_than_100_ms(tmp_path, daemons, sent):
    root = tmp_path / "root"
    root.mkdir()
    d = daemons("a", [root], prefix=("prlimit", f"--nofile={FD_LIMIT}:{FD_LIMIT}"))
    wait_for(lambda: f"file descriptors: {FD_LIMIT} (hard limit {FD_LIMIT})" in d.logs(), what="the limit logged")
    assert answered(d.address)
    before = proc_status(d.proc.pid)["fds"]

    host, port = split(d.address)
    polls = []  # (start, answered, seconds)
    flood = subprocess.Popen([sys.executable, "-c", FLOOD, host, str(port), str(FLOOD_CYCLES), sent.hex()],
                             stdout=subprocess.PIPE, text=True)
    flood_ended = None
    peak_fds = before
    while flood_ended is None or time.monotonic() < flood_ended + POLL_AFTER_S:
        start = time.monotonic()
        ok = answered(d.address)
        polls.append((start, ok, time.monotonic() - start))
        if flood_ended is None and flood.poll() is not None:
            flood_ended = time.monotonic()
        if len(polls) % 10 == 0:
            peak_fds = max(peak_fds, proc_status(d.proc.pid)["fds"])
        time.sleep(max(0.0, start + POLL_INTERVAL_S - time.monotonic()))
    report = json.loads(flood.communicate()[0])
    windows = refusal_windows(polls)
    longest = max((seconds for _, seconds in windows), default=0.0)
    slowest = max(took for _, ok, took in polls if ok)
    settled = time.monotonic()
    wait_for(lambda: proc_status(d.proc.pid)["fds"] <= before, timeout=15,
             what=f"the daemon's descriptors back to {before}")
    after = proc_status(d.proc.pid)["fds"]
    print(f"\n{FLOOD_CYCLES} connect/close cycles sending {len(sent)} bytes in {report['seconds']:.2f} s "
          f"({report['failed']} failed); "
          f"{len(polls)} polls, {sum(not ok for _, ok, _ in polls)} refused in {len(windows)} windows, "
          f"longest {longest * 1000:.0f} ms; slowest answer {slowest * 1000:.0f} ms; "
          f"descriptors {before} -> peak {peak_fds} -> {after} "
          f"({time.monotonic() - settled:.2f} s after the polls)")
    assert report["failed"] == 0, report
    assert longest <= MAX_REFUSAL_S, f"refused for {longest * 1000:.0f} ms: {windows}\n{d.logs()}"
    assert metactl("status", "--daemon", d.address, "--timeout", "5").returncode == 0, "still serves"


def test_a_daemon_out_of_descriptors_closes_new_connections_at_once_and_serves_once_they_close(tmp_path, daemons):
    root = tmp_path / "root"
    root.mkdir()
    limit = 128
    d = daemons("a", [root], prefix=("prlimit", f"--nofile={limit}:{limit}"))
    held = []
    try:
        # More connections held open than descriptors allow (from two hosts: each under
        # max_connections_per_client): those past the limit are closed as soon as accepted.
        outcomes = []
        for i in range(limit + 40):
            conn = socket.socket()
            conn.bind((f"127.0.0.{1 + i % 2}", 0))
            conn.connect(split(d.address))
            conn.sendall(H2_PREFACE)
            conn.settimeout(5)
            try:
                outcomes.append("open" if conn.recv(4096) else "closed")
            except ConnectionResetError:
                outcomes.append("closed")
            except socket.timeout:
                outcomes.append("silent")
            held.append(conn)
        print(f"\n{len(outcomes)} connections against {limit} descriptors: {outcomes.count('open')} open, "
              f"{outcomes.count('closed')} closed at once, {outcomes.count('silent')} unanswered")
        assert "silent" not in outcomes, "a connection the daemon has no descriptor for is closed, not left to hang"
        assert outcomes.count("closed") >= 40
        start = time.monotonic()
        assert not answered(d.address), "still out of descriptors"
        assert time.monotonic() - start < 1.0, "closed at once"
    finally:
        for conn in held:
            conn.close()
    wait_for(lambda: answered(d.address), timeout=10, what="the daemon to answer once the connections closed")
    assert metactl("status", "--daemon", d.address, "--timeout", "5").returncode == 0
    logs = d.logs()
    assert (f"out of file descriptors (EMFILE, {limit} allowed): closed a connection from 127.0.0.") in logs, logs
    assert ("as soon as it was accepted; 1 since the last such line. To serve more at once, raise the hard limit "
            "(systemd LimitNOFILE, ulimit -Hn) or lower max_connections (1024)") in logs, logs
