"""Ranks agree, and "verified" means it (issue 9): verification compares the plan each rank
loaded, names ranks that never came or could not load, counts tensors (not ranks), and under
torchrun uses the agent's store. Real daemons and real rank processes."""
import os
import subprocess
import sys

import pytest

from checkpoints import llama_like_tensors, save_sharded
from conftest import METACTL, free_port, metactl, wait_for
from ranks import run_ranks


@pytest.fixture
def node_a(tmp_path, daemons):
    root = tmp_path / "storage"
    tensors = llama_like_tensors(layers=2)
    ckpt = save_sharded(tensors, root / "tiny", shards=2)
    a = daemons("a", [root], gpus=4)
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, check=0)
    return a


def test_ranks_that_loaded_different_plans_fail_every_rank(tmp_path, node_a):
    # Each rank passes its own --strategy (per-rank args: two runs of one rank each would not
    # meet, so run_ranks' `extra` is the same for all; give rank 1 fsdp through its env-free
    # argv by launching the two ranks by hand).
    port = free_port()
    procs = []
    for rank, strategy in enumerate(["layers", "fsdp"]):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([str(METACTL), "load", "tiny", "--daemon", node_a.address, "--timeout", "60",
                                       "--strategy", strategy], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env))
    for rank, proc in enumerate(procs):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 3, f"rank {rank}: {out}\n{err}"
        assert "the ranks did not load the same plan" in err, err
        assert "rank 0 loaded plan" in err and "(layers, 2 ranks)" in err, err
        assert "rank 1 loaded plan" in err and "(fsdp, 2 ranks)" in err, err
        assert "verified" not in out


def test_a_rank_that_never_joins_is_named(tmp_path, node_a):
    results = run_ranks(tmp_path, "tiny", [node_a], world=2, load_timeout=4)
    rc, out, err, report = results[0]
    assert rc == 3, err
    assert "rank 1 never joined within 4 s" in err, err


def test_rank_zero_never_joining_is_named_by_the_others(tmp_path, node_a):
    port = free_port()
    env = dict(os.environ, RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    proc = subprocess.run([str(METACTL), "load", "tiny", "--daemon", node_a.address, "--timeout", "4"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert f"rank 0 (it hosts the rendezvous at 127.0.0.1:{port}) never joined within 4 s" in proc.stderr


def test_a_rank_that_could_not_load_is_named_and_counts_no_tensors(tmp_path, node_a):
    # Rank 1's daemon is down: it joins verification anyway, and every rank learns why.
    class Down:
        address = "127.0.0.1:1"
    results = run_ranks(tmp_path, "tiny", [node_a, Down()], load_timeout=20)
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc in (1, 3), err
        if rank == 0:
            assert rc == 3, err
            assert "verification failed (gloo): rank 1 could not load (2 ranks)" in err, err
            assert "tensor" not in err.splitlines()[0], "a rank that could not load is not a tensor"
            assert "rank 1: could not load:" in err and "127.0.0.1:1" in err


def test_report_path_takes_a_rank_placeholder(tmp_path, node_a):
    # torchrun gives every rank the same argv: {rank} keeps their reports apart.
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([str(METACTL), "load", "tiny", "--daemon", node_a.address,
                                       "--report", str(tmp_path / "r-{rank}.json")],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert sorted(p.name for p in tmp_path.glob("r-*.json")) == ["r-0.json", "r-1.json"]


def test_under_torchrun_ranks_use_the_agents_store(tmp_path, node_a):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    proc = subprocess.run([torchrun, "--nproc-per-node", "2", "--master-port", str(free_port()), "--no-python",
                           str(METACTL), "load", "tiny", "--daemon", node_a.address, "--timeout", "60",
                           "--report", str(tmp_path / "torchrun-{rank}.json")],
                          capture_output=True, text=True, timeout=180)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert output.count("verified (gloo): 0 tensors on meta or unfilled across 2 ranks") == 2, output
    # Rank 0 binding a second store on the agent's port logged an error on every run.
    assert "Address already in use" not in output and "EADDRINUSE" not in output, output
    assert (tmp_path / "torchrun-0.json").exists() and (tmp_path / "torchrun-1.json").exists()
