"""Logs that tell the story (issue 37, docs/running-a-cluster.md, "Logs"): real daemons, a real rank.

- A streamed load with a failover: the coordinator a (metad_faulty, METALOAD_TEST_CORRUPT_CHUNKS=1:
  the first chunk it serves is corrupted in flight; its reads slowed so that the stream is still
  running when the rank cancels it) logs the load begun when rank 0 asks its
  plan, the stream the rank cut short, and the load ended once it has been quiet for 2 s; the
  rank's own line says it failed over from a to b; b logs the load it served. In text, then the
  same story as JSON lines (log_format: json) whose every line parses.
- A member that joins, is killed (down after member_timeout), comes back and stops: up, down,
  up, left, in that order.
- No secret in any line: with a token and a secret file beside the weights, after
  registrations, a streamed load with a failover and calls refused for a wrong token, neither
  the token, the secret file's content nor a tensor's bytes appear in any daemon's log or any
  metactl output; the refusals are logged with their reason.
"""
import json
import re
import secrets

import torch

from checkpoints import save_sharded
from conftest import metactl, wait_for
from ranks import run_ranks

TIME = r"\d\d:\d\d:\d\d\.\d{3}"
# The coordinator a corrupts the first chunk it serves, and reads each chunk 20 ms late: the rank
# cancels that stream long before a could have sent all of it, whatever the HTTP/2 windows.
FAULTY_A = {"METALOAD_TEST_CORRUPT_CHUNKS": "1", "METALOAD_TEST_SLOW_READS": ".safetensors=20"}
BIG = 32768 * 128 * 2  # one 8 MiB bf16 tensor: a stream of several 1 MiB chunks


def story_checkpoint(root, extra=None):
    """Two 8 MiB tensors in one file: the corrupted first chunk is one of many in its stream, so
    that the rank cuts that stream short (a one-chunk stream would already be whole)."""
    g = torch.Generator().manual_seed(0)
    tensors = {"model.embed_tokens.weight": torch.randn(32768, 128, generator=g).to(torch.bfloat16),
               "lm_head.weight": torch.randn(32768, 128, generator=g).to(torch.bfloat16), **(extra or {})}
    return save_sharded(tensors, root / "story", shards=1)


def text_lines(log, program="metad"):
    """(time, level, message) of every line of a text log."""
    out = []
    for line in log.splitlines():
        m = re.fullmatch(rf"{program} ([IWE]) ({TIME}) (.*)", line)
        if m:
            out.append((m.group(2), m.group(1), m.group(3)))
    return out


def find(lines, pattern):
    """Index and (time, level, message) of the one line whose message matches `pattern`."""
    found = [(i, line) for i, line in enumerate(lines) if re.fullmatch(pattern, line[2])]
    assert len(found) == 1, f"{len(found)} lines match {pattern!r}:\n" + "\n".join(m for _, _, m in lines)
    return found[0]


def start_story(tmp_path, daemons, extra=(), token_file=None):
    root = tmp_path / "storage"
    ckpt = story_checkpoint(root)
    a = daemons("a", [root], gpus=1, env=FAULTY_A, faulty=True, extra=extra)
    b = daemons("b", [root], gpus=1, coordinator=a.address, extra=extra)
    env = {"METALOAD_TOKEN_FILE": str(token_file)} if token_file else None
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address, env=env).stdout, what="b to join")
    metactl("register", "story", "--checkpoint", ckpt, "--daemon", a.address, env=env, check=0)
    return a, b, ckpt


def streamed_load(tmp_path, a, env=None):
    [(rc, out, err, report)] = run_ranks(tmp_path, "story", [a], extra=["--source", "stream", "--read-threads", "1"],
                                         env_of_rank={0: env or {}})
    assert rc == 0, f"exited {rc}\n{out}\n{err}"
    [moved] = [t for t in report["tensors"] if t.get("failovers")]
    assert [(e["from"], e["to"]) for e in moved["failovers"]] == [("a", "b")], moved
    return out, err


