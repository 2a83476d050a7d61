"""TLS, mutual TLS and bearer tokens on every connection to metad (docs/security.md).

A CA, daemon and client certificates are made with `openssl` at test time. Each test runs real
daemons and real `metactl` processes and asserts on the exit code, the message, and the bytes
that arrived.
"""
import os
import re
import subprocess
import textwrap
import time

import pytest

from checkpoints import llama_like_tensors, save_sharded
from conftest import BUILD_DIR, METAD, Daemon, metactl, wait_for
from ranks import check_reports, run_ranks

TOKEN = "s3cret-token-0123456789"


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """ca.pem signs node-a, node-b, node-c, client, mallory, nameless and san-only; other-ca.pem signs rogue."""
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
                 "-subj", f"/CN={ca}", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                               "extendedKeyUsage=serverAuth,clientAuth\n")
    for name, ca in (("node-a", "ca"), ("node-b", "ca"), ("node-c", "ca"), ("client", "ca"), ("mallory", "ca"),
                     ("rogue", "other-ca")):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", "san.ext", cwd=d)
    # Signed by ca.pem but naming no common name (issue 35): "nameless" names no one at all,
    # "san-only" only a subject alternative name.
    (d / "nameless.ext").write_text("extendedKeyUsage=clientAuth\n")
    (d / "san-only.ext").write_text("subjectAltName=DNS:node-x\nextendedKeyUsage=clientAuth\n")
    for name in ("nameless", "san-only"):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", "/O=metaload", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    (d / "token").write_text(TOKEN + "\n")
    (d / "wrong-token").write_text("not-the-token\n")
    return d


def secure(pki, cert, token=True, mutual=True):
    """Node config lines: TLS with `cert`, client certificates under ca.pem, the token."""
    tls = f"tls: {{cert: {pki}/{cert}.pem, key: {pki}/{cert}.key"
    # The nodes are a and b; their certificates node-a and node-b.
    tls += f", client_ca: {pki}/ca.pem, node_certificate: \"node-{{node}}\"}}" if mutual else f", ca: {pki}/ca.pem}}"
    return [tls] + ([f"auth_token_file: {pki}/token"] if token else [])


def client_flags(pki, cert="client", token="token", ca="ca"):
    flags = ["--tls-ca", pki / f"{ca}.pem"]
    if cert:
        flags += ["--tls-cert", pki / f"{cert}.pem", "--tls-key", pki / f"{cert}.key"]
    if token:
        flags += ["--token-file", pki / token]
    return flags


@pytest.fixture
def secure_cluster(tmp_path, daemons, pki):
    """a holds the checkpoint and coordinates; b (an empty root) joins it; mutual TLS + token."""
    root_a, root_b = tmp_path / "storage-a", tmp_path / "storage-b"
    root_b.mkdir()
    tensors = llama_like_tensors()
    ckpt = save_sharded(tensors, root_a / "llama-tiny", shards=3)
    a = daemons("a", [root_a], extra=secure(pki, "node-a"))
    b = daemons("b", [root_b], coordinator=a.address, extra=secure(pki, "node-b"))
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, *client_flags(pki), check=0)
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address, *client_flags(pki)).stdout,
             what="node b to join over mutual TLS")
    return {"a": a, "b": b, "tensors": tensors, "root_a": root_a}


def test_secure_cluster_loads_bit_exact_direct_and_stream(tmp_path, secure_cluster, pki):
    a, b, hidden = secure_cluster["a"], secure_cluster["b"], secure_cluster["root_a"]
    results = run_ranks(tmp_path, "tiny", [a, a, b, b], blind={2: hidden, 3: hidden},
                        extra=[str(f) for f in client_flags(pki)])
    check_reports(results, secure_cluster["tensors"])
    for rank, (rc, out, err, report) in enumerate(results):
        assert {t["source"] for t in report["tensors"]} == ({"direct"} if rank < 2 else {"stream:a"}), rank
        assert "verified (gloo): 0 tensors on meta or unfilled across 4 ranks" in out
        assert TOKEN not in out + err
    assert "joined from" in a.logs() and "as cert:node-b" in a.logs()


def test_ranks_take_credentials_from_the_environment(tmp_path, secure_cluster, pki, monkeypatch):
    # What torchrun-launched ranks use: no flags, METALOAD_* variables.
    for var, name in (("METALOAD_TLS_CA", "ca.pem"), ("METALOAD_TLS_CERT", "client.pem"),
                      ("METALOAD_TLS_KEY", "client.key"), ("METALOAD_TOKEN_FILE", "token")):
        monkeypatch.setenv(var, str(pki / name))
    b = secure_cluster["b"]
    results = run_ranks(tmp_path, "tiny", [b, b], extra=["--source", "stream"])
    check_reports(results, secure_cluster["tensors"])
    for rc, out, err, report in results:
        assert {t["source"] for t in report["tensors"]} == {"stream:a"}


