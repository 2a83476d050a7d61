"""Test faults are seams, not switches (issue 20): the production binaries — metad, metactl,
libmetaload.so and the Python extension over it — hold no METALOAD_TEST_* variable and read none;
the faults the tests arm live only in the test binary metad_faulty (tests/faults/README.md), which
holds every one of them.
"""
import os
import subprocess

import pytest

from conftest import BUILD_DIR, METACTL, METAD, METAD_FAULTY

PRODUCTION = [METAD, METACTL, BUILD_DIR / "client" / "libmetaload.so",
              *sorted((BUILD_DIR / "python" / "metaload").glob("_native*.so"))]


def switches_in(binary):
    """The METALOAD_TEST_ strings of `binary`, as `strings` sees them."""
    out = subprocess.run(["strings", "-a", str(binary)], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "METALOAD_TEST_" in line]


@pytest.mark.parametrize("binary", PRODUCTION, ids=lambda p: p.name)
def test_production_binaries_hold_no_test_switch(binary):
    assert binary.is_file(), f"{binary} is not built"
    assert switches_in(binary) == [], f"{binary} holds test switches"


def test_metad_faulty_holds_every_fault_it_arms():
    found = "\n".join(switches_in(METAD_FAULTY))
    for variable in ("METALOAD_TEST_KILL_AFTER_BYTES", "METALOAD_TEST_KILL_SIGNAL", "METALOAD_TEST_CORRUPT_CHUNKS",
                     "METALOAD_TEST_NO_CHECKSUM", "METALOAD_TEST_SLOW_READS"):
        assert variable in found, f"{variable} is not in metad_faulty:\n{found}"


def test_metad_reads_no_fault_variable(tmp_path):
    # metad_faulty refuses a malformed kill fault (test_failover.py); metad has none to read.
    config = tmp_path / "node.yaml"
    config.write_text(f"node: x\nlisten: 127.0.0.1:0\ngpus: 1\ngpu_memory: 1GiB\nroots: [{tmp_path}]\n")
    env = {"METALOAD_TEST_KILL_AFTER_BYTES": "100MB", "METALOAD_TEST_CORRUPT_CHUNKS": "all",
           "METALOAD_TEST_NO_CHECKSUM": "1"}
    proc = subprocess.Popen([str(METAD), "--node-config", str(config)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, **env))
    try:
        assert "listening on" in proc.stdout.readline()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "METALOAD_TEST_" not in err and "TEST FAULT" not in err and "TEST MODE" not in err, err
