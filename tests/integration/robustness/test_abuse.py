"""Under load and abuse (issue 13 §4): one real metad serving 32 rank processes at once; 100
clients killed with SIGKILL mid-stream, one after another, after which the daemon's descriptors,
threads and memory are back where they were; garbage and HTTP/1.1 on its gRPC port; a daemon
whose handshake is slow. Each is followed by a bit-exact load or a call that must still work.
The gRPC-level abuse (a megabyte of metadata, bytes that are no protobuf, overflowing offsets,
chunk sizes) is tests/daemon/malformed_traffic_test.cc.

Every read is of a registered model's file, inside its tensors' bytes. The numbers measured are
printed (pytest -s shows them).
"""
import json
import signal
import socket
import subprocess
import threading
import time

import pytest

from checkpoints import header_offsets, llama_like_config, llama_like_tensors, save_sharded
from conftest import BUILD_DIR, METACTL, SANITIZED, metactl, proc_status, wait_for
from ranks import check_reports, run_ranks

HELD_STREAM_CLIENT = BUILD_DIR / "tests" / "held_stream_client"

# 32 ranks x 2 read threads stream at once; each stream holds at most two 1 MiB chunks
# (daemon/serving/read_range/range_writer.h), so 128 MiB would be every stream full, plus gRPC's buffers.
# Measured on the 2-core test VM: 126 MiB idle (a registered model), 142 MiB at the peak.
MAX_DAEMON_GROWTH_32_RANKS_BYTES = 256 << 20
def daemon_status(daemon):
    return json.loads(metactl("status", "--daemon", daemon.address, "--format", "json", check=0).stdout)


def load_one_rank(tmp_path, daemon, model, tensors, tag):
    """One `metactl load --source stream` of the whole model, checked bit-exact."""
    (tmp_path / tag).mkdir()
    results = run_ranks(tmp_path / tag, model, [daemon], extra=["--source", "stream"], timeout=180)
    check_reports(results, tensors)


@pytest.fixture
def big_model(tmp_path, daemons):
    """A daemon with one registered ~70 MB model whose largest tensor is 32 MiB."""
    root = tmp_path / "storage"
    tensors = llama_like_tensors(layers=2, hidden=1024, intermediate=2816, vocab=16384)
    ckpt = save_sharded(tensors, root / "big", shards=2)
    daemon = daemons("a", [root], gpus=1)
    metactl("register", "big", "--checkpoint", ckpt, "--daemon", daemon.address, check=0)
    return {"daemon": daemon, "ckpt": ckpt, "tensors": tensors}


def test_32_ranks_streaming_from_one_daemon_load_bit_exact(tmp_path, daemons):
    world = 32
    root = tmp_path / "storage"
    # 32 layers: the layers strategy gives each rank about one (~1.4 MB) and the embeddings.
    tensors = llama_like_tensors(layers=world, hidden=256, intermediate=704, vocab=512, kv=64)
    ckpt = save_sharded(tensors, root / "llama-32", shards=4)
    daemon = daemons("a", [root], gpus=world)
    metactl("register", "llama-32", "--checkpoint", ckpt, "--daemon", daemon.address, check=0)
    idle = proc_status(daemon.proc.pid)
    start = time.monotonic()
    results = run_ranks(tmp_path, "llama-32", [daemon] * world, extra=["--source", "stream"], timeout=300,
                        load_timeout=240)
    seconds = time.monotonic() - start
    check_reports(results, tensors)
    for rank, (rc, out, err, report) in enumerate(results):
        assert {t["source"] for t in report["tensors"]} == {"stream:a"}, rank
        assert f"verified (gloo): 0 tensors on meta or unfilled across {world} ranks" in out, out
    after = proc_status(daemon.proc.pid)
    rank_peak = max(r[3]["rss_peak_bytes"] for r in results)
    print(f"\n32 ranks: {seconds:.1f} s; daemon RSS idle {idle['VmRSS'] >> 20} MiB, peak (VmHWM) "
          f"{after['VmHWM'] >> 20} MiB; largest rank peak RSS {rank_peak >> 20} MiB")
    if not SANITIZED:
        assert after["VmHWM"] - idle["VmRSS"] < MAX_DAEMON_GROWTH_32_RANKS_BYTES, (idle, after)


