"""Progress in the training process (issue 37): a ``progress=`` callable receives the core's
records, monotonic, the last one's bytes and tensors exactly the report's; a load that streams
from a real metad shows them as streamed. Unasked, materialize/from_pretrained draw a tqdm bar
on stderr (not a terminal here, as in a job's log) on the node's first rank, unless
transformers' progress bars are off (``disable_progress_bar()``, ``HF_HUB_DISABLE_PROGRESS_BARS``).
"""
import json
import re
import textwrap

import pytest

from conftest import Daemon, metactl
from pyproc import ok, python, save_tiny_llama


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A 2-layer Llama (float32) saved by transformers in shards."""
    root = tmp_path_factory.mktemp("llama")
    save_tiny_llama(root / "ckpt")
    return root


# Builds the checkpoint's model on meta; RECORD(p) is the record as JSON.
PRELUDE = """
    import json, threading, torch, metaload
    from transformers import AutoConfig, AutoModelForCausalLM
    def on_meta():
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained("{ckpt}"))
    def record(p):
        return dict(direct=p.direct_bytes, streamed=p.streamed_bytes, received=p.received_bytes,
                    total=p.total_bytes, done=p.done_bytes, tensors=p.tensors_done, of=p.tensors_total,
                    finished=p.finished, seconds=p.seconds)
"""


def script(llama, body):
    """PRELUDE, then `body` (each indented as it likes)."""
    return textwrap.dedent(PRELUDE.format(ckpt=f"{llama}/ckpt")) + textwrap.dedent(body)


def test_a_callback_gets_monotonic_records_whose_last_is_the_reports_streamed_from_a_daemon(llama, tmp_path):
    daemon = Daemon(tmp_path, "a", [llama])
    try:
        metactl("register", "llama", "--checkpoint", llama / "ckpt", "--daemon", daemon.address, check=0)
        out = ok(script(llama, f"""
            records, threads = [], set()
            def seen(p):
                assert isinstance(p, metaload.LoadProgress)
                records.append(record(p))
                threads.add(threading.get_ident())
            model = on_meta()
            report = metaload.materialize(model, "llama", daemon="{daemon.address}", source="stream", progress=seen)
            print(json.dumps(dict(
                records=records, streamed=report.streamed_bytes, direct=report.direct_bytes,
                received=report.fanout_received_bytes,
                read=sum(1 for p in report.provenance.values() if p.kind in ("direct", "stream")),
                param_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
                other_threads=len(threads - {{threading.get_ident()}}))))
        """))
    finally:
        assert daemon.stop() == 0
    r = json.loads(out.splitlines()[-1])
    records, last = r["records"], r["records"][-1]
    assert [x["finished"] for x in records] == [False] * (len(records) - 1) + [True]
    for before, after in zip(records, records[1:]):
        assert before["done"] <= after["done"] and before["tensors"] <= after["tensors"], (before, after)
        assert before["seconds"] <= after["seconds"]
    assert last["streamed"] == r["streamed"] == r["param_bytes"] > 0
    assert last["direct"] == r["direct"] == 0 and last["received"] == r["received"] == 0
    assert last["total"] == last["done"] == r["param_bytes"]
    assert last["tensors"] == last["of"] == r["read"] > 0
    assert r["other_threads"] >= 1  # the core's progress thread: no reading thread calls it


def test_a_callback_that_raises_is_dropped_with_a_warning_and_the_load_goes_on(llama):
    proc = python(script(llama, f"""
        calls = []
        def broken(p):
            calls.append(p)
            raise ValueError("a launcher's bug")
        model = on_meta()
        report = metaload.materialize(model, checkpoint="{llama}/ckpt", progress=broken)
        print("CALLS", len(calls), "VERIFIED", report.verified_tensors > 0)
    """))
    assert proc.returncode == 0, proc.stderr
    assert "CALLS 1 VERIFIED True" in proc.stdout
    assert ("metaload: the progress callback failed (ValueError: a launcher's bug); no more progress is reported"
            in proc.stderr)


def bar_lines(stderr):
    """The states tqdm drew of the "Loading weights" bar (each redraw starts with \\r)."""
    return [s for s in re.split(r"[\r\n]", stderr) if s.startswith("Loading weights")]


def test_from_pretrained_draws_a_bar_unless_transformers_turns_bars_off(llama):
    proc = python(script(llama, f"""
        import os, sys
        from transformers.utils import logging
        def case(name):
            print("@@", name, file=sys.stderr, flush=True)
        case("default")
        model = metaload.from_pretrained("{llama}/ckpt")
        print("READ", metaload._native.format_bytes(model.metaload_report.direct_bytes))
        case("off")
        logging.disable_progress_bar()
        metaload.from_pretrained("{llama}/ckpt")
        case("asked")
        metaload.materialize(on_meta(), checkpoint="{llama}/ckpt", progress=True)
        case("refused")
        metaload.materialize(on_meta(), checkpoint="{llama}/ckpt", progress=False)
        logging.enable_progress_bar()
        case("second rank")
        os.environ["LOCAL_RANK"] = "1"
        metaload.materialize(on_meta(), checkpoint="{llama}/ckpt")
        case("end")
    """))
    assert proc.returncode == 0, proc.stderr
    read = re.search(r"READ (.+)", proc.stdout).group(1)
    cases = dict(re.findall(r"@@ ([a-z ]+)\n(.*?)(?=@@ )", proc.stderr, re.S))
    assert set(cases) == {"default", "off", "asked", "refused", "second rank"}, proc.stderr
    for name in ("default", "asked"):
        bars = bar_lines(cases[name])
        assert bars, (name, cases[name])
        final = re.fullmatch(r"Loading weights: 100%\|█+\| (\S+)/(\S+) \[\S+, +\S+, read (.+), streamed 0 B, "
                             r"received 0 B\]", bars[-1].rstrip())
        assert final and final.group(1) == final.group(2), (name, bars[-1])
        assert final.group(3) == read, (bars[-1], read)
    for name in ("off", "refused", "second rank"):
        assert "Loading weights" not in cases[name], (name, cases[name])


def test_hf_hub_disable_progress_bars_turns_the_bar_off(llama):
    code = script(llama, f"""
        metaload.materialize(on_meta(), checkpoint="{llama}/ckpt")
    """)
    shown = python(code)
    assert shown.returncode == 0, shown.stderr
    assert "Loading weights: 100%" in shown.stderr
    hidden = python(code, env={"HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    assert hidden.returncode == 0, hidden.stderr
    assert "Loading weights" not in hidden.stderr, hidden.stderr


def test_storage_reader_reports_what_dcp_load_read(llama):
    out = ok(script(llama, f"""
        import torch.distributed.checkpoint as dcp
        records = []
        model = on_meta().to_empty(device="cpu")
        reader = metaload.StorageReader("{llama}/ckpt", progress=lambda p: records.append(record(p)))
        dcp.load(model.state_dict(), storage_reader=reader, planner=metaload.LoadPlanner())
        print(json.dumps(dict(records=records, direct=reader.report.direct_bytes,
                              n=sum(1 for p in reader.report.provenance.values() if p.kind == "direct"))))
    """))
    r = json.loads(out.splitlines()[-1])
    last = r["records"][-1]
    assert last["finished"] and [x["finished"] for x in r["records"]].count(True) == 1
    assert last["direct"] == last["total"] == r["direct"] > 0
    assert last["tensors"] == last["of"] == r["n"] > 0
