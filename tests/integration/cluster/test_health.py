"""The standard gRPC health service (grpc.health.v1.Health) on metad's main port, as
Kubernetes' gRPC probe calls it (tests/integration/health_probe.cc: no token, no TLS): SERVING
only when the daemon can serve — a coordinator once its registry is loaded, a node agent while
its coordinator answers its joins — and callable without a token, which every other method still
needs."""
import os
import subprocess
import time

from conftest import BUILD_DIR, free_port, metactl, wait_for
from metrics_scrape import METRICS_ON_ANY_PORT, metrics, value

HEALTH_PROBE = BUILD_DIR / "tests" / "health_probe"
JOIN_PROBE = BUILD_DIR / "tests" / "join_probe"


def health(daemon):
    proc = subprocess.run([str(HEALTH_PROBE), daemon.address], capture_output=True, text=True, timeout=10)
    return proc.returncode, proc.stdout


SERVING = (0, "status: SERVING\n")
NOT_SERVING = (1, "status: NOT_SERVING\n")


def test_an_agent_is_serving_only_while_its_coordinator_answers(tmp_path, daemons):
    root = tmp_path / "root"
    root.mkdir()
    a = daemons("a", [root], port=free_port(), extra=[METRICS_ON_ANY_PORT])
    assert health(a) == SERVING
    b = daemons("b", [root], coordinator=a.address, extra=[METRICS_ON_ANY_PORT])
    wait_for(lambda: health(b) == SERVING, timeout=5, what="agent b SERVING")
    assert value(metrics(b), "metaload_health_serving") == 1
    a.stop()
    start = time.monotonic()
    wait_for(lambda: health(b) == NOT_SERVING, timeout=10, what="agent b NOT_SERVING")
    # Its next join (every 2 s) fails, and the health service says so within a second.
    assert time.monotonic() - start < 4.5
    assert value(metrics(b), "metaload_health_serving") == 0
    assert f"health: NOT_SERVING (the last join of coordinator {a.address} failed)" in b.logs()
    a.restart()
    wait_for(lambda: health(b) == SERVING, timeout=10, what="agent b SERVING again")
    assert b.logs().count("health: SERVING") == 2


def test_health_needs_no_token_and_every_other_method_still_does(tmp_path, daemons):
    token = tmp_path / "admin.token"
    token.write_text("secret-health-token\n")
    root = tmp_path / "root"
    root.mkdir()
    a = daemons("a", [root], extra=[f"auth_token_file: {token}"])
    assert health(a) == SERVING
    env = {k: v for k, v in os.environ.items() if not k.startswith("METALOAD_TOKEN")}
    refused = subprocess.run([str(JOIN_PROBE), a.address, "status", "1"], capture_output=True, text=True,
                             timeout=30, env=env, check=True).stdout
    code, _, message = refused.rstrip("\n").split(" ", 2)
    assert (code, message) == ("UNAUTHENTICATED", "a: no token: this metad requires `authorization: Bearer <token>` "
                                                  "on every call (metactl --token-file, or METALOAD_TOKEN_FILE)")
    allowed = subprocess.run([str(JOIN_PROBE), a.address, "status", "1"], capture_output=True, text=True,
                             timeout=30, env=dict(env, METALOAD_TOKEN_FILE=str(token)), check=True).stdout
    assert allowed.startswith("OK "), allowed
    assert metactl("status", "--daemon", a.address, env=env).returncode != 0
