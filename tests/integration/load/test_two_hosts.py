"""Two hosts with distinct addresses: network namespaces joined by a veth pair (10.77.0.1 and
10.77.0.2), one metad and one rank in each. Host b cannot read the checkpoint, so its rank
streams from host a across the link; verification (Gloo, each rank bound to its own
interface via GLOO_SOCKET_IFNAME) crosses it too. Needs root and iproute2; skips otherwise."""
import json
import os
import subprocess

import pytest

from checkpoints import llama_like_tensors, save_sharded, tensor_sha256
from conftest import METACTL, blind_to, free_port, metactl, wait_for  # two_hosts: a conftest fixture


def test_rank_on_another_host_streams_across_the_link(tmp_path, daemons, two_hosts):
    ha, hb = two_hosts["a"], two_hosts["b"]
    root_a, root_b = tmp_path / "storage-a", tmp_path / "storage-b"
    root_b.mkdir()
    tensors = llama_like_tensors(layers=2)
    ckpt = save_sharded(tensors, root_a / "tiny", shards=2)
    a = daemons("a", [root_a], gpus=1, host=ha["addr"], prefix=ha["prefix"])
    b = daemons("b", [root_b], gpus=1, host=hb["addr"], prefix=hb["prefix"], coordinator=a.address)
    assert a.address.startswith("10.77.0.1:") and b.address.startswith("10.77.0.2:")
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, prefix=ha["prefix"], check=0)
    wait_for(lambda: "10.77.0.2:" in metactl("status", "--daemon", a.address, prefix=ha["prefix"]).stdout,
             what="host b to join the coordinator")

    port = free_port()
    procs = []
    for rank, (host, daemon) in enumerate(((ha, a), (hb, b))):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR=ha["addr"], MASTER_PORT=str(port),
                   GLOO_SOCKET_IFNAME=host["dev"])
        report = tmp_path / f"rank{rank}.json"
        # Host b does not see the checkpoint (on one machine the folder is hidden from it).
        blind = blind_to(root_a) if rank == 1 else ()
        procs.append((subprocess.Popen([*host["prefix"], *blind, str(METACTL), "load", "tiny", "--daemon", daemon.address,
                                        "--report", str(report), "--timeout", "60"],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env), report))
    seen = {}
    try:
        for rank, (proc, report) in enumerate(procs):
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, f"rank {rank}: {out}\n{err}"
            assert "verified (gloo): 0 tensors on meta or unfilled across 2 ranks" in out
            data = json.loads(report.read_text())
            assert data["node"] == ("a" if rank == 0 else "b")
            for t in data["tensors"]:
                assert t["source"] == ("direct" if rank == 0 else "stream:a"), (rank, t)
                assert t["sha256"] == tensor_sha256(tensors[t["name"]]), t["name"]
                seen[t["name"]] = rank
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert sorted(seen) == sorted(tensors)
    served = json.loads(metactl("status", "--daemon", a.address, "--format", "json", prefix=ha["prefix"]).stdout)
    assert int(served["bytes_served"]) == sum(t.numel() * t.element_size() for n, t in tensors.items()
                                              if seen[n] == 1)
