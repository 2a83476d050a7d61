"""metad's /metrics for the integration tests: where a daemon serves it (its log says), a
scrape over plain HTTP/1.1, and the text parsed as Prometheus parses it."""
import http.client
import re

from conftest import wait_for

# metrics_listen for a test daemon: a port of its own (the default, 9464, is one per host).
METRICS_ON_ANY_PORT = "metrics_listen: 127.0.0.1:0"


def metrics_address(daemon):
    """host:port of the daemon's metrics listener, from its log line "metrics on http://H:P/metrics"."""
    found = []

    def logged():
        found[:] = re.findall(r"metrics on http://(\S+)/metrics", daemon.logs())
        return bool(found)
    wait_for(logged, timeout=5, what=f"metad {daemon.name} to log its metrics address")
    host, port = found[-1].rsplit(":", 1)
    return f"{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"


def scrape(address, path="/metrics", headers=None, timeout=5):
    """(status, headers dict, body text) of one GET."""
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """({(name, ((label, value), ...)): float}, {family: type}) of an exposition text; a line
    that is neither a comment nor a sample fails the test."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
            continue
        if line.startswith("# HELP ") or not line:
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        labels = tuple(sorted(_LABEL.findall(match.group(2) or "")))
        samples[(match.group(1), labels)] = float(match.group(3))
    return samples, types


def metrics(daemon_or_address, headers=None):
    """The parsed samples of one scrape that must answer 200."""
    address = daemon_or_address if isinstance(daemon_or_address, str) else metrics_address(daemon_or_address)
    status, _, body = scrape(address, headers=headers)
    assert status == 200, body
    return parse(body)[0]


def value(samples, name, default=None, **labels):
    """A sample's value; `default` when it is not there (a counter's label pair not seen yet)."""
    key = (name, tuple(sorted(labels.items())))
    return samples[key] if default is None else samples.get(key, default)
