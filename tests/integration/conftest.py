"""Shared fixtures for integration tests: binaries, temp dirs, and real metad daemons.

Every process a test starts is stopped by the fixture that started it, whatever the test
outcome (SIGTERM, then SIGKILL after 5 s), and checked to have exited.
"""
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

SOURCE_DIR = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(SOURCE_DIR / "bench"))
# A free loopback port by the one rule the benchmark's harness uses too (below the ephemeral range).
from processes import free_port  # noqa: E402,F401

BUILD_DIR = pathlib.Path(os.environ.get("METALOAD_BUILD_DIR", SOURCE_DIR / "build"))
METACTL = BUILD_DIR / "client" / "metactl"
METAD = BUILD_DIR / "daemon" / "metad"
# metad with the test faults armed from METALOAD_TEST_* (tests/faults/README.md): only the tests
# that break a daemon on purpose start it.
METAD_FAULTY = BUILD_DIR / "tests" / "metad_faulty"


def fixtures_dir():
    """$METALOAD_FIXTURES, else the repository's tests/fixtures; None if absent."""
    for candidate in (os.environ.get("METALOAD_FIXTURES"), str(SOURCE_DIR / "tests" / "fixtures")):
        if candidate and pathlib.Path(candidate).is_dir():
            return pathlib.Path(candidate)
    return None


@pytest.fixture
def fixtures():
    d = fixtures_dir()
    if d is None:
        pytest.skip("fixtures folder not found (tests/fixtures, or set METALOAD_FIXTURES)")
    return d


def metactl(*args, env=None, timeout=120, check=None, prefix=(), binary=None):
    """Runs metactl (or `binary`, a test build of it); returns CompletedProcess (text). check=N
    asserts the exit code."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run([*prefix, str(binary or METACTL), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=full_env)
    if check is not None:
        assert proc.returncode == check, (
            f"metactl {' '.join(map(str, args))} exited {proc.returncode}, expected {check}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


class Daemon:
    """A real metad process with its own node config. `port` fixes the listen port (0: any free
    one), so that restart() comes back on the address ranks and peers already know; `extra`
    are more config lines ("state_dir: /tmp/x"); `env` more environment variables. `faulty`
    starts metad_faulty instead, the test binary that arms a test's fault hook from `env`
    (METALOAD_TEST_KILL_AFTER_BYTES, METALOAD_TEST_CORRUPT_CHUNKS, METALOAD_TEST_NO_CHECKSUM):
    metad has none, so a fault asked of it is refused here rather than silently not armed. A
    daemon killed by a test (kill9, or its fault hook) may end with -9 instead of 0. `binary`
    starts another metad than this build's (the wheel's console entry point, test_wheel.py)."""

    def __init__(self, tmp, name, roots, gpus=2, coordinator=None, gpu_memory="80GiB", host="127.0.0.1",
                 prefix=(), port=0, extra=(), env=None, faulty=False, binary=None):
        self.name = name
        self.prefix = prefix
        self.binary = binary or (METAD_FAULTY if faulty else METAD)
        if not faulty and any(key.startswith("METALOAD_TEST_") for key in (env or {})):
            raise ValueError(f"metad {name}: {sorted(env)} arm test faults, which only metad_faulty has "
                             "(pass faulty=True)")
        self.env = dict(os.environ, **(env or {}))
        self.may_be_killed = "METALOAD_TEST_KILL_AFTER_BYTES" in (env or {})
        self.config = pathlib.Path(tmp) / f"{name}.yaml"
        lines = [f"node: {name}", f"listen: {host}:{port}", f"gpus: {gpus}", f"gpu_memory: {gpu_memory}",
                 "roots: [" + ", ".join(str(r) for r in roots) + "]", *extra]
        # Plaintext off loopback (network namespaces) must be asked for (test_security.py).
        if not host.startswith("127.") and not any(line.startswith(("tls", "allow_insecure")) for line in extra):
            lines.append("allow_insecure: true")
        if coordinator:
            lines.append(f"coordinator: {coordinator}")
        self.config.write_text("\n".join(lines) + "\n")
        self.log = open(pathlib.Path(tmp) / f"{name}.log", "w+")
        self._start()

    def _start(self):
        # `prefix` runs it elsewhere, e.g. ("ip", "netns", "exec", NS): ip execs metad, so the
        # PID we signal is metad's own.
        self.proc = subprocess.Popen([*self.prefix, str(self.binary), "--node-config", str(self.config)],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, env=self.env)
        line = self.proc.stdout.readline()
        match = re.search(r"listening on (\S+)", line)
        if not match:
            self.stop()  # closes the log: read it from its file
            log = pathlib.Path(self.log.name).read_text()
            raise RuntimeError(f"metad {self.name} did not start (exit {self.proc.returncode}): {line!r}\n{log}")
        self.address = match.group(1)

    def kill9(self):
        """Kills it as a crash would: no shutdown, nothing flushed."""
        self.may_be_killed = True
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()

    def restart(self, env=None):
        """Starts it again on the same config, after kill9() (or its fault hook killed it) or
        stop(); its log continues the same file. `env`, when given, replaces the extra
        environment."""
        if self.proc.poll() is None:
            raise RuntimeError(f"metad {self.name} is still running")
        self.proc.stdout.close()
        if self.log.closed:  # stop() closed it
            self.log = open(self.log.name, "a+")
        if env is not None:
            self.env = dict(os.environ, **env)
        self._start()

    def logs(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        # It stops in 0.2-0.4 s here (its log says "stopped after 0.00 s"); 10 s leaves room for a
        # machine loaded by the tests beside it, not for a hang.
        if not stop_process(self.proc, timeout=10):
            # What it was doing when it did not stop, for the assertion that follows.
            self.last_log = self.logs()[-4000:]
        if not self.proc.stdout.closed:
            self.proc.stdout.close()
        self.log.close()
        return self.proc.returncode


def stop_process(proc, timeout):
    """SIGTERM, then SIGKILL after `timeout` s; True when it stopped of itself (or had already)."""
    if proc.poll() is not None:
        return True
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False


@pytest.fixture
def daemons(tmp_path):
    """Factory: daemons(name, roots, ...) starts a metad; all are stopped at teardown."""
    started = []

    def start(name, roots, **kwargs):
        d = Daemon(tmp_path, name, roots, **kwargs)
        started.append(d)
        return d

    yield start
    for d in reversed(started):
        rc = d.stop()
        assert rc == 0 or (rc == -9 and d.may_be_killed), \
            f"metad {d.name} exited {rc} on SIGTERM; its log ends:\n{getattr(d, 'last_log', '')}"


def blind_to(path):
    """A command prefix that runs a process unable to see `path`: an empty tmpfs is mounted
    over it in a private mount namespace (root only, like the tests that need it). This is how
    a test makes "a host that cannot read the checkpoint" on one machine: a rank run so opens
    nothing there, exactly as on a node without the shared file system.

    Under scripts/setup.sh sanitize/tsan the sanitizer runtime is preloaded into every child;
    `sh` crashes with TSan's, so the helpers run without it and the command gets it back."""
    preload = os.environ.get("LD_PRELOAD", "")
    return ("env", "-u", "LD_PRELOAD", "unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs metaload-blind "$1" && preload=$2 && shift 2 && '
            'if [ -n "$preload" ]; then exec env LD_PRELOAD="$preload" "$@"; else exec "$@"; fi',
            "blind", str(path), preload)