def test_plaintext_client_against_tls_daemon_fails_clearly(secure_cluster):
    out = metactl("status", "--daemon", secure_cluster["a"].address, "--timeout", "5", check=1)
    assert "the daemon closed the connection at once: if it uses TLS, give --tls-ca" in out.stderr


def test_client_with_the_wrong_ca_fails(secure_cluster, pki):
    out = metactl("status", "--daemon", secure_cluster["a"].address, "--timeout", "5",
                  *client_flags(pki, ca="other-ca"), check=2)
    assert "server certificate not signed by the given CA (--tls-ca, METALOAD_TLS_CA)" in out.stderr


def test_mutual_tls_refuses_a_client_without_a_certificate_or_with_a_foreign_one(secure_cluster, pki):
    a = secure_cluster["a"]
    out = metactl("status", "--daemon", a.address, "--timeout", "5", *client_flags(pki, cert=None), check=1)
    assert "it requires a client certificate (--tls-cert and --tls-key" in out.stderr
    out = metactl("status", "--daemon", a.address, "--timeout", "5", *client_flags(pki, cert="rogue"), check=1)
    assert "it refused this client certificate" in out.stderr


def test_a_wrong_or_missing_token_is_unauthenticated_and_never_printed(tmp_path, secure_cluster, pki):
    a = secure_cluster["a"]
    out = metactl("status", "--daemon", a.address, *client_flags(pki, token="wrong-token"), check=2)
    assert "a: token refused: it is not this metad's auth_token_file" in out.stderr
    assert "not-the-token" not in out.stderr + out.stdout
    out = metactl("status", "--daemon", a.address, *client_flags(pki, token=None), check=2)
    assert "a: no token: this metad requires `authorization: Bearer <token>`" in out.stderr
    # A rank, too: it fails before reading a byte, exit 2, naming the refusal.
    results = run_ranks(tmp_path, "tiny", [a], extra=[str(f) for f in client_flags(pki, token="wrong-token")])
    rc, out, err, _ = results[0]
    assert rc == 2, err
    assert "token refused" in err and "not-the-token" not in out + err and TOKEN not in out + err


def test_bad_client_credential_files_are_bad_input(secure_cluster, pki, tmp_path):
    a = secure_cluster["a"]
    out = metactl("status", "--daemon", a.address, "--tls-ca", tmp_path / "nope.pem", check=2)
    assert "--tls-ca: cannot open" in out.stderr and "nope.pem" in out.stderr
    out = metactl("status", "--daemon", a.address, "--tls-ca", pki / "token", check=2)
    assert f"--tls-ca: {pki}/token is not a PEM CA certificate" in out.stderr
    out = metactl("status", "--daemon", a.address, "--tls-cert", pki / "client.pem", check=2)
    assert "--tls-cert is set but not --tls-key (METALOAD_TLS_KEY)" in out.stderr
    empty = tmp_path / "empty-token"
    empty.write_text("\n")
    out = metactl("status", "--daemon", a.address, env={"METALOAD_TOKEN_FILE": str(empty)}, check=2)
    assert f"METALOAD_TOKEN_FILE: {empty} is empty" in out.stderr


def _members(a, pki):
    return metactl("status", "--daemon", a.address, *client_flags(pki), check=0).stdout


