"""What anyone who may write to etcd can put under the prefix (issue 23): a member key without
a lease, records far larger than any daemon writes. Two metad peers share a real etcd
(Debian's /usr/bin/etcd, see etcd_server.py); the forged keys are put through etcd's JSON
gateway, as any client could.

- A member key without a lease would never expire: a forged member stayed `up` forever and was
  planned on. It is skipped, with a log line naming the key.
- Junk keys of a MiB (issue 35): three of them under `members/` made every peer's member range
  fail ("Received message larger than max (3145990 vs. 2097152)"), and each peer planned
  alone. Prefixes are listed keys only, in pages; values are fetched key by key: each junk key
  is skipped with a log line naming it and its size, and every peer plans over every member.
- A record above `registry_max_record_size` (1 MiB by default) is refused undecoded, with a log
  line naming the key and its size; the lease keep-alives never wait for records (a 4.8 MB
  record made both peers see each other down for ~30 s), and SIGTERM is honoured within
  `shutdown_grace` (a 41 MiB record was not applied after 63 s, and SIGTERM was ignored).
"""
import hashlib
import json
import time

import pytest

from checkpoints import llama_like_tensors, save_sharded
from conftest import free_port, metactl, wait_for
from etcd_server import etcd, large_etcd  # noqa: F401 (fixtures: a real etcd on loopback)

MEMBER_TIMEOUT_S = 4  # a keep-alive held up for 3 s or more shows as a peer going down
SHUTDOWN_GRACE_S = 5
EXPIRED = "registry: etcd lease"  # "... has expired; joining ... again": a keep-alive came too late


def member_names(daemon):
    status = json.loads(metactl("status", "--daemon", daemon.address, "--format", "json", check=0).stdout)
    return sorted(m["name"] for m in status.get("members", []))


def plan_nodes(model, daemon):
    proc = metactl("plan", model, "--daemon", daemon.address, "--format", "json", check=0)
    return sorted({rank["node"] for rank in json.loads(proc.stdout)["ranks"]})


def start_peers(tmp_path, etcd, daemons, extra=(), member_timeout_s=MEMBER_TIMEOUT_S, names=("a", "b")):
    root = tmp_path / "storage"
    ckpt = save_sharded(llama_like_tensors(), root / "llama-tiny", shards=2)
    extra = [f"registry: etcd://{etcd.endpoint}", f"member_timeout: {member_timeout_s}s",
             f"shutdown_grace: {SHUTDOWN_GRACE_S}s", *extra]
    peers = [daemons(name, [root], port=free_port(), extra=extra) for name in names]
    for d in peers:
        wait_for(lambda: member_names(d) == sorted(names), what=f"{d.name} to see every peer")
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", peers[0].address, check=0)
    return (root, *peers)


# Protocol buffers by hand (the tests have no protobuf package): what any client of etcd can write.
def varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def field(number, value):
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def record_file(payload):
    """The embedded record format (daemon/registry/embedded_record_store.h): magic, payload size,
    hex SHA-256, payload: a value every daemon decodes."""
    return b"MLREC001" + len(payload).to_bytes(8, "little") + hashlib.sha256(payload).hexdigest().encode() + payload


def read_varint(data, at):
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return value, at


def first_length_delimited(data, number):
    """The bytes of the first field `number` (a string or message) of a serialized message."""
    at = 0
    while at < len(data):
        tag, at = read_varint(data, at)
        wire = tag & 7
        if wire == 0:
            _, at = read_varint(data, at)
            continue
        if wire != 2:
            at += {1: 8, 5: 4}[wire]
            continue
        size, at = read_varint(data, at)
        if tag >> 3 == number:
            return data[at:at + size]
        at += size
    raise AssertionError(f"no field {number}")


def forged_record(etcd, name, size_bytes):
    """The real record of "tiny" renamed `name`, with copies of its first tensor location under
    other names appended until it is `size_bytes` long, and `allow_unexpected` (protobuf merges
    repeated fields and keeps the last scalar): bytes every daemon decodes."""
    real = etcd.range_prefix("/metaload/models/a/tiny")["/metaload/models/a/tiny"]
    assert real[:8] == b"MLREC001", real[:8]
    payload = bytearray(real[80:])
    first = first_length_delimited(bytes(payload), 4)
    i = 0
    while len(payload) < size_bytes - 100:
        payload += field(4, first + field(1, f"pad.{i}"))
        i += 1
    payload += field(1, name) + field(8, 1)
    return record_file(bytes(payload))


