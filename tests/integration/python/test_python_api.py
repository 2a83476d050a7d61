"""The metaload Python package as a user meets it: errors, help, load(), Ctrl-C (issue 11).

Each case runs a fresh Python process (as a training script would), against real files and,
where it needs one, a real metad.
"""
import json
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from conftest import SOURCE_DIR, Daemon, free_port, metactl
from pyproc import ENV, ok, save_tiny_llama


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A 2-layer Llama saved by transformers, and its config with 4 layers beside it."""
    root = tmp_path_factory.mktemp("llama")
    save_tiny_llama(root / "ckpt", bigger=root / "bigger")
    return root


def test_a_module_of_another_size_is_refused_before_any_read_with_one_grouped_finding(llama):
    out = ok(f"""
        import torch, metaload
        from transformers import AutoConfig, AutoModelForCausalLM
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained("{llama}/bigger"))
        try:
            metaload.materialize(model, "llama", checkpoint="{llama}/ckpt")
        except metaload.MetaTensorError as e:
            assert isinstance(e, RuntimeError)
            print(str(e))
            print("FINDINGS", len(e.findings), e.findings[0].rank)
            # Nothing was read, nothing allocated: every parameter is still on meta.
            print("META", all(p.is_meta for p in model.parameters()))
    """)
    assert "rank 0: layers 2–3 of 4 are missing: the checkpoint has 2 — is it another size of this model?" in out
    assert "FINDINGS 18 0" in out  # 9 tensors in each of the two missing layers
    assert "META True" in out
    assert "Cannot copy out of meta tensor" not in out


def test_errors_are_python_exceptions_with_the_cli_messages(llama, tmp_path):
    out = ok(f"""
        import torch, metaload
        def show(call):
            try:
                call()
            except metaload.Error as e:
                print(type(e).__name__, isinstance(e, ValueError), isinstance(e, RuntimeError), "|", e)
        model = torch.nn.Linear(2, 2, device="meta")
        show(lambda: metaload.materialize(model, "m", checkpoint="{tmp_path}/nothing-here"))
        show(lambda: metaload.materialize(model, "m"))
        show(lambda: metaload.materialize(model, "m", daemon="127.0.0.1:1", timeout_s=2))
        show(lambda: metaload.materialize(model, "m", checkpoint="{llama}/ckpt", source="sideways"))
        show(lambda: metaload.load("m"))
        show(lambda: metaload.materialize(model, "m", checkpoint="{llama}/ckpt", read_threads=1 << 30))
        show(lambda: metaload.materialize(model, "m", checkpoint="{llama}/ckpt", timeout_s=float("nan")))
        # A hostile box: a DTensor-like part outside the tensor, straight to the extension.
        from metaload import _native
        view = _native.open_model("m", daemon="", checkpoint="{llama}/ckpt", timeout_s=10.0)
        def refused(start, length, dest):
            request = _native.Request("model.norm.weight", [64], dest, box_start=start, box_length=length)
            out = _native.materialize(view, [request], source="auto", init_missing=None, read_threads=1,
                                      timeout_s=10.0, check_only=False)
            print([(f.tensor, f.why) for f in out.refused])
        show(lambda: refused([60], [8], torch.empty(8)))
        show(lambda: refused([-1], [1 << 62], torch.empty(1)))
    """)
    lines = out.splitlines()
    assert lines[0].startswith(f"BadInputError True False | {tmp_path}/nothing-here")
    assert lines[1].startswith("BadInputError True False | neither a daemon nor a checkpoint for m: give checkpoint=PATH")
    assert lines[2].startswith("LoadError False True | ") and "127.0.0.1:1" in lines[2]
    assert lines[3].startswith("BadInputError True False | ") and "sideways" in lines[3]
    assert lines[4] == "BadInputError True False | no daemon: pass daemon=\"host:port\" or set METAD_ADDRESS"
    assert lines[5] == "BadInputError True False | read_threads 1073741824 is outside 1..64"
    assert lines[6] == "BadInputError True False | timeout_s nan is not in (0, 604800]"
    assert lines[7] == "[('model.norm.weight', \"its local part [60, +8) of dimension 0 is outside the tensor's 64\")]"
    assert lines[8] == "[('model.norm.weight', \"its local part [-1, +4611686018427387904) of dimension 0 is outside " \
                       "the tensor's 64\")]"


def test_provenance_is_data_made_into_metactls_text_at_the_edge():
    out = ok("""
        from metaload import LoadReport, Provenance
        for p in (Provenance("direct", ("",)), Provenance("stream", ("a", "b"), "BF16"),
                  Provenance("direct", ("", "b")), Provenance("stream", ("a",), tied_to="w"),
                  Provenance("none", tied_to="w"), Provenance("none"), Provenance("init", rule="zeros"),
                  Provenance("buffer", rule="rope_inv_freq(base=10000,dim=8)"), Provenance("tied", tied_to="w"),
                  Provenance("module"), Provenance("module", rule="_init_weights"), Provenance("unfilled"),
                  Provenance("empty")):
            print(repr(str(p)), repr(p.summary_kind))
        report = LoadReport("m", 0, 1, "cpu")
        report._note("a", Provenance("direct", ("", "b")))
        report._note("b", Provenance("stream", ("a",), "F32"), "stream:a>F32 (fused from 2 stored tensors)")
        report._note("c", Provenance("tied", tied_to="b"), "tied:b")
        print(report.sources)
        print(report)
    """)
    assert out.splitlines() == [
        "'direct' 'direct'", "'stream:a+b>BF16' 'stream'", "'direct+stream:b' 'direct+stream'",
        "'stream:a (tied:w)' 'stream'", "' (tied:w)' ''", "'' ''", "'init:zeros' 'init'",
        "'buffer:rope_inv_freq(base=10000,dim=8)' 'buffer'", "'tied' 'tied'", "'module' 'module'",
        "'module:_init_weights' 'module'", "'unfilled' 'unfilled'", "'empty' 'empty'",
        "{'a': 'direct+stream:b', 'b': 'stream:a>F32 (fused from 2 stored tensors)', 'c': 'tied:b'}",
        "metaload: rank 0/1 m on cpu: 3 tensors (1 direct+stream, 1 stream, 1 tied), 0.00 MiB read in 0.00 s, "
        "not verified (verification skipped)"]


def test_devices_follow_metactls_rule_and_messages(llama):
    out = ok(f"""
        import torch, metaload
        from metaload import _native
        def show(call):
            try:
                print("OK", call())
            except metaload.Error as e:
                print(type(e).__name__, "|", e)
        print(_native.resolve_device("cpu", rank=3), _native.resolve_device("", rank=0) == ("cuda:0" if torch.cuda.is_available() else "cpu"))
        model = torch.nn.Linear(2, 2, device="meta")
        show(lambda: metaload.materialize(model, "m", checkpoint="{llama}/ckpt", device="tpu"))
        show(lambda: metaload.load("m", daemon="127.0.0.1:1", device="cuda:x"))
        if not torch.cuda.is_available():
            show(lambda: metaload.materialize(model, "m", checkpoint="{llama}/ckpt", device="cuda"))
    """)
    lines = out.splitlines()
    assert lines[0] == "cpu True"
    assert lines[1] == 'BadInputError | --device "tpu": use cpu, cuda or cuda:N'
    assert lines[2] in ("BadInputError | --device cuda:x: bad CUDA index",
                        "BadInputError | --device cuda:x: no CUDA device is visible to this process")
    if len(lines) > 3:
        assert lines[3] == "BadInputError | --device cuda: no CUDA device is visible to this process"


def test_options_are_keyword_only_and_positional_ones_fail_with_pythons_type_error(llama):
    """What identifies the thing is positional (the model, the name); every option is a keyword:
    one passed positionally is Python's own TypeError, raised before anything runs."""
    out = ok(f"""
        import torch, metaload
        from metaload import _native
        model = torch.nn.Linear(2, 2, device="meta")
        calls = {{
            "materialize": lambda: metaload.materialize(model, "m", "127.0.0.1:1"),
            "load": lambda: metaload.load("m", "127.0.0.1:1"),
            "verify": lambda: metaload.verify(model, None),
            "set_credentials": lambda: metaload.set_credentials("/nonexistent/ca.pem"),
            "_native.open_model": lambda: _native.open_model("m", "", "{llama}/ckpt", 10.0),
            "_native.resolve_device": lambda: _native.resolve_device("cpu", 0),
            "_native.Request": lambda: _native.Request("w", [2], torch.empty(2), [0], [2]),
        }}
        for name, call in calls.items():
            try:
                call()
                print(name, "ACCEPTED")
            except TypeError as e:
                print(name, "TypeError", "metaload.Error" if isinstance(e, metaload.Error) else "python")
        print("META", model.weight.is_meta)
    """)
    lines = out.splitlines()
    assert lines[:-1] == [f"{name} TypeError python" for name in (
        "materialize", "load", "verify", "set_credentials", "_native.open_model", "_native.resolve_device",
        "_native.Request")]
    assert lines[-1] == "META True"


