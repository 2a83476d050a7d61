"""Roles (issue 23), on real daemons: a coordinator a and a node agent b with a token per role
(`auth_tokens`). Before roles, any token holder could register, replace a model every rank
loads, take a killed member's name, and read every daemon's roots; now each role does its own
calls only, and a name stays its first identity's until an admin releases it."""
import re

import pytest

from checkpoints import llama_like_tensors, save_sharded
from conftest import Daemon, free_port, metactl, wait_for
from ranks import check_reports, run_ranks
from role_tokens import auth, write_tokens


ROLES = ("reader", "node-b", "stranger", "admin")


@pytest.fixture
def tokens(tmp_path):
    return write_tokens(tmp_path / "tokens", ROLES)


def as_(tokens, who):
    return ["--token-file", tokens / f"{who}.token"]


def test_each_role_does_its_own_calls_and_a_killed_members_name_is_not_taken(tmp_path, daemons, tokens):
    root_a = tmp_path / "storage"  # shared by a and b
    tensors = llama_like_tensors()
    ckpt = save_sharded(tensors, root_a / "llama-tiny", shards=2)
    a = daemons("a", [root_a], extra=[*auth(tokens, ["node-b", "stranger"]), "member_timeout: 2s"])
    b = daemons("b", [root_a], coordinator=a.address, extra=auth(tokens, ["node-b"]))
    assert "roles: tokens: 1 reader, 2 member, 1 admin" in a.logs()
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address, *as_(tokens, "admin")).stdout,
             what="node b to join with its member token")
    assert "node b joined from" in a.logs() and "as token:member:node-b.token" in a.logs()

    # A reader (what ranks hold) and a member (what daemons hold) do not register.
    for who, holds in (("reader", "reader"), ("node-b", "reader, member")):
        out = metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", b.address, *as_(tokens, who), check=2)
        assert (f"b: RegisterModel needs the admin role; this caller (token:{'reader' if who == 'reader' else 'member'}"
                f":{who}.token) holds {holds}") in out.stderr, out.stderr
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", b.address, *as_(tokens, "admin"), check=0)
    # --replace on the agent: b forwards it with the admin token of its config.
    metactl("register", "tiny", "--checkpoint", ckpt, "--replace", "--daemon", b.address, *as_(tokens, "admin"),
            check=0)

    # Ranks with the reader token load bit-exact, streamed, with b's plan.
    results = run_ranks(tmp_path, "tiny", [b, b], extra=["--source", "stream", *map(str, as_(tokens, "reader"))])
    check_reports(results, tensors)

    # A reader's status shows no roots (its model's folder it may ask for anyway); an admin's does.
    seen = metactl("status", "--daemon", a.address, *as_(tokens, "reader"), check=0).stdout
    assert f"roots [{root_a}]" not in seen and "roots []" in seen and f"from {root_a}/llama-tiny" in seen, seen
    assert f"roots [{root_a}]" in metactl("status", "--daemon", a.address, *as_(tokens, "admin"), check=0).stdout

    # b is killed; a stranger with another member token claims its name, and is refused.
    b.kill9()
    wait_for(lambda: re.search(r"^  b +down ", metactl("status", "--daemon", a.address, *as_(tokens, "admin")).stdout,
                               re.M), what="killed b to be down")
    folder = tmp_path / "stranger"
    folder.mkdir()
    stranger = Daemon(folder, "b", [folder], coordinator=a.address, extra=["auth_tokens:", f"  member: {tokens}/stranger.token"])
    try:
        refusal = ('node "b" joined as token:member:node-b.token; a Join as token:member:stranger.token may not '
                   'take it (it is down, not released)')
        try:
            wait_for(lambda: refusal in stranger.logs(), what="the stranger's Join to be refused")
        except AssertionError:
            raise AssertionError(f"stranger:\n{stranger.logs()}\na:\n{a.logs()[-3000:]}")
        out = metactl("release", "b", "--daemon", a.address, *as_(tokens, "node-b"), check=2)
        assert "Join (release) needs the admin role; this caller (token:member:node-b.token)" in out.stderr
        assert metactl("release", "b", "--daemon", a.address, *as_(tokens, "admin"), check=0).stdout == "released b\n"
        assert "node b released by token:admin:admin.token" in a.logs()
        wait_for(lambda: "as token:member:stranger.token, serving at" in a.logs(),
                 what="the stranger to join once an admin released the name")
        out = metactl("release", "nobody", "--daemon", a.address, *as_(tokens, "admin"), check=2)
        assert 'node "nobody" is not a member' in out.stderr
    finally:
        assert stranger.stop() == 0


def test_a_members_name_stays_bound_across_a_restart_of_the_coordinator(tmp_path, daemons, tokens):
    """With a state_dir, whose each name is outlives the coordinator (state_dir/members/<node>.id):
    b is killed, the coordinator restarts, and a stranger with another member token is refused
    b's name as before the restart; the real b takes it back. Before, the restarted coordinator
    had forgotten every binding and the stranger's first Join took the name."""
    root = tmp_path / "root"
    root.mkdir()
    state = tmp_path / "state"
    a = daemons("a", [root], port=free_port(),
                extra=[*auth(tokens, ["node-b", "stranger"]), "member_timeout: 2s", f"state_dir: {state}"])
    b = daemons("b", [root], coordinator=a.address, extra=auth(tokens, ["node-b"]))
    wait_for(lambda: "as token:member:node-b.token, serving at" in a.logs(), what="b to join")
    wait_for(lambda: (state / "members" / "b.id").is_file(), what="b's binding to be kept")
    assert (state / "members" / "b.id").read_text() == "token:member:node-b.token\n"

    b.kill9()
    assert a.stop() == 0
    a.restart()
    assert "members: 1 names bound before the restart, each held for its own identity" in a.logs()
    status = metactl("status", "--daemon", a.address, *as_(tokens, "admin"), check=0).stdout
    assert re.search(r"^  b +down ", status, re.M), status

    folder = tmp_path / "stranger"
    folder.mkdir()
    stranger = Daemon(folder, "b", [folder], coordinator=a.address,
                      extra=["auth_tokens:", f"  member: {tokens}/stranger.token"])
    try:
        refusal = ('node "b" joined as token:member:node-b.token; a Join as token:member:stranger.token may not '
                   'take it (it is down, not released)')
        wait_for(lambda: refusal in stranger.logs(), what="the stranger's Join to be refused after the restart")
    finally:
        assert stranger.stop() == 0
    b.restart()
    wait_for(lambda: re.search(r"^  b +up ", metactl("status", "--daemon", a.address, *as_(tokens, "admin")).stdout,
                               re.M), what="the real b to take its name back")
    # Stopped (leaving keeps the name), then released by an admin: the binding goes from
    # state_dir too.
    assert b.stop() == 0
    assert (state / "members" / "b.id").is_file()
    metactl("release", "b", "--daemon", a.address, *as_(tokens, "admin"), check=0)
    wait_for(lambda: not (state / "members" / "b.id").exists(), what="b's binding to be removed")