def test_a_member_key_without_a_lease_is_skipped_naming_the_key_and_never_planned_on(tmp_path, etcd, daemons):
    root, a, b = start_peers(tmp_path, etcd, daemons)
    ghost = (field(1, "ghost") + field(2, f"127.0.0.1:{free_port()}") + field(3, 8) + field(4, 80 << 30)
             + field(5, str(root)))
    etcd.put("/metaload/members/ghost", ghost)  # no lease: it would outlive every daemon
    for d in (a, b):
        wait_for(lambda: 'registry: skipped etcd key "/metaload/members/ghost": has no lease' in d.logs(),
                 what=f"{d.name} to skip the leaseless member")
        assert member_names(d) == ["a", "b"]
        assert plan_nodes("tiny", d) == ["a", "b"]
    assert b.logs().count('skipped etcd key "/metaload/members/ghost"') == 1, "logged once per write"


def test_junk_keys_of_a_mib_are_skipped_naming_each_and_every_peer_plans_over_every_member(
        tmp_path, large_etcd, daemons):
    root, a, b, c = start_peers(tmp_path, large_etcd, daemons, names=("a", "b", "c"))
    lease = large_etcd.grant_lease(60)  # junk under a lease, as a member's key: it is fetched
    junk = bytes(1 << 20)
    for i in range(3):
        large_etcd.put(f"/metaload/members/junk{i}", junk, lease=lease)
        large_etcd.put(f"/metaload/models/a/junk{i}", junk)
    # One too large to receive at all (the peers' receive limit is 2 MiB by default).
    large_etcd.put("/metaload/members/huge", bytes(3 << 20), lease=lease)
    lines = [*(f'registry: skipped etcd key "/metaload/members/junk{i}": a value of 1048576 bytes, above the '
               "81920 a member's NodeInfo takes at most: refused unparsed" for i in range(3)),
             *(f'registry: skipped etcd key "/metaload/models/a/junk{i}": not a model record (magic ' for i in range(3)),
             'registry: skipped etcd key "/metaload/members/huge": a value too large to receive, refused unread '
             f"(etcd {large_etcd.endpoint}: Range /metaload/members/huge: Received message larger than max ("]
    # Longer than member_timeout: a peer that cannot read the members keeps them that long.
    seen = watch_members([a, b, c], MEMBER_TIMEOUT_S + 2)
    assert all(names == ("a", "b", "c") for _, names in seen), f"a peer lost members: {sorted(set(seen))}"
    for d in (a, b, c):
        assert plan_nodes("tiny", d) == ["a", "b", "c"], d.name
    for d in (a, b, c):
        for line in lines:
            wait_for(lambda: line in d.logs(), what=f"{d.name} to skip {line[:60]}")
    for d in (a, b, c):
        for line in lines:
            assert d.logs().count(line) == 1, f"{d.name}: logged once per write: {line}"
        assert "(retrying)" not in d.logs(), d.logs()[-3000:]  # before: every member range failed


def watch_members(peers, seconds):
    """Every member list each peer showed over `seconds`."""
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen += [(d.name, tuple(member_names(d))) for d in peers]
    return seen