def test_the_join_attack_is_refused_with_credentials(tmp_path, daemons, secure_cluster, pki):
    """Issue 13's attack: a daemon joins claiming a node with roots [/] to serve every file,
    another takes a member's name. With mutual TLS and a token, neither gets in."""
    a, b = secure_cluster["a"], secure_cluster["b"]
    # No credentials at all: refused at the TLS handshake, retried, never a member.
    fake = daemons("fake", ["/"], coordinator=a.address)
    # A certificate from the CA (an insider's) and the token, claiming b's name; then the
    # coordinator's own name. Their own folders: their configs and logs are named by node.
    impostors = []
    try:
        for name in ("b", "a"):
            folder = tmp_path / f"impostor-{name}"
            folder.mkdir()
            impostors.append(Daemon(folder, name, [folder], coordinator=a.address, extra=secure(pki, "mallory")))
        thief, usurper = impostors
        # Under mutual TLS a member is who its certificate names (issue 23): neither b's name nor
        # the coordinator's is mallory's.
        wait_for(lambda: 'certificate named "node-b"; this one is named "mallory"' in thief.logs()
                 and 'certificate named "node-a"; this one is named "mallory"' in usurper.logs(),
                 what="the impostors' joins to be refused")
        time.sleep(2.5)  # more than one re-join round (every 2 s)
        members = _members(a, pki)
        assert "members (2 up of 2)" in members, members
        assert "fake" not in members and "impostor" not in members, members
        assert "closed the connection" in fake.logs()
        assert ('node "b" may join only with a certificate named "node-b"; this one is named "mallory" '
                '(tls.node_certificate in the coordinator\'s config') in thief.logs()
        assert 'Join of node "b" from' in a.logs() and 'refused: node "b" may join only' in a.logs()
    finally:
        for d in impostors:
            assert d.stop() == 0
    # Ranks still read the real bytes from the real servers.
    results = run_ranks(tmp_path, "tiny", [b, b], extra=["--source", "stream", *map(str, client_flags(pki))])
    check_reports(results, secure_cluster["tensors"])
    for rc, out, err, report in results:
        assert {t["source"] for t in report["tensors"]} == {"stream:a"}


