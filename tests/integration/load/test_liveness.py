"""Members that stop answering, and members that stop cleanly (issue 12).

A node cut off from the coordinator (its link set down inside its network namespace) is shown
"down" by `metactl status` within member_timeout and left out of new plans; it is back once
its link is. A daemon stopped with SIGTERM leaves at once ("left"), exits 0, and a stream it
was serving is given shutdown_grace to finish.
"""
import json
import signal
import subprocess
import time

from checkpoints import llama_like_tensors, save_sharded
from conftest import metactl, wait_for


def member_states(address, prefix=()):
    out = metactl("status", "--daemon", address, "--format", "json", prefix=prefix, check=0).stdout
    return {m["node"]["name"]: m for m in json.loads(out).get("member_states", [])}


def plan_nodes(model, address, prefix=()):
    """The nodes holding ranks in the plan the coordinator gives now (every GPU of the live members)."""
    out = metactl("plan", model, "--daemon", address, "--format", "json", prefix=prefix, check=0).stdout
    return sorted({r["node"] for r in json.loads(out)["ranks"]})


def test_a_node_cut_off_is_marked_down_within_the_timeout_and_left_out_of_plans(tmp_path, daemons, two_hosts):
    ha, hb = two_hosts["a"], two_hosts["b"]
    root = tmp_path / "shared"
    ckpt = save_sharded(llama_like_tensors(layers=2), root / "tiny", shards=2)
    a = daemons("a", [root], gpus=1, host=ha["addr"], prefix=ha["prefix"], extra=["member_timeout: 2s"])
    b = daemons("b", [root], gpus=1, host=hb["addr"], prefix=hb["prefix"], coordinator=a.address)
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, prefix=ha["prefix"], check=0)
    wait_for(lambda: member_states(a.address, ha["prefix"]).get("b", {}).get("state") == "up", what="b to join")
    assert plan_nodes("tiny", a.address, ha["prefix"]) == ["a", "b"]

    cut = time.monotonic()
    r = subprocess.run(["ip", "-n", hb["ns"], "link", "set", hb["dev"], "down"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # b re-joins every 2 s, so it was last seen at most 2 s before the cut; 2 s timeout after that.
    wait_for(lambda: member_states(a.address, ha["prefix"])["b"]["state"] == "down", timeout=6,
             what="b to be marked down")
    marked_down_s = time.monotonic() - cut
    states = member_states(a.address, ha["prefix"])
    assert states["b"]["state"] == "down" and int(states["b"]["last_seen_ms"]) >= 2000, states["b"]
    assert states["a"]["state"] == "up"
    assert plan_nodes("tiny", a.address, ha["prefix"]) == ["a"], "a down member must not be planned on"
    table = metactl("status", "--daemon", a.address, prefix=ha["prefix"], check=0).stdout
    assert "members (1 up of 2):" in table
    [row_b] = [line for line in table.splitlines() if line.split()[:2] == ["b", "down"]]
    print(f"link down -> marked down: {marked_down_s:.2f} s (member_timeout 2 s, re-join every 2 s)")

    r = subprocess.run(["ip", "-n", hb["ns"], "link", "set", hb["dev"], "up"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: member_states(a.address, ha["prefix"])["b"]["state"] == "up", timeout=8,
             what="b to re-join once its link is up")
    assert plan_nodes("tiny", a.address, ha["prefix"]) == ["a", "b"]


def test_a_daemon_stopped_with_sigterm_leaves_at_once_and_exits_zero(tmp_path, daemons):
    root = tmp_path / "shared"
    root.mkdir()
    # A long member_timeout: only leaving can take b out of plans within the test.
    a = daemons("a", [root], gpus=1, extra=["member_timeout: 1h"])
    b = daemons("b", [root], gpus=1, coordinator=a.address)
    wait_for(lambda: member_states(a.address).get("b", {}).get("state") == "up", what="b to join")
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(timeout=10) == 0
    state = member_states(a.address)["b"]
    assert state["state"] == "left", state
    log = b.logs()
    assert "left the cluster: new plans no longer list this node" in log
    assert "streams in flight get up to 30s (shutdown_grace) to finish" in log
    assert "node b left (it is stopping)" in a.logs()