def test_a_record_over_the_cap_is_refused_naming_key_and_size_and_no_peer_goes_down(tmp_path, large_etcd, daemons):
    root, a, b = start_peers(tmp_path, large_etcd, daemons)
    # Above the cap: read, never decoded. More than a MiB above it: not even received.
    mid = forged_record(large_etcd, "mid", 1_500_000)
    big = forged_record(large_etcd, "big", 4_800_000)
    large_etcd.put("/metaload/models/a/mid", mid)
    large_etcd.put("/metaload/models/a/big", big)
    lines = [f'registry: skipped etcd key "/metaload/models/a/mid": a record of {len(mid)} bytes, above '
             f"registry_max_record_size (1048576 bytes): refused undecoded",
             'registry: skipped etcd key "/metaload/models/a/big": a record above registry_max_record_size '
             f"(1048576 bytes): refused unread (etcd {large_etcd.endpoint}: Range /metaload/models/a/big: "
             "Received message larger than max ("]  # (its size vs. the limit)
    seen = watch_members([a, b], MEMBER_TIMEOUT_S + 4)
    for d in (a, b):
        for line in lines:
            wait_for(lambda: line in d.logs(), what=f"{d.name} to refuse the record")
            assert d.logs().count(line) == 1, "logged once per write"
    assert all(names == ("a", "b") for _, names in seen), f"a peer went down: {seen}"
    assert EXPIRED not in a.logs() + b.logs(), b.logs()
    for name in ("mid", "big"):
        proc = metactl("plan", name, "--daemon", b.address, "--format", "json", check=None)
        assert proc.returncode != 0 and f'no model "{name}" is registered' in proc.stderr, proc.stderr
    assert plan_nodes("tiny", b) == ["a", "b"]


def test_a_41_mib_record_is_refused_unread_and_sigterm_stops_the_peer_within_shutdown_grace(
        tmp_path, large_etcd, daemons):
    # etcd itself sends the 41 MiB value to every Range of the models (each peer refuses it past
    # its receive limit): on a loaded machine that stalled etcd for seconds and let 4 s leases
    # expire while no metad did any work. Leases of 10 s outlast etcd's stall; before the fix
    # the record was applied (~6 s a peer), which the first wait below refuses anyway.
    root, a, b = start_peers(tmp_path, large_etcd, daemons, member_timeout_s=10)
    large_etcd.put("/metaload/models/a/huge", forged_record(large_etcd, "huge", 41 << 20))
    for d in (a, b):
        wait_for(lambda: 'registry: skipped etcd key "/metaload/models/a/huge": a record above '
                 'registry_max_record_size (1048576 bytes): refused unread' in d.logs(),
                 timeout=20, what=f"{d.name} to refuse the record")
    # Before: each peer spent ~6 s on the record and its lease expired meanwhile.
    seen = watch_members([a, b], MEMBER_TIMEOUT_S)
    assert all(names == ("a", "b") for _, names in seen), f"a peer went down: {seen}"
    assert EXPIRED not in a.logs() + b.logs(), b.logs()
    started = time.monotonic()
    assert b.stop() == 0
    stop_s = time.monotonic() - started
    print(f"SIGTERM to exit with a 41 MiB record in etcd: {stop_s:.2f} s")
    assert stop_s < SHUTDOWN_GRACE_S, f"{stop_s:.2f} s"


def test_a_record_that_takes_seconds_to_apply_never_delays_the_lease_keep_alives(tmp_path, large_etcd, daemons):
    # The cap raised above the record: it is applied (1.6 s of work on an idle machine, ~6 s
    # with builds beside it), while the lease, renewed on a thread of its own, stays alive
    # (before: renewed between records, the lease, of etcd's shortest TTL here, expired when
    # applying took longer than it).
    root, a, b = start_peers(tmp_path, large_etcd, daemons, extra=["registry_max_record_size: 64MiB"],
                             member_timeout_s=3)
    large_etcd.put("/metaload/models/a/huge", forged_record(large_etcd, "huge", 41 << 20))
    for d in (a, b):
        wait_for(lambda: "model huge (registered on a) read from" in d.logs(), timeout=60,
                 what=f"{d.name} to apply the record")
    assert EXPIRED not in a.logs() + b.logs(), b.logs()
    assert member_names(a) == ["a", "b"] and member_names(b) == ["a", "b"]


@pytest.mark.parametrize("value, message", [
    ("32KiB", 'registry_max_record_size: 32KiB is outside 64KiB..1GiB'),
    ("lots", "registry_max_record_size: "),
])
def test_a_bad_registry_max_record_size_exits_2_naming_the_key(tmp_path, etcd, value, message):
    import subprocess
    from conftest import METAD
    config = tmp_path / "bad.yaml"
    config.write_text(f"node: x\nlisten: 127.0.0.1:0\nregistry: etcd://{etcd.endpoint}\n"
                      f"registry_max_record_size: {value}\n")
    proc = subprocess.run([str(METAD), "--node-config", str(config)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and message in proc.stderr, proc
