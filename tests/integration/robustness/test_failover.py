"""Reading through faults (issue 12): a daemon dies mid-stream, and the rank's load still
completes bit-exact from the other daemon serving the same files, resuming where the broken
stream stopped; a daemon that hangs (SIGSTOP) is given up after --stall-timeout; with no other
server the rank fails naming tensor, file and error; a daemon restarted on the same port is
used again.

Three nodes: "rank-node" (the coordinator; it cannot read the checkpoint) holds the rank;
"server-a" and "server-b" serve the same root folder. The rank streams (--source stream) ~400 MB.
server-a, the first server the coordinator lists to rank 0 (loads tie at 0: the rank rotation
puts a first), is metad_faulty, the test binary, with the fault hook METALOAD_TEST_KILL_AFTER_BYTES
armed: it SIGKILLs itself after sending 100 MB.
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

import pytest
from safetensors import safe_open

from checkpoints import tensor_sha256
from conftest import METACTL, METAD_FAULTY, free_port, metactl, wait_for

KILL_AFTER_BYTES = 100_000_000


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """~400 MB of synthetic Llama-shaped safetensors (metactl synth), and each tensor's sha256 as
    the safetensors library reads it (the oracle)."""
    root = tmp_path_factory.mktemp("storage")
    ckpt = root / "synth-400mb"
    metactl("synth", ckpt, "--layers", "12", "--shard-size", "100MB", check=0, timeout=300)
    digests, total = {}, 0
    for file in sorted(ckpt.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                t = f.get_tensor(name)
                digests[name] = tensor_sha256(t)
                total += t.numel() * t.element_size()
    assert total > 350_000_000, total
    return {"root": root, "ckpt": ckpt, "digests": digests, "total": total}


def start_cluster(tmp_path, daemons, checkpoint, servers):
    """The coordinator (the rank's node, blind to the checkpoint) and `servers`: {name: kwargs}."""
    empty = tmp_path / "storage-rank-node"
    empty.mkdir()
    coordinator = daemons("rank-node", [empty], gpus=1)
    started = {name: daemons(name, [checkpoint["root"]], gpus=1, coordinator=coordinator.address, **kwargs)
               for name, kwargs in servers.items()}
    wait_for(lambda: all(f"{n} " in metactl("status", "--daemon", coordinator.address).stdout for n in servers),
             timeout=20, what="the servers to join")
    first = next(iter(started.values()))
    metactl("register", "big", "--checkpoint", checkpoint["ckpt"], "--daemon", first.address, check=0, timeout=120)
    plan = json.loads(metactl("plan", "big", "--daemon", coordinator.address, "--gpus", "1", "--format", "json",
                              check=0).stdout)
    assert plan["ranks"][0]["node"] == "rank-node", "rank 0 must be on the node that cannot read the files"
    return coordinator, started


def start_rank(tmp_path, coordinator, timeout_s=120, extra=()):
    report = tmp_path / "report.json"
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    proc = subprocess.Popen([str(METACTL), "load", "big", "--daemon", coordinator.address, "--source", "stream",
                             "--report", str(report), "--timeout", str(timeout_s), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return proc, report


def finish(proc, timeout=180):
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out, err, time.monotonic()


def watch_death(daemon):
    """A thread that records when `daemon` exits, and how."""
    seen = {}

    def wait():
        daemon.proc.wait()
        seen["at"] = time.monotonic()
        seen["rc"] = daemon.proc.returncode

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return seen, thread


def bytes_served(daemon):
    return int(json.loads(metactl("status", "--daemon", daemon.address, "--format", "json", check=0).stdout)
               ["bytes_served"])


def killed_at_bytes(daemon):
    """What the fault hook wrote just before SIGKILL: the bytes it had counted as sent."""
    match = re.search(r"METALOAD_TEST_KILL_AFTER_BYTES: (\d+) bytes served; SIG(KILL|TERM)", daemon.logs())
    assert match, daemon.logs()[-2000:]
    return int(match.group(1))


def check_bit_exact(report, checkpoint):
    stored = [t for t in report["tensors"] if not t["source"].startswith("buffer:")]  # rotary inv_freq
    assert {t["name"] for t in stored} == set(checkpoint["digests"])
    for t in stored:
        assert t["filled"], t
        assert t["sha256"] == checkpoint["digests"][t["name"]], f"bytes of {t['name']} differ from the source"
    assert report["bytes_read"] == checkpoint["total"]


def test_a_daemon_killed_mid_stream_fails_over_to_the_other_bit_exact(tmp_path, daemons, checkpoint):
    coordinator, servers = start_cluster(tmp_path, daemons, checkpoint, {
        "server-a": {"faulty": True, "env": {"METALOAD_TEST_KILL_AFTER_BYTES": str(KILL_AFTER_BYTES)}},
        "server-b": {}})
    a, b = servers["server-a"], servers["server-b"]
    assert "TEST FAULT ARMED" in a.logs()
    death, _ = watch_death(a)
    proc, report_path = start_rank(tmp_path, coordinator)
    out, err, done_at = finish(proc)
    assert proc.returncode == 0, f"rank exited {proc.returncode}\n{out}\n{err}"
    wait_for(lambda: "rc" in death, timeout=5, what="server-a's exit")
    assert death["rc"] == -9, "server-a must have died of SIGKILL (its fault hook)"
    report = json.loads(report_path.read_text())
    check_bit_exact(report, checkpoint)

    # Which items failed over, from which server to which: in the report and the summary line.
    moved = [t for t in report["tensors"] if t.get("failovers")]
    assert moved, report["failovers"]
    for t in moved:
        for e in t["failovers"]:
            assert (e["from"], e["to"]) == ("server-a", "server-b"), e
        assert t["source"].startswith("stream:"), t["source"]
        assert set(t["source"][len("stream:"):].split("+")) <= {"server-a", "server-b"}, t["source"]
    assert len(report["failovers"]) >= len(moved)
    assert all(re.match(r"\S+: from server server-a at byte \d+: .+ -> server server-b$", line)
               for line in report["failovers"]), report["failovers"]
    summary = f"rank 0: {len(moved)} item{'s' if len(moved) > 1 else ''} failed over from server-a to server-b"
    assert summary in out, out
    assert "verified" in out

    # Nothing is read twice: every byte server-b sent was kept; what server-a sent after the
    # last byte the rank received was lost with the connection.
    by_node = report["streamed_bytes_by_node"]
    assert by_node["server-a"] + by_node["server-b"] == checkpoint["total"]
    assert by_node["server-a"] <= killed_at_bytes(a)
    re_read = bytes_served(b) - by_node["server-b"]
    assert re_read == 0, f"server-b sent {re_read} bytes the rank did not keep"
    print("\n" + out.strip() + "\n" + "\n".join(report["failovers"]))
    first_failover_s = min(e["after_s"] for t in moved for e in t["failovers"])
    print(f"\nfailover: server-a SIGKILLed after {killed_at_bytes(a)} bytes sent; rank kept "
          f"{by_node['server-a']} from it ({killed_at_bytes(a) - by_node['server-a']} in flight, lost), "
          f"{by_node['server-b']} from server-b, {re_read} bytes re-read; {len(moved)} items failed over\n"
          f"failover: kill -> load complete {report['seconds'] - first_failover_s:.3f} s (rank's clock: first "
          f"broken stream -> every byte in place); kill -> rank exited {done_at - death['at']:.3f} s "
          f"(verification included); whole load {report['seconds']:.3f} s = "
          f"{checkpoint['total'] / report['seconds'] / 1e6:.0f} MB/s")


def test_a_daemon_stopped_with_sigterm_mid_stream_finishes_its_streams_and_hands_off(tmp_path, daemons, checkpoint):
    """SIGTERM (the fault hook sends it after 100 MB): server-a leaves the cluster, finishes the
    streams in flight within shutdown_grace, refuses new ones, and exits 0; the rank gets every
    byte server-a had sent (nothing lost in flight, unlike SIGKILL) and the rest from server-b."""
    coordinator, servers = start_cluster(tmp_path, daemons, checkpoint, {
        "server-a": {"faulty": True, "env": {"METALOAD_TEST_KILL_AFTER_BYTES": str(KILL_AFTER_BYTES),
                             "METALOAD_TEST_KILL_SIGNAL": "SIGTERM"},
                     "extra": ["shutdown_grace: 20s"]},
        "server-b": {}})
    a = servers["server-a"]
    death, _ = watch_death(a)
    proc, report_path = start_rank(tmp_path, coordinator)
    out, err, done_at = finish(proc)
    assert proc.returncode == 0, f"rank exited {proc.returncode}\n{out}\n{err}"
    wait_for(lambda: "rc" in death, timeout=25, what="server-a's exit")
    assert death["rc"] == 0, f"server-a must exit 0 after SIGTERM:\n{a.logs()[-2000:]}"
    log = a.logs()
    assert re.search(r"stopping on signal 15: [1-9]\d* streams in flight get up to 20s", log), log[-2000:]
    assert "left the cluster: new plans no longer list this node" in log
    stopped = float(re.search(r"stopped after ([\d.]+) s", log).group(1))
    assert stopped < 20, "the streams in flight finished before the grace period ended"
    report = json.loads(report_path.read_text())
    check_bit_exact(report, checkpoint)
    by_node = report["streamed_bytes_by_node"]
    assert by_node["server-a"] >= killed_at_bytes(a), "streams in flight at SIGTERM must finish, not be cut"
    assert by_node["server-a"] + by_node["server-b"] == checkpoint["total"]
    moved = [t for t in report["tensors"] if t.get("failovers")]
    assert moved and all(e["from"] == "server-a" and e["to"] == "server-b" for t in moved for e in t["failovers"])
    status = json.loads(metactl("status", "--daemon", coordinator.address, "--format", "json", check=0).stdout)
    assert {m["node"]["name"]: m["state"] for m in status["member_states"]}["server-a"] == "left"
    print(f"\nsigterm: server-a sent {killed_at_bytes(a)} bytes by SIGTERM, the rank kept {by_node['server-a']} "
          f"from it; it stopped {stopped:.2f} s after the signal; {len(moved)} items handed off to server-b")


MATERIALIZE = r"""
import json, sys
import torch
import metaload
from transformers import AutoConfig, AutoModelForCausalLM
from checkpoints import tensor_sha256

ckpt, daemon, out = sys.argv[1:4]
with torch.device("meta"):
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ckpt), dtype=torch.bfloat16)
report = metaload.materialize(model, "big", daemon=daemon, source="stream")
digests = {n: tensor_sha256(t) for n, t in model.state_dict().items()}
json.dump({"digests": digests, "failovers": report.failovers, "summary": str(report)}, open(out, "w"))
"""


def test_python_materialize_fails_over_and_reports_it(tmp_path, daemons, checkpoint):
    # The Python package's path (GetLayout, the module decides what to read) fails over too,
    # and its LoadReport says so.
    import transformers  # noqa: F401  pinned in scripts/requirements.txt: missing is a failure, never a skip
    coordinator, servers = start_cluster(tmp_path, daemons, checkpoint, {
        "server-a": {"faulty": True, "env": {"METALOAD_TEST_KILL_AFTER_BYTES": str(KILL_AFTER_BYTES)}},
        "server-b": {}})
    script, out = tmp_path / "materialize.py", tmp_path / "materialized.json"
    script.write_text(MATERIALIZE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(pathlib.Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")) if p))
    proc = subprocess.run([sys.executable, str(script), str(checkpoint["ckpt"]), coordinator.address, str(out)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    servers["server-a"].proc.wait(timeout=10)
    assert servers["server-a"].proc.returncode == -9
    seen = json.loads(out.read_text())
    for name, digest in checkpoint["digests"].items():
        assert seen["digests"][name] == digest, f"bytes of {name} differ from the source"
    assert seen["failovers"], seen["summary"]
    assert all(" from server server-a at byte " in line and line.endswith("-> server server-b")
               for line in seen["failovers"]), seen["failovers"]
    assert "failed over" in seen["summary"], seen["summary"]
    print(f"\nmaterialize: {seen['summary']}")


def test_a_hung_daemon_is_given_up_after_the_stall_timeout(tmp_path, daemons, checkpoint):
    # SIGSTOP instead of SIGKILL: the daemon keeps its connections open and sends nothing, as a
    # host that vanished without a reset. The rank's streams from it stall, and after
    # --stall-timeout they resume on server-b.
    coordinator, servers = start_cluster(tmp_path, daemons, checkpoint, {
        "server-a": {"faulty": True, "env": {"METALOAD_TEST_KILL_AFTER_BYTES": str(KILL_AFTER_BYTES),
                             "METALOAD_TEST_KILL_SIGNAL": "SIGSTOP"}},
        "server-b": {}})
    a = servers["server-a"]
    try:
        proc, report_path = start_rank(tmp_path, coordinator, extra=("--stall-timeout", "2"))
        out, err, done_at = finish(proc)
        assert proc.returncode == 0, f"rank exited {proc.returncode}\n{out}\n{err}"
        report = json.loads(report_path.read_text())
        check_bit_exact(report, checkpoint)
        events = [e for t in report["tensors"] for e in t.get("failovers", [])]
        assert events, report
        for e in events:
            assert (e["from"], e["to"]) == ("server-a", "server-b"), e
            assert "no byte for 2s" in e["error"], e
        assert "failed over from server-a to server-b" in out
        print(f"\nhung daemon: {len(events)} streams given up after 2 s without a byte; load {report['seconds']:.2f} s")
    finally:
        a.kill9()  # it is stopped: SIGTERM would wait


def test_with_the_only_server_killed_the_rank_fails_naming_tensor_file_and_error(tmp_path, daemons, checkpoint):
    coordinator, servers = start_cluster(tmp_path, daemons, checkpoint, {
        "server-a": {"faulty": True, "env": {"METALOAD_TEST_KILL_AFTER_BYTES": str(KILL_AFTER_BYTES)}}})
    a = servers["server-a"]
    started = time.monotonic()
    proc, report_path = start_rank(tmp_path, coordinator)
    out, err, done_at = finish(proc)
    a.proc.wait(timeout=10)
    assert a.proc.returncode == -9
    assert proc.returncode == 3, f"exit code 3 (verification failed) expected, got {proc.returncode}\n{out}\n{err}"
    report = json.loads(report_path.read_text())
    unfilled = [t for t in report["tensors"] if not t["filled"]]
    assert unfilled
    for t in unfilled:
        # The tensor, its file and the server's error, in the rank's report and on stderr.
        assert re.search(r"streaming /\S+\.safetensors \[", t["error"]), t["error"]
        assert t["error"].startswith("every source failed (") and "server-a: " in t["error"], t["error"]
        assert f"from {a.address}" in t["error"], t["error"]
        assert f"{t['name']}: not filled: every source failed" in err or "more findings cut" in err, err
    assert "every source failed" in err and f"from {a.address}" in err, err
    print("\n" + "\n".join(err.strip().splitlines()[:4]))
    print(f"\nonly server killed: {len(unfilled)} tensors unfilled; rank exited 3 after {done_at - started:.2f} s")


def test_a_daemon_restarted_on_the_same_port_is_used_again(tmp_path, daemons, checkpoint):
    port = free_port()
    coordinator, servers = start_cluster(tmp_path, daemons, checkpoint, {
        "server-a": {"faulty": True, "env": {"METALOAD_TEST_KILL_AFTER_BYTES": str(KILL_AFTER_BYTES)}, "port": port}})
    a = servers["server-a"]
    restarted = {}

    def restart_when_dead():
        a.proc.wait()
        restarted["killed_at"] = time.monotonic()
        a.restart(env={})  # the fault hook disarmed
        restarted["up_at"] = time.monotonic()

    thread = threading.Thread(target=restart_when_dead, daemon=True)
    thread.start()
    proc, report_path = start_rank(tmp_path, coordinator)
    out, err, done_at = finish(proc)
    thread.join(timeout=30)
    assert proc.returncode == 0, f"rank exited {proc.returncode}\n{out}\n{err}"
    report = json.loads(report_path.read_text())
    check_bit_exact(report, checkpoint)
    events = [e for t in report["tensors"] for e in t.get("failovers", [])]
    assert events and all((e["from"], e["to"]) == ("server-a", "server-a") for e in events), events
    served_after_restart = bytes_served(a)
    assert served_after_restart > 0 and a.address.endswith(f":{port}")
    assert report["streamed_bytes_by_node"]["server-a"] == checkpoint["total"]
    print(f"\nrestart: server-a back {restarted['up_at'] - restarted['killed_at']:.2f} s after SIGKILL, served "
          f"{served_after_restart} more bytes; load complete {done_at - restarted['killed_at']:.2f} s after the kill")


@pytest.mark.parametrize("env", [{"METALOAD_TEST_KILL_AFTER_BYTES": "100MB"},
                                 {"METALOAD_TEST_KILL_AFTER_BYTES": "0"},
                                 {"METALOAD_TEST_KILL_AFTER_BYTES": "1000", "METALOAD_TEST_KILL_SIGNAL": "SIGINT"}])
def test_a_malformed_fault_hook_refuses_to_start(tmp_path, env):
    # A fault hook that does not say exactly what to do is refused, not ignored: a test that
    # believes it armed one must not pass against a daemon that never dies.
    config = tmp_path / "node.yaml"
    config.write_text(f"node: x\nlisten: 127.0.0.1:0\ngpus: 1\ngpu_memory: 1GiB\nroots: [{tmp_path}]\n")
    proc = subprocess.run([str(METAD_FAULTY), "--node-config", str(config)], capture_output=True, text=True,
                          timeout=30, env=dict(os.environ, **env))
    assert proc.returncode == 2, proc
    assert "METALOAD_TEST_KILL_" in proc.stderr and "listening" not in proc.stdout, proc.stderr