def test_help_teaches_and_the_package_is_typed():
    out = ok("""
        import metaload, pathlib
        print(metaload.materialize.__doc__)
        print(metaload.verify.__doc__)
        print("TYPED", (pathlib.Path(metaload.__file__).parent / "py.typed").exists(),
              (pathlib.Path(metaload.__file__).parent / "_native.pyi").exists())
    """)
    for phrase in ("fully_shard", "checkpoint=", "init_missing", "MetaTensorError", "Example", "METAD_ADDRESS",
                   "Returns the number of distinct tensors verified", "strict=False", "verify_timeout_s"):
        assert phrase in out
    assert "TYPED True True" in out


def test_the_namespace_holds_the_documented_api_and_nothing_else():
    """Was: torch, pathlib, annotations and check_torch_version public in dir(metaload) (issue 37)."""
    out = ok("""
        import json, metaload
        print(json.dumps({"dir": sorted(n for n in dir(metaload) if not n.startswith("_") or n == "__version__"),
                          "all": sorted(metaload.__all__)}))
    """)
    names = json.loads(out)
    documented = re.search(r"## Public names\n\n(.*?)\n\n", (SOURCE_DIR / "docs" / "python.md").read_text(), re.S)
    listed = sorted(re.findall(r"`(\w+)`", documented.group(1).split(":", 1)[1].split(". Everything")[0]))
    assert listed == names["all"] == names["dir"], names
    assert "torch" not in names["dir"] and "annotations" not in names["dir"]


