"""The binary wheel (docs/install.md): scripts/wheel.py packages this build; `pip install FILE.whl`
into a fresh environment holding the same torch gives `metaload`, `metactl` and `metad`, which
work with the checkout's build folder and source package out of reach, and refuse another torch.

The fresh environment holds the project's torch as pip would have installed it: every
distribution of .venv's site-packages linked into its own (no 4 GB copy), so torch/lib and
nvidia/*/lib sit beside the installed metaload, where the wheel's RUNPATHs ($ORIGIN/..)
look for them. (test_pip_install.py's .pth would leave torch elsewhere: enough for the
extension, which finds LibTorch already loaded by `import torch`, not for metad.)

"Out of reach": every process after the install runs in a private mount namespace with an
empty tmpfs over the build folder and over client/python (conftest.blind_to's way; moving
build/ while ctest runs from it is not safe), from a temporary folder, without PYTHONPATH.

Oracles: the tensors transformers saved (safetensors), bit for bit; the versions importlib
names. Every process started is stopped (Daemon.stop, torchrun's process group).
"""
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import textwrap
import time
import zipfile

import pytest

from conftest import BUILD_DIR, SOURCE_DIR, Daemon, free_port
from pyproc import fresh_venv, pip_install_wheel
from ranks import check_reports

# A tiny Llama that transformers builds and saves (no tied embeddings: every tensor stored).
SAVE_MODEL = textwrap.dedent("""
    import sys, torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(sys.argv[1])
""")
# What the wheel must hold besides the Python files (its RECORD lists every file).
BINARIES = {"metaload/bin/metactl", "metaload/bin/metactl-load", "metaload/bin/metad"}
MAX_WHEEL_BYTES = 80 * 10**6


def hidden_prefix(cwd):
    """Runs a command in `cwd` where the build folder and the source package are empty, without
    PYTHONPATH."""
    hidden = sorted({str(BUILD_DIR), str(SOURCE_DIR / "build"), str(SOURCE_DIR / "client" / "python")})
    hidden = [h for h in hidden if os.path.isdir(h)]
    mounts = "".join(f'mount -t tmpfs metaload-moved "${i + 2}" && ' for i in range(len(hidden)))
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'{mounts}cd "$1" && shift {len(hidden) + 1} && exec env -u PYTHONPATH "$@"', "hide", str(cwd), *hidden)


