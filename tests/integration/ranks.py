"""Rank processes for the integration tests: `metactl load` once per rank, and the check that
every tensor arrived on exactly one rank with the source's bytes."""
import json
import os
import subprocess

from checkpoints import tensor_sha256
from conftest import METACTL, blind_to, free_port


def run_ranks(tmp_path, model, daemon_of_rank, extra=(), world=None, timeout=120, blind=None, load_timeout=60,
              prefixes=None, env_of_rank=None):
    """Starts one `metactl load` per rank, concurrently; returns [(rc, stdout, stderr, report)].
    `blind` maps ranks to a folder they must not see (a node without the checkpoint), `prefixes`
    ranks to any other command prefix, `env_of_rank` ranks to extra environment variables."""
    world = world or len(daemon_of_rank)
    port = free_port()
    procs = []
    for rank, daemon in enumerate(daemon_of_rank):
        report = tmp_path / f"report-{model}-{rank}.json"
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), **(env_of_rank or {}).get(rank, {}))
        prefix = blind_to(blind[rank]) if blind and rank in blind else (prefixes or {}).get(rank, ())
        procs.append((subprocess.Popen([*prefix, str(METACTL), "load", model, "--daemon", daemon.address,
                                        "--report", str(report), "--timeout", str(load_timeout), *extra],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env), report))
    results = []
    try:
        for proc, report in procs:
            out, err = proc.communicate(timeout=timeout)
            data = json.loads(report.read_text()) if report.exists() else None
            results.append((proc.returncode, out, err, data))
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def check_reports(results, tensors):
    seen = {}
    for rank, (rc, out, err, report) in enumerate(results):
        assert rc == 0, f"rank {rank} exited {rc}\n{out}\n{err}"
        assert report["rank"] == rank
        for t in report["tensors"]:
            assert t["name"] not in seen, f"{t['name']} loaded by ranks {seen[t['name']]} and {rank}"
            seen[t["name"]] = rank
            src = tensors[t["name"]]
            assert t["shape"] == list(src.shape), t["name"]
            assert t["sha256"] == tensor_sha256(src), f"bytes of {t['name']} on rank {rank} differ from the source"
    assert sorted(seen) == sorted(tensors), "every tensor must be loaded by exactly one rank"
    return seen