def processes_running(fragment):
    """Command lines of the live processes whose command line contains FRAGMENT, read from
    /proc. Not `pgrep -f`: under `scripts/setup.sh sanitize` the sanitizer runtime is preloaded
    into every child, and procps-ng's pgrep then deadlocks in textdomain() before it starts."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # exited meanwhile
            continue
        if fragment in cmdline:
            found.append(cmdline)
    return found


def wait_for(predicate, timeout=10.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@pytest.fixture
def two_hosts():
    """Two network namespaces joined by a veth pair, 10.77.0.1 (host "a") and 10.77.0.2 ("b"):
    {"a": {"prefix": command prefix that runs in it, "addr", "dev": its end of the link,
    "ns": its name}, "b": ...}. Needs root and iproute2; skips otherwise."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make network namespaces")
    tag = uuid.uuid4().hex[:6]
    hosts = {"a": (f"mla-{tag}", "10.77.0.1", f"va{tag}"), "b": (f"mlb-{tag}", "10.77.0.2", f"vb{tag}")}
    made = []
    try:
        for ns, _, _ in hosts.values():
            r = _ip("netns", "add", ns)
            if r.returncode != 0:
                pytest.skip(f"cannot create network namespaces here: {r.stderr.strip()}")
            made.append(ns)
        steps = [("link", "add", hosts["a"][2], "type", "veth", "peer", "name", hosts["b"][2])]
        for ns, addr, dev in hosts.values():
            steps += [("link", "set", dev, "netns", ns), ("-n", ns, "addr", "add", f"{addr}/24", "dev", dev),
                      ("-n", ns, "link", "set", dev, "up"), ("-n", ns, "link", "set", "lo", "up")]
        for step in steps:
            r = _ip(*step)
            assert r.returncode == 0, f"ip {' '.join(step)}: {r.stderr}"
        yield {k: {"prefix": ("ip", "netns", "exec", ns), "addr": addr, "dev": dev, "ns": ns}
               for k, (ns, addr, dev) in hosts.items()}
    finally:
        for ns in made:
            _ip("netns", "del", ns)  # takes its end of the veth pair with it


# scripts/setup.sh sanitize: memory figures of an ASan build are not the daemon's.
SANITIZED = bool(os.environ.get("METALOAD_SANITIZED"))


def proc_status(pid):
    """{"VmHWM": bytes, "VmRSS": bytes, "Threads": n, "fds": n} of a live process."""
    fields = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            fields[key] = int(value.split()[0]) * 1024
        elif key == "Threads":
            fields[key] = int(value)
    fields["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return fields