def run_hidden(*args, cwd, timeout=120, env=None):
    return subprocess.run([*hidden_prefix(cwd), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(SOURCE_DIR / "scripts" / "wheel.py"), "--build-dir", str(BUILD_DIR),
                           "--out-dir", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = list(out.glob("metaload-*.whl"))
    assert len(files) == 1, files
    print(f"\nwheel: {files[0].name}, {files[0].stat().st_size / 1e6:.1f} MB in {time.monotonic() - started:.1f} s")
    return files[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh environment with the project's torch (linked), then the wheel installed by pip."""
    root = tmp_path_factory.mktemp("wheel-venv") / "venv"
    python, site = fresh_venv(root)
    project_site = sysconfig.get_paths()["purelib"]
    for entry in os.listdir(project_site):
        if not entry.startswith(("metaload", "_metaload", "__pycache__")):
            os.symlink(os.path.join(project_site, entry), os.path.join(site, entry))
    started = time.monotonic()
    pip_install_wheel(python, wheel)  # nothing but metaload: the environment's torch was kept
    print(f"\npip install: {time.monotonic() - started:.1f} s")
    return root


@pytest.fixture(scope="module")
def model(venv, tmp_path_factory):
    folder = tmp_path_factory.mktemp("storage") / "tiny-llama"
    subprocess.run([str(venv / "bin" / "python"), "-c", SAVE_MODEL, str(folder)], check=True, timeout=300,
                   capture_output=True)
    return folder


def test_the_wheel_holds_package_binaries_libraries_and_entry_points(wheel):
    assert wheel.stat().st_size < MAX_WHEEL_BYTES, f"{wheel.stat().st_size / 1e6:.1f} MB"
    assert re.fullmatch(r"metaload-[0-9.]+-cp3\d+-cp3\d+-linux_x86_64\.whl", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
        record = archive.read(f"{info}/RECORD").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        metadata = archive.read(f"{info}/METADATA").decode()
        modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
    assert BINARIES <= names, sorted(names)
    assert all(modes[b] & 0o111 for b in BINARIES), {b: oct(modes[b]) for b in BINARIES}
    assert any(re.fullmatch(r"metaload/_native\..*\.so", n) for n in names), sorted(names)
    assert {"metaload/libmetaload.so", "metaload/__init__.py", "metaload/py.typed", "metaload/_native.pyi",
            "metaload/built_with_torch.txt", "_metaload_cli.py"} <= names
    # Bundled: gRPC, protobuf, Abseil, OpenSSL (renamed); never LibTorch, CUDA or NCCL.
    bundled = [n.split("/")[-1] for n in names if n.startswith("metaload/lib/")]
    for lib in ("libgrpc++-", "libprotobuf-", "libabsl_status-", "libssl-", "libyaml-cpp-", "libcurl-"):
        assert any(b.startswith(lib) for b in bundled), (lib, bundled)
    assert not any(re.match(r"lib(torch|c10|cudart|nccl|cuda)", b) for b in bundled), bundled
    assert set(record.splitlines()) >= {f"{info}/RECORD,,"} and len(record.splitlines()) == len(names)
    assert "metactl = _metaload_cli:metactl" in entry_points and "metad = _metaload_cli:metad" in entry_points
    assert re.search(r"^Requires-Dist: torch$", metadata, re.M), metadata


def test_no_runpath_names_this_machine(venv):
    site = next((venv / "lib").glob("python3*/site-packages"))
    elves = [p for p in (site / "metaload").rglob("*") if p.is_file() and p.read_bytes()[:4] == b"\x7fELF"]
    assert len(elves) > 10, elves
    for elf in elves:
        dynamic = subprocess.run(["readelf", "-d", str(elf)], capture_output=True, text=True, check=True).stdout
        assert "(RPATH)" not in dynamic, elf
        for runpath in re.findall(r"\(RUNPATH\)\s+Library runpath: \[(.*)\]", dynamic):
            assert all(entry.startswith("$ORIGIN") for entry in runpath.split(":")), (elf, runpath)
            assert not re.search(r"/work|build|\.venv", runpath), (elf, runpath)


def test_every_library_resolves_inside_the_environment_or_the_system_base(venv, tmp_path):
    site = next((venv / "lib").glob("python3*/site-packages"))
    for binary in ("metactl", "metactl-load", "metad"):
        proc = run_hidden("ldd", site / "metaload" / "bin" / binary, cwd=tmp_path)
        assert proc.returncode == 0 and "not found" not in proc.stdout, proc.stdout + proc.stderr
        for soname, path in re.findall(r"^\s*(\S+) => (\S+)", proc.stdout, re.M):
            assert path.startswith(str(site)) or re.fullmatch(
                r"/(usr/)?lib(64|/x86_64-linux-gnu)/lib(c|m|dl|rt|pthread|util|resolv|gcc_s|stdc\+\+)\.so\.\d+", path), \
                (binary, soname, path)


def test_the_commands_run_without_the_build_folder(venv, tmp_path):
    proc = run_hidden("ls", BUILD_DIR, SOURCE_DIR / "client" / "python", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.split() == [f"{BUILD_DIR}:", f"{SOURCE_DIR}/client/python:"], \
        proc.stdout + proc.stderr
    metactl = run_hidden(venv / "bin" / "metactl", "--help", cwd=tmp_path)
    assert metactl.returncode == 0 and "usage: metactl COMMAND" in metactl.stdout, metactl.stdout + metactl.stderr
    metad = run_hidden(venv / "bin" / "metad", "--help", cwd=tmp_path)
    assert metad.returncode == 0 and "usage: metad --node-config" in metad.stdout, metad.stdout + metad.stderr
    # Exit codes pass through the exec: a bad flag is exit 2, as from the binary itself.
    bad = run_hidden(venv / "bin" / "metactl", "plan", "--no-such-flag", cwd=tmp_path)
    assert bad.returncode == 2, bad.stdout + bad.stderr


def test_two_ranks_materialize_and_a_streamed_load_without_the_build_folder(venv, model, tmp_path):
    daemon = Daemon(tmp_path, "node-a", [model.parent], prefix=hidden_prefix(tmp_path), binary=venv / "bin" / "metad")
    try:
        # The entry point exec'd the binary: the process we signal is metad itself.
        assert os.readlink(f"/proc/{daemon.proc.pid}/exe").endswith("/site-packages/metaload/bin/metad")
        register = run_hidden(venv / "bin" / "metactl", "register", "tiny", "--checkpoint", model, "--daemon",
                              daemon.address, cwd=tmp_path)
        assert register.returncode == 0, register.stdout + register.stderr

        script = tmp_path / "wheel_rank.py"  # copies: nothing of the checkout on the ranks' sys.path
        shutil.copyfile(pathlib.Path(__file__).resolve().parent / "wheel_rank.py", script)
        shutil.copyfile(pathlib.Path(__file__).resolve().parents[1] / "gloo_exit.py", tmp_path / "gloo_exit.py")
        ranks = subprocess.Popen([*hidden_prefix(tmp_path), venv / "bin" / "python", "-m", "torch.distributed.run",
                                  "--nproc-per-node", "2", "--master-port", str(free_port()), script, model,
                                  daemon.address, venv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)
        try:
            out, err = ranks.communicate(timeout=300)
        finally:
            if ranks.poll() is None:
                os.killpg(ranks.pid, signal.SIGKILL)
                ranks.wait()
        assert ranks.returncode == 0, out + err
        for rank in (0, 1):
            for how in ("direct", "stream"):
                assert re.search(rf"rank {rank}: \d+ tensors equal \({how}\)", out), out + err

        report = tmp_path / "report.json"
        load = run_hidden(venv / "bin" / "metactl", "load", "tiny", "--daemon", daemon.address, "--source",
                          "stream", "--report", report, cwd=tmp_path, env={
                              "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                              "MASTER_PORT": str(free_port())})
        assert load.returncode == 0, load.stdout + load.stderr
        assert "verified (gloo): 0 tensors on meta or unfilled across 1 ranks" in load.stdout, load.stdout
        from safetensors.torch import load_file
        saved = load_file(model / "model.safetensors")
        loaded = json.loads(report.read_text())
        # Stored tensors streamed; the rotary inv_freq buffers computed on the rank.
        sources = {t["name"]: t["source"] for t in loaded["tensors"]}
        assert {sources[name] for name in saved} == {"stream:node-a"}, sources
        assert all(s.startswith("buffer:rope_inv_freq") for n, s in sources.items() if n not in saved), sources
        loaded["tensors"] = [t for t in loaded["tensors"] if t["name"] in saved]
        check_reports([(load.returncode, load.stdout, load.stderr, loaded)], saved)
    finally:
        # SIGTERM reached metad through the entry point, and its exit code came back.
        assert daemon.stop() == 0, daemon.logs()[-4000:]


def test_another_torch_version_is_refused_naming_both(venv, tmp_path):
    site = next((venv / "lib").glob("python3*/site-packages"))
    record = site / "metaload" / "built_with_torch.txt"
    built = record.read_text()
    real = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert built.strip() == real
    record.write_text("2.14.0\n")
    try:
        for command in ([venv / "bin" / "python", "-c", "import metaload"], [venv / "bin" / "metactl", "--help"],
                        [venv / "bin" / "metad", "--help"]):
            proc = run_hidden(*command, cwd=tmp_path)
            assert proc.returncode != 0, (command, proc.stdout)
            assert re.search(rf"built against torch 2\.14\.0, but this environment has torch {re.escape(real)}",
                             proc.stderr), (command, proc.stderr[-3000:])
            assert "scripts/setup.sh wheel" in proc.stderr, proc.stderr[-3000:]
    finally:
        record.write_text(built)
