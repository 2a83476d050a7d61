"""metad's Prometheus metrics (docs/operations.md): what a real daemon counts during a real
load, what deploy/'s dashboard and alert rules ask for, what the docs list, and the
`metrics_listen` values refused at start."""
import json
import re
import socket
import subprocess
import threading
import time

from checkpoints import llama_like_tensors, save_sharded
from conftest import METAD, SOURCE_DIR, metactl, wait_for
from metrics_scrape import METRICS_ON_ANY_PORT, metrics, metrics_address, parse, scrape, value
from ranks import run_ranks


def registered(tmp_path, daemons, extra=()):
    root = tmp_path / "storage"
    tensors = llama_like_tensors()
    ckpt = save_sharded(tensors, root / "llama-tiny", shards=3)
    a = daemons("a", [root], extra=[METRICS_ON_ANY_PORT, *extra])
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    return a, tensors


def test_streamed_bytes_counted_as_the_ranks_report_them_and_scrapes_answer_during_the_load(tmp_path, daemons):
    a, tensors = registered(tmp_path, daemons)
    address = metrics_address(a)
    before = metrics(address)
    results, scraped_during = [], []

    def load():
        results.extend(run_ranks(tmp_path, "tiny", [a] * 2, extra=["--strategy", "replicate", "--source", "stream"]))
    loader = threading.Thread(target=load)
    loader.start()
    while loader.is_alive():
        status, _, body = scrape(address)
        assert status == 200
        scraped_during.append(value(parse(body)[0], "metaload_streams_in_flight"))
    loader.join()
    check_reports_replicated(results, tensors)
    after = metrics(address)
    streamed = sum(report["streamed_bytes_by_node"].get("a", 0) for _, _, _, report in results)
    assert streamed == 2 * sum(t.numel() * t.element_size() for t in tensors.values())
    served = (value(after, "metaload_served_bytes_total", source="stream") -
              value(before, "metaload_served_bytes_total", source="stream"))
    assert served == streamed
    assert scraped_during, "no scrape finished while the ranks loaded"
    # Every stream the ranks opened ended OK, and the histogram counted each one.
    streams = (value(after, "metaload_rpc_duration_seconds_count", method="ReadRange") -
               value(before, "metaload_rpc_duration_seconds_count", method="ReadRange"))
    assert streams >= 2
    assert value(after, "metaload_rpc_handled_total", method="ReadRange", code="OK") == streams
    assert value(after, "metaload_rpc_duration_seconds_bucket", method="ReadRange", le="+Inf") == streams
    assert value(after, "metaload_streams_in_flight") == 0
    assert value(after, "metaload_read_errors_total") == 0
    assert value(after, "metaload_registered_models") == 1
    assert value(after, "metaload_members", state="up") == 1


def check_reports_replicated(results, tensors):
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\n{out}\n{err}"
        assert sorted(t["name"] for t in report["tensors"]) == sorted(tensors)


def test_latency_histogram_counts_each_call(tmp_path, daemons):
    a, _ = registered(tmp_path, daemons)
    before = metrics(a)
    for _ in range(3):
        metactl("status", "--daemon", a.address, check=0)
    after = metrics(a)
    for name, labels in (("metaload_rpc_duration_seconds_count", {"method": "GetStatus"}),
                         ("metaload_rpc_handled_total", {"method": "GetStatus", "code": "OK"})):
        assert value(after, name, **labels) - value(before, name, default=0, **labels) == 3, name
    buckets = sorted(((float(dict(labels)["le"]), v) for (name, labels), v in after.items()
                      if name == "metaload_rpc_duration_seconds_bucket" and dict(labels)["method"] == "GetStatus"))
    assert [v for _, v in buckets] == sorted(v for _, v in buckets), "buckets are cumulative"
    assert buckets[-1] == (float("inf"), value(after, "metaload_rpc_duration_seconds_count", method="GetStatus"))


def referenced_names(text):
    """metaload_* names in a dashboard or rule file, histogram series as their family."""
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in re.findall(r"\bmetaload_[a-z_]+", text)}


def test_deploy_dashboard_and_alerts_name_only_exported_metrics_and_docs_list_every_one(tmp_path, daemons):
    a, _ = registered(tmp_path, daemons)
    b = daemons("b", [tmp_path / "storage"], coordinator=a.address, extra=[METRICS_ON_ANY_PORT])
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address).stdout, what="node b to join")
    exported = {}
    for daemon in (a, b):
        _, _, body = scrape(metrics_address(daemon))
        exported.update(parse(body)[1])
    assert "metaload_members" in exported and "metaload_served_bytes_total" in exported
    dashboard = (SOURCE_DIR / "deploy" / "grafana-dashboard.json").read_text()
    json.loads(dashboard)
    alerts = (SOURCE_DIR / "deploy" / "prometheus-alerts.yaml").read_text()
    for source, text in (("grafana-dashboard.json", dashboard), ("prometheus-alerts.yaml", alerts)):
        names = referenced_names(text)
        assert names, source
        assert names <= set(exported), f"{source} names metrics no metad exports: {sorted(names - set(exported))}"
    operations = (SOURCE_DIR / "docs" / "operations.md").read_text()
    documented = set(re.findall(r"^\| `(metaload_[a-z_]+)`", operations, re.M))
    assert documented == set(exported), (f"exported, not in docs/operations.md: {sorted(set(exported) - documented)}; "
                                         f"documented, not exported: {sorted(documented - set(exported))}")