def test_a_load_with_a_failover_is_told_begun_failed_over_ended(tmp_path, daemons):
    a, b, ckpt = start_story(tmp_path, daemons)
    out, err = streamed_load(tmp_path, a)
    path = str(ckpt / "model-00001-of-00001.safetensors")
    wait_for(lambda: "load ended" in a.logs() and "load ended" in b.logs(), timeout=10, what="the loads to end")

    lines = text_lines(a.logs())
    i_begun, begun = find(lines, r"load begun: model story, 1 rank \(\w+\), 16\.00 MiB planned; rank 0 asked first, "
                                 r"from 127\.0\.0\.1")
    i_cut, cut = find(lines, r"stream cut short: model story, [\d.]+ (B|KiB|MiB) of 8\.00 MiB of " + re.escape(
        f'"{path}"') + r" sent to 127\.0\.0\.1: the reader went away \(it fails over to another server, or stopped\)")
    i_ended, ended = find(lines, r"load ended: model story, 1 of 1 rank asked their plans \(\w+, 16\.00 MiB planned\); "
                                 r"[\d.]+ (B|KiB|MiB) sent in 1 stream to 1 host \(1 cut short, 0 failed\); [\d.]+ s")
    assert i_begun < i_cut < i_ended
    assert (begun[1], cut[1], ended[1]) == ("I", "W", "I")

    rank = text_lines(err, program="metactl")
    _, failover = find(rank, r"failing over: " + re.escape(f'"{path}"') + rf" from a broke after 0 of {BIG} bytes "
                       r"\(checksum mismatch in .+\); resuming on b")
    assert failover[1] == "W"
    assert begun[0] <= failover[0] <= ended[0], (begun, failover, ended)
    assert "rank 0: 1 item failed over from a to b" in out, out

    served = text_lines(b.logs())
    find(served, r"load begun: model story, a stream to 127\.0\.0\.1")
    find(served, r"load ended: model story, no plan asked here; 16\.00 MiB sent in 2 streams to 1 host; [\d.]+ s")
    print("\n" + "\n".join(line for line in (a.logs() + err + b.logs()).splitlines()
                           if re.search(r"load (begun|ended)|stream cut short|failing over", line)))


def test_the_same_story_as_json_lines(tmp_path, daemons):
    a, b, ckpt = start_story(tmp_path, daemons, extra=["log_format: json"])
    streamed_load(tmp_path, a)
    wait_for(lambda: '"load_end"' in a.logs() and '"load_end"' in b.logs(), timeout=10, what="the loads to end")
    path = str(ckpt / "model-00001-of-00001.safetensors")
    for d in (a, b):
        for line in d.logs().splitlines():
            parsed = json.loads(line)  # every line: one JSON object
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", parsed["ts"]), line
            assert parsed["level"] in ("info", "warning", "error") and parsed["program"] == "metad", line
            assert isinstance(parsed["msg"], str) and parsed["msg"], line
    events = [json.loads(line) for line in a.logs().splitlines()]
    story = [e for e in events if e.get("event") in ("load_begin", "stream_cut", "load_end")]
    assert [e["event"] for e in story] == ["load_begin", "stream_cut", "load_end"], story
    begin, cut, end = story
    assert {k: begin[k] for k in ("model", "ranks", "planned_bytes", "rank", "host")} == {
        "model": "story", "ranks": 1, "planned_bytes": 2 * BIG, "rank": 0, "host": "127.0.0.1"}
    assert {k: cut[k] for k in ("model", "path", "length_bytes", "host", "reason", "count")} == {
        "model": "story", "path": path, "length_bytes": BIG, "host": "127.0.0.1", "reason": "the reader went away",
        "count": 1}
    assert 0 < cut["bytes"] <= BIG, cut
    assert {k: end[k] for k in ("model", "ranks", "ranks_asked", "planned_bytes", "streams", "streams_cut",
                                "streams_failed", "hosts")} == {
        "model": "story", "ranks": 1, "ranks_asked": 1, "planned_bytes": 2 * BIG, "streams": 1, "streams_cut": 1,
        "streams_failed": 0, "hosts": 1}
    assert end["bytes"] == cut["bytes"] and isinstance(end["seconds"], float), end
    assert begin["msg"].startswith("load begun: model story, 1 rank (") and end["msg"].startswith("load ended: ")
    [served] = [json.loads(line) for line in b.logs().splitlines() if '"load_end"' in line]
    assert (served["bytes"], served["streams"], served["ranks"]) == (2 * BIG, 2, 0), served
    print("\n" + "\n".join(json.dumps(e) for e in story) + "\n" + json.dumps(served))