def test_load_returns_this_ranks_slices_in_process(llama, tmp_path):
    daemon = Daemon(tmp_path, "a", [llama])
    try:
        metactl("register", "llama", "--checkpoint", llama / "ckpt", "--daemon", daemon.address, check=0)
        out = ok(f"""
            import json, torch, metaload
            from safetensors import safe_open
            import glob
            stored = {{}}
            for f in glob.glob("{llama}/ckpt/*.safetensors"):
                with safe_open(f, "pt") as h:
                    stored.update({{k: h.get_tensor(k) for k in h.keys()}})
            read = 0
            for rank in (0, 1):
                tensors = metaload.load("llama", daemon="{daemon.address}", strategy="fsdp", rank=rank,
                                        world_size=2, verify=False)
                read += tensors.report.bytes_read
                for name, t in tensors.items():
                    if name not in stored:
                        continue
                    want = stored[name]
                    if name in tensors.report.slices:
                        for d, (s, n) in enumerate(tensors.report.slices[name]):
                            want = want.narrow(d, s, n)
                    assert torch.equal(t, want), name
            whole = metaload.load("llama", daemon="{daemon.address}")
            print(json.dumps({{"read": read, "verified": whole.report.verified_tensors,
                              "whole": whole.report.bytes_read, "n": len(whole)}}))
        """)
    finally:
        assert daemon.stop() == 0
    result = json.loads(out.splitlines()[-1])
    assert result["read"] == result["whole"] > 0
    assert result["verified"] == result["n"] > 0


