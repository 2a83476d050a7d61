"""`metactl load`'s progress (issue 37): with --progress every rank draws a line per record on
stderr, wherever stderr goes, and the last one's bytes are exactly its report's — split into
what it read directly, streamed from a daemon and received by fan-out. Unasked, nothing is
drawn where stderr is not a terminal; on a terminal (a pty here) the node's first rank redraws
one line in place and keeps the last.
"""
import os
import pty
import re
import subprocess

import pytest

from checkpoints import llama_like_config, llama_like_tensors, save_sharded
from conftest import METACTL, metactl, wait_for
from ranks import run_ranks

SIZE = r"\d+ B|\d+\.\d\d [KMGTPE]iB"
# rank R/W: DONE of TOTAL (P%), RATE MB/s, ETA S s | in S s; direct D, streamed S, received R; N/M tensors
LINE = re.compile(rf"rank (\d+)/(\d+): ({SIZE}) of ({SIZE}) \((\d+)%\), (\d+) MB/s, (ETA \d+\.\d s|ETA \?|in \d+\.\d\d s); "
                  rf"direct ({SIZE}), streamed ({SIZE}), received ({SIZE}); (\d+)/(\d+) tensors")


def format_bytes(n):
    """util/units.h FormatBytes, as the lines print sizes."""
    if n < 1024:
        return f"{n} B"
    value, unit = float(n), 0
    while value >= 1024 and unit < 6:
        value /= 1024
        unit += 1
    return f"{value:.2f} {['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'][unit]}"


@pytest.fixture
def two_nodes(tmp_path, daemons):
    """Nodes a and b, 2 GPUs each, both serving a 2-layer checkpoint: ranks 0, 1 on a, 2, 3 on b."""
    tensors = llama_like_tensors(layers=2)
    ckpt = save_sharded(tensors, tmp_path / "storage" / "tiny", shards=2, config=llama_like_config(layers=2))
    a = daemons("a", [tmp_path / "storage"], gpus=2)
    b = daemons("b", [tmp_path / "storage"], gpus=2, coordinator=a.address)
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address).stdout, what="node b to join")
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    return a, b


def check_final(rank, world, line, report):
    """The last line's numbers are the report's."""
    m = LINE.fullmatch(line)
    assert m, line
    streamed = sum(report["streamed_bytes_by_node"].values())
    direct = report["bytes_read"] - streamed
    received = report["fanout_received_bytes"]
    read = [t for t in report["tensors"] if t["source"].split(":")[0] in ("direct", "stream", "fanout")]
    assert m.group(1, 2) == (str(rank), str(world))
    assert m.group(3) == m.group(4) == format_bytes(direct + streamed + received), line
    assert m.group(5) == "100" and m.group(7).startswith("in "), line
    assert m.group(8, 9, 10) == (format_bytes(direct), format_bytes(streamed), format_bytes(received)), line
    assert m.group(11) == m.group(12) == str(len(read)), line
    return direct, streamed, received


def test_every_rank_draws_lines_whose_last_counts_what_its_report_counts(tmp_path, two_nodes):
    a, b = two_nodes
    # replicate: every rank holds everything; each piece is read on one node and received by
    # the other node's ranks.
    results = run_ranks(tmp_path, "tiny", [a, a, b, b], extra=("--strategy", "replicate", "--progress"))
    totals = []
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\n{out}\n{err}"
        lines = err.splitlines()
        assert lines and "\r" not in err and "\x1b" not in err, err  # not a terminal: plain lines
        for line in lines[:-1]:
            m = LINE.fullmatch(line)
            assert m and not m.group(7).startswith("in "), line
        totals.append(check_final(rank, 4, lines[-1], report))
    assert all(received > 0 for _, _, received in totals), totals  # each node received the other's reads
    assert all(direct > 0 for direct, _, _ in totals), totals


def test_streamed_bytes_show_as_streamed(tmp_path, two_nodes):
    a, _ = two_nodes
    results = run_ranks(tmp_path, "tiny", [a, a], extra=("--progress", "--source", "stream"))
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\n{out}\n{err}"
        direct, streamed, received = check_final(rank, 2, err.splitlines()[-1], report)
        assert direct == received == 0 < streamed


def test_nothing_is_drawn_unasked_where_stderr_is_not_a_terminal(tmp_path, two_nodes):
    a, _ = two_nodes
    (rc, out, err, report), = run_ranks(tmp_path, "tiny", [a])
    assert rc == 0, err
    assert err == ""
    assert "rank 0 verified (gloo)" in out
    (rc, out, err, report), = run_ranks(tmp_path, "tiny", [a], extra=("--progress", "--quiet"))
    assert rc == 2
    assert err == "metactl load: --progress conflicts with --no-progress and --quiet: pass one\n"


def run_on_a_terminal(daemon, env):
    """`metactl load` with stderr on a pty (stdout a pipe); what the terminal got, as bytes."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([str(METACTL), "load", "tiny", "--daemon", daemon.address], stdout=subprocess.PIPE,
                            stderr=terminal, env={**os.environ, "RANK": "0", "WORLD_SIZE": "1", **env})
    os.close(terminal)
    got = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: every writer has closed it
            break
        if not chunk:
            break
        got += chunk
    os.close(controller)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, (out, got)
    return got.decode()


def test_a_terminal_gets_one_line_redrawn_in_place_by_the_nodes_first_rank(two_nodes):
    a, _ = two_nodes
    for env in ({}, {"LOCAL_RANK": "0"}):
        shown = run_on_a_terminal(a, env)
        # Each record redraws the line from its start and erases what is left of the old one;
        # the last stays, ended by the newline (the terminal's \r\n).
        assert shown.endswith("\x1b[K\r\n"), repr(shown)
        records = shown[:-len("\x1b[K\r\n")].split("\x1b[K")
        for record in records:
            assert record.startswith("\r") and LINE.fullmatch(record[1:]), repr(record)
        assert LINE.fullmatch(records[-1][1:]).group(7).startswith("in ")
    assert run_on_a_terminal(a, {"LOCAL_RANK": "1"}) == ""  # the node's other ranks draw nothing


def test_help_says_how_to_see_progress_and_how_to_silence_it():
    out = metactl("load", "--help", check=0).stdout
    for phrase in ("--progress", "--no-progress", "--quiet", "LOCAL_RANK 0", "a line a second"):
        assert phrase in out, phrase