def _join_as(a, pki, cert, node):
    """One Join of `node` straight to a (join_probe) with `cert` and the token: its answer line."""
    env = dict(os.environ, METALOAD_TLS_CA=str(pki / "ca.pem"), METALOAD_TLS_CERT=str(pki / f"{cert}.pem"),
               METALOAD_TLS_KEY=str(pki / f"{cert}.key"), METALOAD_TOKEN_FILE=str(pki / "token"))
    out = subprocess.run([str(BUILD_DIR / "tests" / "join_probe"), a.address, "join", node], env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    code, _, rest = out.strip().partition(" ")
    return code, rest.partition(" ")[2]


@pytest.mark.parametrize("cert,refusal", [
    ("nameless", 'node "x" may join only with a certificate named "node-x"; this client certificate names no '
                 "one (no common name, no subject alternative name), and a certificate without a name never "
                 "becomes a member"),
    ("san-only", 'node "b" may join only with a certificate named "node-b"; this one is named "node-x" '
                 "(tls.node_certificate in the coordinator's config: docs/security.md)"),
])
def test_a_certificate_without_a_common_name_joins_as_no_one_else(tmp_path, secure_cluster, pki, cert, refusal):
    """Issue 35: with tls.roles unset, a CA-signed certificate with no common name joined as
    node x and, once b was released, as b: its empty name skipped the certificate name rule.
    Now a certificate is named by its common name, else its first subject alternative name; one
    with neither never becomes a member, and one with only DNS:node-x joins as x and nothing else."""
    a, b = secure_cluster["a"], secure_cluster["b"]
    assert b.stop() == 0  # b left; its name stays bound to cert:node-b until released
    metactl("release", "b", "--daemon", a.address, *client_flags(pki), check=0)
    first = _join_as(a, pki, cert, "x")
    taken = _join_as(a, pki, cert, "b")
    members = _members(a, pki)
    if cert == "nameless":
        assert first == ("PERMISSION_DENIED", refusal), first
        assert taken[0] == "PERMISSION_DENIED" and "names no one" in taken[1], taken
        assert not re.search(r"^  [xb] ", members, re.M), members
    else:
        assert first == ("OK", ""), first  # node-{node} with DNS:node-x: x's certificate
        assert taken == ("PERMISSION_DENIED", refusal), taken
        assert not re.search(r"^  b ", members, re.M), members
    assert 'Join of node "b" from' in a.logs()


def test_the_join_attack_without_credentials_shows_what_is_exposed(tmp_path, daemons):
    """The same fake join against a daemon with no TLS and no token (allowed only on
    loopback): it becomes a member. This is why a cluster off loopback must use credentials."""
    root = tmp_path / "storage"
    root.mkdir()
    a = daemons("a", [root])
    fake = daemons("fake", ["/"], coordinator=a.address)
    wait_for(lambda: "fake " in metactl("status", "--daemon", a.address).stdout, what="the fake node to join")
    assert "as anonymous" in a.logs()
    fake.stop()


@pytest.mark.parametrize("lines,message", [
    (["listen: 0.0.0.0:0"], "listen: 0.0.0.0:0 is not a loopback address, and there is no `tls`"),
    (["coordinator: 10.0.0.1:7070"], "coordinator: 10.0.0.1:7070 is not a loopback address"),
    # TLS that asks nobody who they are, off loopback (issue 23: anonymous clients joined with `/`).
    (["listen: 0.0.0.0:0", "tls: {cert: /a.pem, key: /a.key}"],
     "tls: listen: 0.0.0.0:0 is not a loopback address, and `tls` has no client_ca and there is no "
     "auth_token_file: anyone who can reach it could read the weights and join the cluster"),
    (["listen: 0.0.0.0:0", "tls: {cert: /a.pem, key: /a.key, ca: /c.pem}"], "`tls` has no client_ca"),
    (["tls: {cert: /x.pem}"], "tls: needs both cert and key"),
    (["tls: {cert: x.pem, key: /x.key}"], "tls.cert: \"x.pem\" must be an absolute path"),
    (["tls: {cert: /a.pem, key: /a.key, cliet_ca: /c.pem}"], "tls: \"cliet_ca\": unknown key"),
    (["tls: [/a.pem]"], "tls: must be a mapping"),
    (["allow_insecure: yes"], "allow_insecure: \"yes\" is not true or false"),
    (["auth_token_file: relative"], "auth_token_file: \"relative\" must be an absolute path"),
    (["tls: {cert: /nonexistent.pem, key: /nonexistent.key}"], "tls.cert: cannot open /nonexistent.pem"),
    (["auth_token_file: /nonexistent-token"], "auth_token_file: cannot open /nonexistent-token"),
    # Roles (issue 23).
    (["auth_token_file: /t", "auth_tokens: {reader: /r}"],
     "auth_tokens: excludes auth_token_file (one token with every role): keep one of them"),
    (["auth_tokens: {readers: /r}"], 'auth_tokens: "readers": unknown role (known: reader, member, admin)'),
    (["auth_tokens: {reader: relative}"], 'auth_tokens.reader: "relative" must be an absolute path'),
    (["auth_tokens: {}"], "auth_tokens: names no token file"),
    (["auth_tokens: {admin: /nonexistent-admin}"], "auth_tokens.admin: cannot open /nonexistent-admin"),
    (["tls: {cert: /a.pem, key: /a.key, roles: {admin: [alice]}}"],
     "tls.roles: needs tls.client_ca: roles are read from client certificates"),
    (["tls: {cert: /a.pem, key: /a.key, client_ca: /c.pem, node_certificate: node}"],
     'tls.node_certificate: "node" must contain {node} once'),
    # Identities that would not read back from state_dir (issue 35).
    (['auth_tokens: {member: "/t/node b.token"}'],
     'auth_tokens.member: "/t/node b.token": its file name "node b.token" may hold only printable ASCII '
     "characters other than space, '\"' and '\\' (it names the token's holder, token:<role>:<file name>, in "
     "logs and in state_dir): rename the file"),
    (['tls: {cert: /a.pem, key: /a.key, client_ca: /c.pem, node_certificate: "metad {node}"}'],
     'tls.node_certificate: the pattern "metad {node}" may hold only printable ASCII characters'),
])
def test_insecure_or_broken_security_config_exits_2(tmp_path, lines, message):
    config = tmp_path / "node.yaml"
    body = [line for line in ["node: n", "listen: 127.0.0.1:0"] if not any(
        line.split(":")[0] == other.split(":")[0] for other in lines)]
    config.write_text("\n".join(body + lines) + "\n")
    proc = subprocess.run([str(METAD), "--node-config", str(config)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr


def test_certificate_roles_decide_what_each_client_certificate_may_do(tmp_path, daemons, pki):
    """tls.roles: mallory's certificate (any CA-signed one) only reads; client's registers. Before
    roles, every certificate the CA signed could register, replace and join (issue 23)."""
    root = tmp_path / "storage"
    ckpt = save_sharded(llama_like_tensors(), root / "llama-tiny", shards=2)
    tls = secure(pki, "node-a", token=False)[0].rstrip("}") + ", roles: {admin: [client], member: [\"node-*\"], " \
        "reader: [\"*\"]}}"
    a = daemons("a", [root], extra=[tls])
    out = metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address,
                  *client_flags(pki, cert="mallory", token=None), check=2)
    assert "a: RegisterModel needs the admin role; this caller (cert:mallory) holds reader" in out.stderr, out.stderr
    metactl("register", "tiny", "--checkpoint", ckpt, "--daemon", a.address, *client_flags(pki, token=None), check=0)
    out = metactl("status", "--daemon", a.address, *client_flags(pki, cert="mallory", token=None), check=0)
    assert "tiny" in out.stdout and f"roots [{root}]" not in out.stdout


def test_tls_without_client_authentication_off_loopback_needs_allow_insecure_and_says_so(tmp_path, daemons, pki):
    # Refused without allow_insecure (the parametrized case above); with it, it starts and warns.
    tls_only = secure(pki, "node-a", token=False, mutual=False)
    d = daemons("tls-only", [tmp_path], extra=[*tls_only, "allow_insecure: true"], host="0.0.0.0")
    wait_for(lambda: "security: TLS" in d.logs(), what="the security line")
    assert "INSECURE: allow_insecure is set and 0.0.0.0:0 accepts any client over TLS (no client_ca, no token)" \
        in d.logs(), d.logs()
    # A token is client authentication: it starts off loopback without allow_insecure, quietly.
    t = daemons("tls-token", [tmp_path], extra=secure(pki, "node-b", token=True, mutual=False), host="0.0.0.0")
    wait_for(lambda: "security: TLS" in t.logs(), what="the security line")
    assert "INSECURE" not in t.logs(), t.logs()


def test_allow_insecure_starts_and_says_so_loudly(tmp_path, daemons):
    d = daemons("open", [tmp_path], extra=["allow_insecure: true"], host="127.0.0.1")
    wait_for(lambda: "security: plaintext, no token" in d.logs(), what="the security line")
    assert "INSECURE: allow_insecure is set" in d.logs()


def test_the_python_package_takes_credentials_from_the_environment(secure_cluster, pki):
    """`import metaload` in a rank launched with METALOAD_* set: the bytes arrive over mutual
    TLS with the token; with a wrong token the load fails naming the refusal."""
    import json
    from checkpoints import tensor_sha256
    from pyproc import python
    b = secure_cluster["b"]
    code = textwrap.dedent(f"""
        import hashlib, json, metaload, torch
        t = metaload.load("tiny", daemon="{b.address}", source="stream", rank=0, world_size=1, verify=False)
        print(json.dumps({{k: hashlib.sha256(v.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
                          for k, v in t.items()}}))
    """)
    env = {"METALOAD_TLS_CA": str(pki / "ca.pem"), "METALOAD_TLS_CERT": str(pki / "client.pem"),
           "METALOAD_TLS_KEY": str(pki / "client.key"), "METALOAD_TOKEN_FILE": str(pki / "token")}
    proc = python(code, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.splitlines()[-1])
    assert loaded == {k: tensor_sha256(v) for k, v in secure_cluster["tensors"].items()}
    env["METALOAD_TOKEN_FILE"] = str(pki / "wrong-token")
    proc = python(code, env=env)
    assert proc.returncode != 0 and "token refused" in proc.stderr, proc.stderr[-3000:]
    assert "not-the-token" not in proc.stderr + proc.stdout


def test_the_python_package_takes_credentials_from_set_credentials(secure_cluster, pki):
    """metaload.set_credentials(...) as metactl's flags: with no METALOAD_* set, the load is
    bit-exact over mutual TLS with the token; a bad file raises BadInputError naming the argument
    and the path; an argument left None falls back to its variable."""
    import json
    from checkpoints import tensor_sha256
    from pyproc import python
    b = secure_cluster["b"]
    code = textwrap.dedent(f"""
        import hashlib, json, metaload, torch
        try:
            metaload.set_credentials(tls_ca="/nonexistent/ca.pem")
        except metaload.BadInputError as e:
            print("refused:", e)
        try:
            metaload.set_credentials(tls_cert="{pki / 'client.pem'}")
        except metaload.BadInputError as e:
            print("refused:", e)
        metaload.set_credentials(tls_ca="{pki / 'ca.pem'}", tls_cert="{pki / 'client.pem'}",
                                 tls_key="{pki / 'client.key'}")
        t = metaload.load("tiny", daemon="{b.address}", source="stream", rank=0, world_size=1, verify=False)
        print(json.dumps({{k: hashlib.sha256(v.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
                          for k, v in t.items()}}))
    """)
    env = {"METALOAD_TOKEN_FILE": str(pki / "token")}  # token_file left None: from the variable
    for name in ("METALOAD_TLS_CA", "METALOAD_TLS_CERT", "METALOAD_TLS_KEY"):
        assert name not in os.environ
    proc = python(code, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "refused: tls_ca: cannot open /nonexistent/ca.pem: No such file or directory", proc.stdout
    assert lines[1] == ("refused: tls_cert is set but not tls_key (METALOAD_TLS_KEY): a client certificate needs "
                        "its private key"), proc.stdout
    loaded = json.loads(lines[-1])
    assert loaded == {k: tensor_sha256(v) for k, v in secure_cluster["tensors"].items()}
    # Without the token, the same credentials are refused by the daemon.
    proc = python(code, env={})
    assert proc.returncode != 0 and "no token" in proc.stderr, proc.stderr[-3000:]