def test_a_system_that_refuses_threads_slows_the_fill_and_never_aborts_the_process(llama):
    """CI, 2026-12-01: both ranks of a torchrun died of std::terminate while tests ran beside
    them. A thread the kernel refuses (EAGAIN: a pids or task limit) threw out of the fill's
    loop past joinable threads. Here RLIMIT_NPROC leaves room for two more threads of the eight
    asked: the fill runs on fewer and the bytes are from_pretrained's."""
    # Readable by the unprivileged user the limit needs (root is exempt), outside pytest's 0700
    # folders.
    shared = pathlib.Path(tempfile.mkdtemp(prefix="metaload-nproc-"))
    shared.chmod(0o755)
    shutil.copytree(llama / "ckpt", shared / "ckpt")
    for path in [shared / "ckpt", *(shared / "ckpt").iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    try:
        out = run_under_a_thread_limit(shared / "ckpt")
    finally:
        shutil.rmtree(shared)
    assert "FILLED" in out and int(out.split()[-2]) > 0


def run_under_a_thread_limit(ckpt):
    return ok(f"""
        import os, resource, torch, metaload
        from transformers import AutoConfig, AutoModelForCausalLM
        ckpt = "{ckpt}"
        ref = AutoModelForCausalLM.from_pretrained(ckpt)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ckpt))
        if os.geteuid() == 0:
            os.setuid(65534)  # root is exempt from RLIMIT_NPROC; nobody is not
        # The limit counts every task of this user on the machine, not only this process's.
        threads = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                status = open(f"/proc/{{pid}}/status").read()
            except OSError:
                continue
            if int(status.split("Uid:")[1].split()[0]) == os.getuid():
                threads += int(status.split("Threads:")[1].split()[0])
        resource.setrlimit(resource.RLIMIT_NPROC, (threads + 2, threads + 2))
        report = metaload.materialize(model, "llama", checkpoint=ckpt, read_threads=8, verify=False)
        want = ref.state_dict()
        assert all(torch.equal(t, want[name]) for name, t in model.state_dict().items())
        print("FILLED", report.bytes_read, len(want))
    """)


def test_ctrl_c_stops_a_load_promptly(tmp_path):
    """A 2 GiB tensor (a sparse file) streamed one thread at a time: SIGINT mid-read raises
    KeyboardInterrupt in the script within seconds, and the process exits."""
    folder = tmp_path / "big"
    folder.mkdir()
    header = json.dumps({"w": {"dtype": "F32", "shape": [512, 1024 * 1024], "data_offsets": [0, 2 << 30]}}).encode()
    with open(folder / "model.safetensors", "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + (2 << 30))
    daemon = Daemon(tmp_path, "a", [folder])
    try:
        metactl("register", "big", "--checkpoint", folder, "--daemon", daemon.address, check=0)
        code = textwrap.dedent(f"""
            import sys, time, torch, metaload
            model = torch.nn.Module()
            model.w = torch.nn.Parameter(torch.empty(512, 1024 * 1024, device="meta"))
            print("START", flush=True)
            try:
                metaload.materialize(model, "big", daemon="{daemon.address}", source="stream", read_threads=1)
                print("FINISHED")
            except KeyboardInterrupt:
                print("INTERRUPTED", time.monotonic(), flush=True)
                sys.exit(42)
        """)
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=ENV)
        assert proc.stdout.readline().strip() == "START"
        time.sleep(1.0)  # imports done; the stream is under way
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        assert daemon.stop() == 0
    assert proc.returncode == 42, f"{stdout}\n{stderr[-3000:]}"
    interrupted_at = float(stdout.split("INTERRUPTED")[1].split()[0])
    assert interrupted_at - sent < 3.0


def test_a_buffer_without_a_rule_comes_from_the_modules_own_init_or_is_named(tmp_path):
    out = ok(f"""
        import torch, metaload
        from safetensors.torch import save_file

        class Net(torch.nn.Module):
            def __init__(self, with_init):
                super().__init__()
                self.lin = torch.nn.Linear(4, 3)
                self.register_buffer("scale", torch.empty(4), persistent=False)
                if with_init:
                    self.reset_parameters = self._reset

            def _reset(self):  # what torch modules do: computes the buffer, re-draws the weights
                with torch.no_grad():
                    self.scale.copy_(torch.arange(4.0) * 0.5)
                    self.lin.weight.normal_()

        torch.manual_seed(0)
        real = Net(False)
        save_file({{"lin.weight": real.lin.weight.detach(), "lin.bias": real.lin.bias.detach()}},
                  "{tmp_path}/model.safetensors")
        with torch.device("meta"):
            model = Net(True)
        report = metaload.materialize(model, "net", checkpoint="{tmp_path}")
        print("SOURCE", report.sources["scale"])
        print("SCALE", model.scale.tolist())
        print("WEIGHTS", torch.equal(model.lin.weight, real.lin.weight), torch.equal(model.lin.bias, real.lin.bias))
        with torch.device("meta"):
            bare = Net(False)
        try:
            metaload.materialize(bare, "net", checkpoint="{tmp_path}")
        except metaload.MetaTensorError as e:
            print("BARE", e.findings)
    """)
    assert "SOURCE module:reset_parameters" in out
    assert "SCALE [0.0, 0.5, 1.0, 1.5]" in out
    assert "WEIGHTS True True" in out  # the module's init ran first; the checkpoint's values won
    assert ("BARE [Finding(tensor='scale', rank=0, why='a buffer the checkpoint lacks, with no rule in metaload "
            "and no _init_weights/reset_parameters in the module to compute it')]") in out


def test_load_under_torchrun_verifies_over_a_group_it_makes_from_the_environment(llama, tmp_path):
    """No process group in the script: load() and verify() make a Gloo group from torchrun's
    variables for the verification and tear it down; a rank's verdict names the other's tensor."""
    daemon = Daemon(tmp_path, "a", [llama])
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, torch, torch.distributed as dist, metaload
        tensors = metaload.load("llama", daemon="{daemon.address}", strategy="tp", tp=2)
        out = {{"rank": int(os.environ["RANK"]), "verified": tensors.report.verified_tensors,
               "content": tensors.report.content,
               "slice": tensors.report.slices["model.layers.0.mlp.up_proj.weight"],
               "group_left": dist.is_initialized()}}
        model = torch.nn.Linear(2, 2)
        if out["rank"] == 1:
            model.weight = torch.nn.Parameter(torch.empty(2, 2, device="meta"))
        try:
            metaload.verify(model, meta_only=True)
        except metaload.MetaTensorError as e:
            out["verify"] = [list(f) for f in e.findings]
        try:  # a module metaload never filled proves nothing: verify names what it did not load
            metaload.verify(torch.nn.Linear(2, 2))
        except metaload.MetaTensorError as e:
            out["not_loaded"] = sorted(set(f.tensor for f in e.findings))
        # The core's sum over the caller's group (from_pretrained's pipeline check): exact 64-bit
        # sums, and ranks that pass different lengths refused alike on both, before any sum.
        dist.init_process_group("gloo")
        r = out["rank"]
        out["sum"] = metaload._native.sum_int64(dist.group.WORLD, device="cpu", values=[r + 1, -5, 2**40 + r],
                                                what="a test's sum", timeout_s=30)
        out["empty"] = metaload._native.sum_int64(dist.group.WORLD, device="cpu", values=[], what="a test's sum",
                                                  timeout_s=30)
        try:
            metaload._native.sum_int64(dist.group.WORLD, device="cpu", values=[7] * (r + 1), what="a test's sum",
                                       timeout_s=30)
        except metaload.Error as e:
            out["uneven"] = f"{{type(e).__name__}}: {{e}}"
        try:  # one rank's value past 2^42: a sum of 2^20 ranks could wrap; both ranks refuse it
            metaload._native.sum_int64(dist.group.WORLD, device="cpu", values=[1, 2**42 + 1 - r], what="a test's sum",
                                       timeout_s=30)
        except metaload.Error as e:
            out["too_large"] = f"{{type(e).__name__}}: {{e}}"
        dist.destroy_process_group()
        with open("{tmp_path}/result" + str(out["rank"]) + ".json", "w") as f:  # ranks share stdout
            json.dump(out, f)
    """))
    try:
        metactl("register", "llama", "--checkpoint", llama / "ckpt", "--daemon", daemon.address, check=0)
        proc = subprocess.run([str(pathlib.Path(sys.executable).parent / "torchrun"), "--nproc-per-node", "2",
                               "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
                               str(script)], capture_output=True, text=True, timeout=120, env=ENV)
    finally:
        assert daemon.stop() == 0
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads((tmp_path / f"result{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["rank"] for r in results] == [0, 1]
    for r in results:
        assert r["sum"] == [3, -10, 2**41 + 1] and r["empty"] == [], r
        assert r.get("uneven", "").endswith(
            "a test's sum: the 2 ranks pass 3 values between them, not the same number each (this rank: "
            f"{r['rank'] + 1}; each rank another model?)"), r
        assert r.get("too_large", "").endswith(
            "a test's sum: values beyond +/-2^42, where a sum over the group could overflow: 1 between the 2 "
            f"ranks (this rank: {1 - r['rank']})"), r
        assert r["verified"] > 0 and r["group_left"] is False
        assert r["verify"] == [["weight", 1, "parameter still on meta"]]
        assert r["not_loaded"] == ["bias", "weight"]
        # Registered with digests (the default): every stored tensor proven, tp slices too.
        assert r["content"].startswith("content proven: ") and "checked against their registered fast digests" in \
            r["content"], r
    # up_proj [96, 64] split in rows between the two tp ranks.
    # (start, length) per dimension, as docs/python.md says (was all starts, then all lengths).
    assert results[0]["slice"] == [[0, 48], [0, 64]] and results[1]["slice"] == [[48, 48], [0, 64]]
