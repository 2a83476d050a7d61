"""A bucket that fails (issue 38, item 4), end to end: the real S3 server (moto, s3_server.py)
behind the fault proxy (s3_fault_proxy.py), a daemon registered from s3://, a rank loading
through it. A SlowDown on the first tries, connections dropped mid-body and a stalled
response are retried and end bit-exact and verified; a SlowDown that never ends fails the load
naming the tensor, the object and the range, exit 3, no tensor of it reported filled.

The checkpoint: "big.weight" (6 MiB, F32: several of the daemon's 1 MiB chunks, each a ranged
GET) and "small.weight" (256 B), one file.
"""
import re

import pytest
import torch
from safetensors.torch import save_file

from checkpoints import tensor_sha256
from conftest import metactl, wait_for
from ranks import run_ranks
from s3_fault_proxy import s3_fault_proxy  # noqa: F401 (a fixture)
from s3_server import s3_server  # noqa: F401 (a fixture: moto on loopback)

OBJECT = "/models/ft/model.safetensors"


@pytest.fixture
def loaded(tmp_path, s3_server, s3_fault_proxy, daemons):
    """{"tensors", "proxy", "daemon", "load": a function that runs one rank and returns its
    (rc, out, err, report)}; the model "ft" registered, the proxy's counts reset after."""
    g = torch.Generator().manual_seed(38)
    tensors = {"big.weight": torch.randn(1536, 1024, generator=g), "small.weight": torch.randn(64, generator=g)}
    folder = tmp_path / "ft"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    s3_server.create_bucket("models")
    url = s3_server.upload_folder(folder, "models", "ft")
    proxy = s3_fault_proxy(s3_server.endpoint.removeprefix("http://"))
    a = daemons("a", ["s3://models"], env=s3_server.env(AWS_ENDPOINT_URL=proxy.endpoint))
    metactl("register", "ft", "--checkpoint", url, "--daemon", a.address, check=0)
    proxy.reset_stats()

    def load(*extra, timeout_s=60):
        return run_ranks(tmp_path, "ft", [a], extra=extra, load_timeout=timeout_s, timeout=timeout_s + 60)[0]

    return {"tensors": tensors, "proxy": proxy, "daemon": a, "load": load}


def assert_bit_exact_and_verified(result, tensors):
    rc, out, err, report = result
    assert rc == 0, f"exit {rc}\n{out}\n{err}"
    assert "verified" in out, out
    assert sorted(t["name"] for t in report["tensors"]) == sorted(tensors)
    for t in report["tensors"]:
        assert t["filled"], t
        assert t["sha256"] == tensor_sha256(tensors[t["name"]]), f"{t['name']} differs from the source"


def faults_applied(proxy):
    return [f["applied"] for f in proxy.stats()["faults"]]


def test_slowdown_on_the_first_tries_is_retried_and_the_load_ends_bit_exact(loaded):
    proxy = loaded["proxy"]
    proxy.add_faults({"kind": "error", "count": 3, "method": "GET", "ranged": True})
    result = loaded["load"]()
    print(result[1])
    assert_bit_exact_and_verified(result, loaded["tensors"])
    assert faults_applied(proxy) == [3]
    stats = proxy.stats()["by_key"][OBJECT]
    print(f"503 SlowDown x3: {stats['requests']} GETs, {stats['body_bytes']:,} bytes for "
          f"{sum(t.numel() * 4 for t in loaded['tensors'].values()):,} of tensors; bit-exact, verified")
    retries = re.findall(r"metad W \S+ s3: GET s3://models/ft/model\.safetensors bytes \d+-\d+: 503 SlowDown: "
                         r"Please reduce your request rate\.; retry \d of 5 in \d+ ms", loaded["daemon"].logs())
    print("\n".join(retries))
    assert len(retries) == 3, "each retry is logged"


def test_connections_dropped_mid_body_are_retried_and_the_load_ends_bit_exact(loaded):
    proxy = loaded["proxy"]
    proxy.add_faults({"kind": "drop", "count": 2, "method": "GET", "ranged": True, "after_bytes": 300_000})
    result = loaded["load"]()
    print(result[1])
    resumed = [line for line in loaded["daemon"].logs().splitlines() if " s3: " in line]
    print("\n".join(resumed))
    # Each drop that cut a body short is resumed at its first missing byte (a drop spent on the
    # 256-byte tensor's GET passes it whole).
    assert resumed and all(re.search(r"s3: GET s3://models/ft/model\.safetensors bytes 300\d{3}-\d+: Transferred a "
                                     r"partial file; retry 1 of 5 in \d+ ms$", line) for line in resumed), resumed
    assert_bit_exact_and_verified(result, loaded["tensors"])
    assert faults_applied(proxy) == [2]
    # A retried range resumes at its first missing byte: the bucket served the tensors' bytes
    # and the 2 x 300,000 bytes dropped, not whole chunks again.
    tensor_bytes = sum(t.numel() * 4 for t in loaded["tensors"].values())
    served = proxy.stats()["by_key"][OBJECT]["body_bytes"]
    print(f"2 connections dropped at 300,000 bytes: bucket served {served:,} for {tensor_bytes:,}")
    assert served <= tensor_bytes + 2 * 300_000


def test_a_stalled_response_is_given_up_and_retried(loaded):
    """The rank gives up a stream that delivers nothing for --stall-timeout and asks again; the
    daemon, told the stream is cancelled, aborts the GET it had in flight at once (RangeWriter
    OnCancel -> RandomAccessFile::Cancel), rather than hold an io thread until the S3 client's
    own stall timeout (20 s) or the proxy's 30 s."""
    proxy = loaded["proxy"]
    proxy.add_faults({"kind": "stall", "count": 1, "method": "GET", "ranged": True, "after_bytes": 100,
                      "stall_s": 30})
    result = loaded["load"]("--stall-timeout", "2")
    assert_bit_exact_and_verified(result, loaded["tensors"])
    assert faults_applied(proxy) == [1]
    print(result[2])
    assert "stalled" in result[2] or "no byte" in result[2], result[2]
    wait_for(lambda: proxy.stats()["stalls_s"], timeout=10, what="the daemon to close the stalled GET")
    held_s = proxy.stats()["stalls_s"]
    print(f"the stalled GET was held {held_s} s")
    # The rank's 2 s, then the cancellation reaches the daemon and curl's next progress call (<= 1 s).
    assert len(held_s) == 1 and held_s[0] < 6, held_s


def test_a_slowdown_that_never_ends_fails_naming_the_object_and_range_and_nothing_is_verified(loaded):
    proxy = loaded["proxy"]
    proxy.add_faults({"kind": "error", "method": "GET", "key": "model.safetensors"})
    rc, out, err, report = loaded["load"](timeout_s=60)
    print(f"exit {rc}\n{err}")
    assert rc == 3, f"exit {rc}\n{out}\n{err}"
    assert "s3://models/ft/model.safetensors" in err, err
    assert "SlowDown" in err, err
    assert "verified" not in out.replace("not verified", ""), out
    for t in report["tensors"]:
        assert not t["filled"], f"{t['name']} reported filled"