def held_stream(daemon, model, path, begin, end):
    """Starts a held_stream_client and waits until its first chunk arrived."""
    proc = subprocess.Popen([str(HELD_STREAM_CLIENT), daemon.address, model, str(path), str(begin), str(end - begin)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("streaming "):
        proc.kill()
        proc.wait()
        raise AssertionError(f"held_stream_client got no chunk: {line!r} {proc.stderr.read()}")
    return proc


def within(value, baseline, fraction):
    return abs(value - baseline) <= max(1, baseline * fraction)


def test_100_clients_killed_mid_stream_leave_nothing_behind(tmp_path, big_model):
    daemon = big_model["daemon"]
    file = sorted(big_model["ckpt"].glob("*.safetensors"))[0]
    name, (begin, end) = max(header_offsets(file).items(), key=lambda kv: kv[1][1] - kv[1][0])
    assert end - begin >= 32 << 20, (name, begin, end)
    # Warm-up: one whole load and one killed stream, so that lazily made pools and threads count.
    load_one_rank(tmp_path, daemon, "big", big_model["tensors"], "warm")
    proc = held_stream(daemon, "big", file, begin, end)
    proc.kill()
    proc.wait()
    wait_for(lambda: daemon_status(daemon).get("streams_in_flight", 0) == 0, timeout=20, what="no stream in flight")
    baseline = proc_status(daemon.proc.pid)
    served_before = int(daemon_status(daemon)["bytes_served"])
    start = time.monotonic()
    for _ in range(100):
        proc = held_stream(daemon, "big", file, begin, end)
        proc.kill()  # SIGKILL: no goodbye on the connection
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    seconds = time.monotonic() - start
    wait_for(lambda: daemon_status(daemon).get("streams_in_flight", 0) == 0, timeout=30,
             what="the killed clients' streams to end")
    # The daemon notices a reset connection at once, but lets its threads and buffers go
    # as their jobs finish: give it a moment to settle.
    # gRPC's thread pool shrinks back on its own schedule, after the descriptors (seen under
    # ctest -j2): both are waited for, and asserted below.
    def settled():
        now = proc_status(daemon.proc.pid)
        return within(now["fds"], baseline["fds"], 0.10) and within(now["Threads"], baseline["Threads"], 0.10)

    wait_for(settled, timeout=30, what="descriptors and threads back to the baseline")
    after = proc_status(daemon.proc.pid)
    served = int(daemon_status(daemon)["bytes_served"]) - served_before
    print(f"\n100 kills in {seconds:.1f} s ({served >> 20} MiB served to them); fds {baseline['fds']} -> "
          f"{after['fds']}, threads {baseline['Threads']} -> {after['Threads']}, RSS {baseline['VmRSS'] >> 20} -> "
          f"{after['VmRSS'] >> 20} MiB (peak {after['VmHWM'] >> 20} MiB)")
    assert served > 0
    assert within(after["fds"], baseline["fds"], 0.10), (baseline, after)
    assert within(after["Threads"], baseline["Threads"], 0.10), (baseline, after)
    if not SANITIZED:  # ASan keeps freed memory resident: RSS is asserted in the plain build
        assert within(after["VmRSS"], baseline["VmRSS"], 0.10), (baseline, after)
    load_one_rank(tmp_path, daemon, "big", big_model["tensors"], "after")


def closed_by_peer(sock, timeout_s):
    """True if the daemon closes the connection (EOF or reset) within timeout_s; the bytes it
    sent before are returned too."""
    sock.settimeout(timeout_s)
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except ConnectionResetError:
        pass
    except socket.timeout:
        return False, received
    return True, received


MALFORMED_PAYLOADS = {
    "garbage": bytes(range(256)) * 64,
    "HTTP/1.1": b"GET / HTTP/1.1\r\nHost: metad\r\n\r\n",  # a browser, a load balancer's health check
    "the HTTP/2 preface, then garbage frames": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 4096,
}


def test_malformed_bytes_on_the_grpc_port_are_dropped_and_others_still_served(tmp_path, daemons):
    root = tmp_path / "storage"
    ckpt = save_sharded(llama_like_tensors(layers=1), root / "tiny", shards=1)
    daemon = daemons("a", [root], gpus=1)
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", daemon.address, check=0)
    host, port = daemon.address.rsplit(":", 1)
    before = proc_status(daemon.proc.pid)
    for what, payload in MALFORMED_PAYLOADS.items():
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(payload)
            closed, _ = closed_by_peer(sock, 15)
        assert closed, f"the daemon kept a connection that sent {what} open"
        # Others are still served.
        metactl("plan", "tiny", "--daemon", daemon.address, "--gpus", "1", check=0)
        assert daemon.proc.poll() is None, what
    wait_for(lambda: proc_status(daemon.proc.pid)["fds"] <= before["fds"] + 2, timeout=10,
             what="the dropped connections' descriptors to be closed")


def slow_proxy(upstream, delay_s):
    """A loopback TCP proxy to `upstream` that holds the daemon's first bytes back for delay_s on
    each connection, as a loaded or distant daemon would. Returns (address, stop)."""
    listener = socket.create_server(("127.0.0.1", 0))
    host, port = upstream.rsplit(":", 1)
    open_sockets = [listener]

    def pump(src, dst, delay):
        try:
            time.sleep(delay)
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def serve():
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection((host, int(port)))
            open_sockets.extend([client, server])
            threading.Thread(target=pump, args=(client, server, 0), daemon=True).start()
            threading.Thread(target=pump, args=(server, client, delay_s), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()

    def stop():
        for s in open_sockets:
            s.close()

    return f"127.0.0.1:{listener.getsockname()[1]}", stop


def test_a_daemon_slow_to_finish_the_handshake_is_still_reached(tmp_path, daemons):
    # The client's connect timeout was 100 ms (gRPC takes it from min_reconnect_backoff_ms):
    # 2 of 32 ranks starting at once on a loaded host failed "connection attempt timed out before
    # receiving SETTINGS frame". 1.5 s is a loaded daemon, or a TLS handshake over a long link.
    root = tmp_path / "storage"
    ckpt = save_sharded(llama_like_tensors(layers=1), root / "tiny", shards=1, config=llama_like_config(layers=1))
    daemon = daemons("a", [root], gpus=1)
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", daemon.address, check=0)
    address, stop = slow_proxy(daemon.address, 1.5)
    try:
        proc = metactl("plan", "tiny", "--daemon", address, "--gpus", "1", timeout=60)
        assert proc.returncode == 0, proc.stderr
    finally:
        stop()


def test_sigterm_stops_metad_within_shutdown_grace_while_registrations_block_on_their_disk(tmp_path, daemons):
    """Issue 23: registrations hashing a checkpoint on a slow disk kept metad running past 30 s
    after SIGTERM. A read in progress cannot be interrupted, so what still runs 1 s past
    shutdown_grace is not waited for: metad logs it and exits."""
    root = tmp_path / "storage"
    ckpt = save_sharded(llama_like_tensors(), root / "slow", shards=1)
    # Every read of the shard sleeps 60 s first: each --digest registration blocks on it.
    d = daemons("a", [root], extra=["shutdown_grace: 2s"], faulty=True,
                env={"METALOAD_TEST_SLOW_READS": ".safetensors=60000"})
    registering = [subprocess.Popen([str(METACTL), "register", f"slow-{i}", "--checkpoint", str(ckpt), "--digest",
                                     "--daemon", d.address, "--timeout", "120"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(6)]
    try:
        time.sleep(1.5)  # each is blocked in its first read of the shard now
        assert "registered slow" not in d.logs()
        start = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        rc = d.proc.wait(timeout=20)
        stopped_s = time.monotonic() - start
        assert rc == 0, d.logs()
        assert stopped_s < 2 + 1 + 2, f"stopped {stopped_s:.1f} s after SIGTERM with shutdown_grace 2 s"
        assert "after shutdown_grace (a registration or read blocked on its disk?): exiting now" in d.logs()
    finally:
        for p in registering:
            p.kill()
            p.wait()