def start_metad(tmp_path, lines):
    config = tmp_path / "node.yaml"
    listen = [] if any(line.startswith("listen:") for line in lines) else ["listen: 127.0.0.1:0"]
    config.write_text("\n".join(["node: m", *listen, *lines]) + "\n")
    proc = subprocess.Popen([str(METAD), "--node-config", str(config)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc, config


def refused(tmp_path, lines):
    """(exit code, stderr, config path) of a metad that must stop at once; one that serves
    instead is stopped, and its exit code is then not 2."""
    proc, config = start_metad(tmp_path, lines)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err, config


def test_bad_metrics_listen_values_are_refused_at_start(tmp_path):
    cases = [
        ("nowhere", '{c}: metrics_listen: "nowhere" is not host:port'),
        ("127.0.0.1:99999", '{c}: metrics_listen: bad port "99999" in "127.0.0.1:99999"'),
        ("[a, b]", "{c}: metrics_listen: must be a single value"),
        ("0.0.0.0:9464",
         "{c}: metrics_listen: 0.0.0.0:9464 is not a loopback address, and the metrics port is plain HTTP (no TLS): "
         "set allow_insecure: true on a network you trust (a scrape then needs the daemon's token when it has "
         "tokens), keep it on loopback, or set metrics_listen: off (docs/security.md)"),
    ]
    for text, message in cases:
        rc, err, config = refused(tmp_path, [f"metrics_listen: {text}"])
        assert (rc, err) == (2, f"metad: {message.format(c=config)}\n"), text
    rc, err, config = refused(tmp_path, ["listen: 127.0.0.1:17070", "metrics_listen: 127.0.0.1:17070"])
    assert (rc, err) == (2, f"metad: {config}: metrics_listen: 127.0.0.1:17070 is `listen`'s address too: "
                            "the metrics need a port of their own\n")


def test_a_metrics_port_in_use_stops_metad_when_named_and_only_warns_by_default(tmp_path):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    try:
        rc, err, _ = refused(tmp_path, [f"metrics_listen: 127.0.0.1:{port}"])
        assert rc == 1
        assert err.splitlines()[-1] == (f"metad: cannot listen for metrics on 127.0.0.1:{port}: cannot listen on "
                                        f"127.0.0.1:{port}: bind 127.0.0.1:{port}: Address already in use"), err
        # The default: another daemon of this host may hold it; held here as soon as nobody else
        # does. A holder that cannot be waited out (30 s) is taken to stay; another test's daemon
        # holding it for a moment is waited out: trusting it to stay made this test flaky under
        # ctest -j2 (its metad bound 9464 once that daemon had gone).
        other = socket.socket()
        deadline = time.monotonic() + 30
        while True:
            try:
                other.bind(("127.0.0.1", 9464))
                other.listen()
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        proc, _ = start_metad(tmp_path, [])
        try:
            assert "listening on" in proc.stdout.readline()
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=10)
            other.close()
        assert "no metrics: the default metrics_listen 127.0.0.1:9464 cannot be bound" in err, err
        assert proc.returncode == 0
    finally:
        held.close()


def test_metrics_off_loopback_need_the_daemons_token(tmp_path, daemons):
    token = tmp_path / "admin.token"
    token.write_text("secret-metrics-token\n")
    root = tmp_path / "root"
    root.mkdir()
    a = daemons("a", [root], extra=["metrics_listen: 0.0.0.0:0", "allow_insecure: true",
                                    f"auth_token_file: {token}"])
    assert re.search(r"metrics on http://0\.0\.0\.0:\d+/metrics \(a scrape needs the daemon's token\)", a.logs())
    address = metrics_address(a)
    for headers in ({}, {"Authorization": "Bearer not-the-token"}, {"Authorization": "secret-metrics-token"}):
        status, response_headers, body = scrape(address, headers=headers)
        assert (status, body) == (401, "401 Unauthorized\n"), headers
        assert response_headers["WWW-Authenticate"] == "Bearer"
    samples = metrics(address, headers={"Authorization": "Bearer secret-metrics-token"})
    assert value(samples, "metaload_metrics_requests_total", outcome="unauthorized") == 3
    assert value(samples, "metaload_node_info", node="a", role="coordinator") == 1
    assert "secret-metrics-token" not in a.logs()
