"""The metrics listener (daemon/metrics/scrape_server.h) against hostile HTTP: oversized
headers, a request that never ends (slowloris), a thousand connections at once, and what is not
`GET /metrics`. Each is answered or closed within its bound while a real scrape still works,
and metaload_metrics_requests_total counts each outcome."""
import resource
import socket
import time

from metrics_scrape import METRICS_ON_ANY_PORT, metrics, metrics_address, scrape, value


def metrics_daemon(tmp_path, daemons):
    root = tmp_path / "root"
    root.mkdir()
    a = daemons("a", [root], extra=[METRICS_ON_ANY_PORT])
    return a, metrics_address(a)


def raw(address, data, timeout=10):
    """What the listener answers `data` with, read until it closes: (bytes, seconds)."""
    host, port = address.rsplit(":", 1)
    start = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer, time.monotonic() - start


def test_what_is_not_get_metrics_is_answered_and_closed(tmp_path, daemons):
    _, address = metrics_daemon(tmp_path, daemons)
    cases = [
        (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", "405 Method Not Allowed"),
        (b"GET /admin HTTP/1.1\r\nHost: x\r\n\r\n", "404 Not Found"),
        (b"GET /metricsX HTTP/1.1\r\n\r\n", "404 Not Found"),
        (b"GARBAGE\r\n\r\n", "400 Bad Request"),
        (b"GET /metrics HTTP/2.0\r\n\r\n", "400 Bad Request"),
        (b"GET  /metrics HTTP/1.1\r\n\r\n", "400 Bad Request"),
        (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 16384 + b"\r\n\r\n", "431 Request Header Fields Too Large"),
    ]
    for request, status in cases:
        answer, seconds = raw(address, request)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[0] == f"HTTP/1.1 {status}".encode(), (request[:40], answer[:200])
        assert body == f"{status}\n".encode()
        assert b"Connection: close" in head
        assert seconds < 2, (request[:40], seconds)
    assert b"Allow: GET" in raw(address, cases[0][0])[0]
    samples = metrics(address)
    expected = {"method_not_allowed": 2, "not_found": 2, "bad_request": 3, "too_large": 1, "ok": 0}
    for outcome, n in expected.items():
        assert value(samples, "metaload_metrics_requests_total", outcome=outcome) == n, outcome
    # A query string is no other path: Prometheus may add one.
    assert scrape(address, path="/metrics?name[]=x")[0] == 200


def test_a_request_that_never_ends_is_closed_at_the_timeout_while_scrapes_work(tmp_path, daemons):
    _, address = metrics_daemon(tmp_path, daemons)
    host, port = address.rsplit(":", 1)
    start = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        closed_after = None
        while closed_after is None:
            assert scrape(address)[0] == 200  # meanwhile, a scrape is answered
            try:
                sock.sendall(b"X-Slow: 1\r\n")  # a header line every 0.5 s, never the blank line
                sock.settimeout(0.5)
                if sock.recv(1) == b"":
                    closed_after = time.monotonic() - start
            except socket.timeout:
                pass
            except (ConnectionResetError, BrokenPipeError):
                closed_after = time.monotonic() - start
            assert time.monotonic() - start < 10, "the slow request was never closed"
    assert 4.5 <= closed_after <= 7, closed_after  # request_timeout: 5 s
    assert value(metrics(address), "metaload_metrics_requests_total", outcome="timed_out") == 1


def test_a_thousand_idle_connections_do_not_lock_the_scraper_out(tmp_path, daemons):
    _, address = metrics_daemon(tmp_path, daemons)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    host, port = address.rsplit(":", 1)
    held = []
    try:
        for _ in range(1000):
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
            held.append(sock)
        start = time.monotonic()
        status, _, body = scrape(address)
        assert status == 200 and "metaload_process_open_fds" in body
        assert time.monotonic() - start < 2
        samples = metrics(address)
        # 16 open at most: every one past that closed the oldest still sending its request.
        assert value(samples, "metaload_metrics_requests_total", outcome="evicted") >= 1000 - 16
        assert value(samples, "metaload_metrics_requests_total", outcome="ok") == 1
        assert value(samples, "metaload_process_open_fds") < 200
    finally:
        for sock in held:
            sock.close()