def test_members_up_down_up_left_in_order(tmp_path, daemons):
    root = tmp_path / "storage"
    root.mkdir()
    a = daemons("a", [root], gpus=1, extra=["member_timeout: 1s"])
    b = daemons("b", [root], gpus=1, coordinator=a.address)
    wait_for(lambda: "node b joined" in a.logs(), what="b to join")
    b.kill9()
    wait_for(lambda: "node b is down" in a.logs(), timeout=6, what="b to be logged down")
    b.restart()
    wait_for(lambda: a.logs().count("node b joined") == 2, timeout=6, what="b to join again")
    assert b.stop() == 0
    wait_for(lambda: "node b left" in a.logs(), what="b's leaving")
    told = [m for _, _, m in text_lines(a.logs()) if m.startswith("node b ")]
    joined = r'node b joined from "ipv4:127\.0\.0\.1:\d+" as anonymous, serving at 127\.0\.0\.1:\d+'
    assert len(told) == 4, told
    assert re.fullmatch(joined, told[0]) and re.fullmatch(joined, told[2]), told
    assert told[1] == "node b is down: not heard from for 1s (member_timeout); new plans leave it out", told
    assert re.fullmatch(r'node b left \(it is stopping\), from "ipv4:127\.0\.0\.1:\d+" as anonymous', told[3]), told
    print("\n" + "\n".join(line for line in a.logs().splitlines() if " node b " in line))


def test_no_token_secret_or_tensor_bytes_in_any_line(tmp_path, daemons):
    token = secrets.token_hex(24)
    secret = "SECRET-" + secrets.token_hex(12)
    tensor_marker = "TENSORBYTES-" + secrets.token_hex(8)
    token_file = tmp_path / "cluster.token"
    token_file.write_text(token + "\n")
    wrong_file = tmp_path / "wrong.token"
    wrong_file.write_text("not-" + token + "\n")
    root = tmp_path / "storage"
    # A tensor whose very bytes spell the marker (bf16 as stored: a view of those bytes).
    marked = torch.frombuffer(bytearray((tensor_marker * 64).encode()), dtype=torch.bfloat16)
    ckpt = story_checkpoint(root, extra={"marker": marked})
    (ckpt / "secret.txt").write_text(secret + "\n")  # beside the weights, under the root

    auth = [f"auth_token_file: {token_file}"]
    a = daemons("a", [root], gpus=1, env=FAULTY_A, faulty=True, extra=auth)
    b = daemons("b", [root], gpus=1, coordinator=a.address, extra=auth)
    good = {"METALOAD_TOKEN_FILE": str(token_file)}
    wrong = {"METALOAD_TOKEN_FILE": str(wrong_file)}
    outputs = []

    def run(*args, env, check):
        proc = metactl(*args, env=env, check=check)
        outputs.extend([proc.stdout, proc.stderr])
        return proc

    wait_for(lambda: "b " in metactl("status", "--daemon", a.address, env=good).stdout, what="b to join")
    run("register", "story", "--checkpoint", ckpt, "--daemon", b.address, env=good, check=0)
    run("status", "--daemon", a.address, env=good, check=0)
    out, err = streamed_load(tmp_path, a, env=good)
    outputs.extend([out, err])
    refused = run("status", "--daemon", a.address, env=wrong, check=None)
    assert refused.returncode != 0 and "token refused" in refused.stderr, refused.stderr
    refused = run("register", "other", "--checkpoint", ckpt, "--daemon", b.address, env=wrong, check=None)
    assert refused.returncode != 0, refused.stderr
    run("plan", "story", "--daemon", a.address, "--gpus", "1", env=wrong, check=None)
    wait_for(lambda: "load ended" in a.logs(), timeout=10, what="the load to end")

    logs = a.logs() + b.logs()
    assert "refused a call: UNAUTHENTICATED: token refused: it is not this metad's auth_token_file" in logs, logs
    assert "failing over: " in err, err
    everything = logs + "".join(outputs)
    for what, marker in (("the token", token), ("the secret file's content", secret),
                         ("a tensor's bytes", tensor_marker)):
        assert marker not in everything, f"{what} appears in a log line or a metactl output"
