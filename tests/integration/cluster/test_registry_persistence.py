"""The embedded registry (issue 12): a coordinator with `state_dir` that is killed with
kill -9 and restarted on the same config serves every model registered before, at once and
without registering again; an unregistration survives the same way; a damaged record file
costs only its own model, named in the log, while the others load.

Every load is a real rank process whose bytes are compared with the safetensors library's.
"""
import subprocess
import time

import pytest

from checkpoints import llama_like_tensors, save_sharded
from conftest import METAD, free_port, metactl
from ranks import check_reports, run_ranks


@pytest.fixture
def coordinator(tmp_path, daemons):
    """A coordinator on a fixed port with a state_dir, and two checkpoints under its root."""
    root = tmp_path / "storage"
    tensors = {"tiny": llama_like_tensors(), "other": llama_like_tensors(layers=2, seed=1)}
    ckpts = {"tiny": save_sharded(tensors["tiny"], root / "llama-tiny", shards=3),
             "other": save_sharded(tensors["other"], root / "llama-other", shards=2)}
    state_dir = tmp_path / "state"
    d = daemons("a", [root], port=free_port(), extra=[f"state_dir: {state_dir}"])
    for name, ckpt in ckpts.items():
        metactl("register", name, "--checkpoint", ckpt, "--daemon", d.address, check=0)
    return {"daemon": d, "tensors": tensors, "state_dir": state_dir}


def crash_and_restart(daemon):
    address = daemon.address
    daemon.kill9()
    daemon.restart()
    assert daemon.address == address


def test_a_registered_model_loads_after_kill_9_and_restart_without_registering_again(tmp_path, coordinator):
    d = coordinator["daemon"]
    crash_and_restart(d)
    assert "registry: restored 2 models" in d.logs()
    results = run_ranks(tmp_path, "tiny", [d, d])
    check_reports(results, coordinator["tensors"]["tiny"])
    check_reports(run_ranks(tmp_path, "other", [d]), coordinator["tensors"]["other"])
    status = metactl("status", "--daemon", d.address, check=0).stdout
    assert "tiny" in status and "other" in status


def test_a_restarted_coordinator_serves_its_first_plan_at_once(tmp_path, coordinator):
    d = coordinator["daemon"]
    d.kill9()
    started = time.monotonic()
    d.restart()
    # The first call after the "listening" line is answered: no retry, no re-registration.
    [(rc, out, err, report)] = run_ranks(tmp_path, "tiny", [d], load_timeout=10)
    elapsed_s = time.monotonic() - started
    assert rc == 0, f"{out}\n{err}\n{d.logs()}"
    assert elapsed_s < 30, f"restart to first load took {elapsed_s:.1f} s"


def test_an_unregistration_survives_kill_9(tmp_path, coordinator):
    d = coordinator["daemon"]
    metactl("unregister", "other", "--daemon", d.address, check=0)
    assert not (coordinator["state_dir"] / "models" / "other.pb").exists()
    crash_and_restart(d)
    assert "registry: restored 1 models" in d.logs()
    [(rc, out, err, report)] = run_ranks(tmp_path, "other", [d])
    assert rc != 0 and "no model \"other\" is registered" in err, err
    check_reports(run_ranks(tmp_path, "tiny", [d]), coordinator["tensors"]["tiny"])


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_record_is_skipped_naming_its_file_and_the_others_still_load(tmp_path, coordinator, damage):
    d = coordinator["daemon"]
    d.kill9()
    record = coordinator["state_dir"] / "models" / "other.pb"
    data = record.read_bytes()
    record.write_bytes(data[:len(data) // 2] if damage == "truncated" else b"\x00garbage" * 100)
    d.restart()
    logs = d.logs()
    assert f"registry: skipped {record}" in logs, logs
    assert "registry: restored 1 models" in logs, logs
    check_reports(run_ranks(tmp_path, "tiny", [d]), coordinator["tensors"]["tiny"])
    [(rc, out, err, report)] = run_ranks(tmp_path, "other", [d])
    assert rc != 0 and "no model \"other\" is registered" in err, err
    # Registering it again repairs it: the file is rewritten whole.
    metactl("register", "other", "--checkpoint", tmp_path / "storage" / "llama-other", "--daemon", d.address, check=0)
    crash_and_restart(d)
    check_reports(run_ranks(tmp_path, "other", [d]), coordinator["tensors"]["other"])


def test_a_model_whose_checkpoint_is_gone_is_skipped_at_restart(tmp_path, coordinator):
    d = coordinator["daemon"]
    d.kill9()
    for f in (tmp_path / "storage" / "llama-other").iterdir():
        f.unlink()
    d.restart()
    logs = d.logs()
    assert "registry: skipped model \"other\"" in logs and "llama-other" in logs, logs
    check_reports(run_ranks(tmp_path, "tiny", [d]), coordinator["tensors"]["tiny"])


def test_a_second_coordinator_on_the_same_state_dir_refuses_to_start(tmp_path, coordinator):
    config = tmp_path / "second.yaml"
    config.write_text(f"node: second\nlisten: 127.0.0.1:0\nstate_dir: {coordinator['state_dir']}\n")
    proc = subprocess.run([str(METAD), "--node-config", str(config)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1, proc
    assert "another metad uses state_dir" in proc.stderr, proc.stderr
