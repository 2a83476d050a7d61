"""Checkpoints in an S3 bucket, read through util/fs/s3/ from a real S3 server: moto on
loopback with Signature V4 enforced (tests/integration/s3_server.py). The same checkpoint
from a folder and from the bucket must inspect alike byte for byte and load bit-exact; a
missing bucket, a missing object, wrong keys and an object replaced after registration are
each one exact refusal, with no secret in it.
"""
import json
import re

from checkpoints import llama_like_config, llama_like_tensors, save_sharded
from conftest import metactl
from ranks import check_reports, run_ranks
from s3_server import s3_server  # noqa: F401 (a fixture: a real S3 server on loopback)

BUCKET = "models"
# Two shards of ~13 MB each: both uploaded in 5 MiB parts (multipart ETags), each read in parts.
SHAPE = dict(layers=2, hidden=128, intermediate=352, vocab=49152)
KV = 32  # k and v rows: two kv heads of 16 (llama_like_config's 8 heads over hidden 128)
SHARD = "model-00001-of-00002.safetensors"


def upload(tmp_path, server, config=False):
    """The checkpoint, uploaded; with config.json only where asked (a load's report would list the
    buffers transformers computes from it, which no file holds)."""
    tensors = llama_like_tensors(**SHAPE, kv=KV)
    folder = save_sharded(tensors, tmp_path / "llama", shards=2, config=llama_like_config(**SHAPE) if config else None)
    server.create_bucket(BUCKET)
    return tensors, folder, server.upload_folder(folder, BUCKET, "llama")


def test_inspect_of_the_bucket_is_inspect_of_the_folder(tmp_path, s3_server):
    tensors, folder, url = upload(tmp_path, s3_server, config=True)
    etag = s3_server.client().head_object(Bucket=BUCKET, Key=f"llama/{SHARD}")["ETag"]
    assert re.fullmatch(r'"[0-9a-f]{32}-3"', etag), f"uploaded in 3 parts: {etag}"
    for form in (["--format", "json"], []):
        disk = metactl("inspect", folder, *form, check=0).stdout.replace(str(folder), url)
        bucket = metactl("inspect", url, *form, env=s3_server.env(), check=0).stdout
        assert bucket == disk
        if form:
            assert len(json.loads(bucket)["tensors"]) == len(tensors)
    # skeleton (from config.json, read from the bucket) and plan: the same bytes as from the folder.
    for args in (["skeleton"], ["plan", "--gpus", "2", "--format", "json"]):
        disk = metactl(args[0], folder, *args[1:], check=0).stdout.replace(str(folder), url)
        assert metactl(args[0], url, *args[1:], env=s3_server.env(), check=0).stdout == disk, args


def test_ranks_load_from_the_bucket_bit_exact_in_parts(tmp_path, s3_server, daemons):
    tensors, folder, url = upload(tmp_path, s3_server)
    a = daemons("a", [f"s3://{BUCKET}"], env=s3_server.env())
    metactl("register", "tiny", "--checkpoint", url, "--daemon", a.address, env=s3_server.env(), check=0)

    def ranged_gets():
        return s3_server.requests().count(f'GET /{BUCKET}/llama/{SHARD} HTTP/1.1" 206')

    # The ranks read the bucket themselves (--source direct: under auto they would stream from
    # the daemon, test_s3_read_once.py), so that their own part size decides their GETs.
    before = ranged_gets()
    check_reports(run_ranks(tmp_path, "tiny", [a, a], extra=["--source", "direct"],
                            env_of_rank={r: s3_server.env() for r in (0, 1)}), tensors)
    default_parts = ranged_gets() - before
    # 1 MiB parts: every large read of the shard is split into more ranged GETs, still bit-exact.
    small = s3_server.env(METALOAD_S3_PART_SIZE="1MiB")
    check_reports(run_ranks(tmp_path, "tiny", [a, a], extra=["--source", "direct"],
                            env_of_rank={r: small for r in (0, 1)}), tensors)
    one_mib_parts = ranged_gets() - before - default_parts
    assert s3_server.secret_access_key not in a.logs(), "a daemon never logs the secret key"
    size = (folder / SHARD).stat().st_size
    # The ranks' reads are cut into pieces before they reach the back end: the default parts
    # split few of them, 1 MiB ones every piece over 1 MiB.
    assert one_mib_parts > default_parts and one_mib_parts >= size // (1 << 20), (default_parts, one_mib_parts)


def test_a_missing_bucket_and_a_missing_object_are_named(tmp_path, s3_server):
    upload(tmp_path, s3_server)
    proc = metactl("inspect", "s3://absent-bucket/llama", env=s3_server.env(), check=2)
    assert proc.stderr.strip() == (f"metactl inspect: s3://absent-bucket/llama: no such bucket absent-bucket at "
                                   f"{s3_server.endpoint}"), proc.stderr
    proc = metactl("inspect", f"s3://{BUCKET}/absent", env=s3_server.env(), check=2)
    assert proc.stderr.strip() == f"metactl inspect: s3://{BUCKET}/absent: no such file or folder", proc.stderr
    s3_server.client().delete_object(Bucket=BUCKET, Key=f"llama/{SHARD}")
    proc = metactl("inspect", f"s3://{BUCKET}/llama", env=s3_server.env(), check=2)
    assert f"but s3://{BUCKET}/llama/{SHARD} does not exist" in proc.stderr, proc.stderr


def test_wrong_credentials_are_refused_without_the_secret_or_the_signature(tmp_path, s3_server):
    _, _, url = upload(tmp_path, s3_server)
    secret = "wrongSecretKeyValue0123456789abcdefGHIJ"
    proc = metactl("inspect", url, env=s3_server.env(AWS_SECRET_ACCESS_KEY=secret), check=2)
    assert proc.stderr.strip() == (
        f"metactl inspect: s3://{BUCKET}/llama: {s3_server.endpoint} refused the request (403 SignatureDoesNotMatch: "
        "The request signature we calculated does not match the signature you provided. Check your key and signing "
        f"method.); access key {s3_server.access_key_id} from AWS_ACCESS_KEY_ID"), proc.stderr
    for leak in (secret, s3_server.secret_access_key, "Signature=", "AWS4-HMAC-SHA256"):
        assert leak not in proc.stderr + proc.stdout


def test_an_object_replaced_after_registration_is_refused(tmp_path, s3_server, daemons):
    tensors, folder, url = upload(tmp_path, s3_server)
    a = daemons("a", [f"s3://{BUCKET}"], env=s3_server.env())
    metactl("register", "tiny", "--checkpoint", url, "--daemon", a.address, env=s3_server.env(), check=0)
    # The same size, one byte of a tensor changed: only the ETag tells the versions apart when
    # both land in the same Last-Modified second.
    data = bytearray((folder / SHARD).read_bytes())
    data[-1] ^= 0xFF
    new_etag = s3_server.put(BUCKET, f"llama/{SHARD}", bytes(data))
    results = run_ranks(tmp_path, "tiny", [a], env_of_rank={0: s3_server.env()})
    rc, out, err, _ = results[0]
    assert rc != 0, out
    line = next(line for line in err.splitlines() if "changed since it was registered" in line)
    # The mtime differs too when the put landed in a later second than the upload (it leads), else
    # it is named "as registered" after the size (Last-Modified has whole seconds); the version always.
    assert re.search(rf"s3://{BUCKET}/llama/{SHARD} changed since it was registered: (mtime [^;]+; )?"
                     rf'version {re.escape(new_etag)}, registered "[0-9a-f]{{32}}-3" \(size {len(data)} bytes, as '
                     r"registered(; mtime [^;)]+, as registered)?\); run `metactl register --refresh tiny`", line), line


def test_a_daemon_signs_with_the_credentials_file_of_its_node_config(tmp_path, s3_server, daemons):
    """s3_credentials_file replaces the environment's keys: the daemon's environment has none
    (and a wrong one does not matter), the file's work; ranks that cannot read the bucket
    themselves stream from the daemon, which sends them bytes and never keys."""
    tensors, folder, url = upload(tmp_path, s3_server)
    credentials = tmp_path / "s3-credentials"
    credentials.write_text(f"[default]\naws_access_key_id = {s3_server.access_key_id}\n"
                           f"aws_secret_access_key = {s3_server.secret_access_key}\n")
    daemon_env = s3_server.env(AWS_ACCESS_KEY_ID="AKIAWRONGWRONGWRONG0", AWS_SECRET_ACCESS_KEY="wrong")
    a = daemons("a", [f"s3://{BUCKET}"], env=daemon_env, extra=[f"s3_credentials_file: {credentials}"])
    metactl("register", "tiny", "--checkpoint", url, "--daemon", a.address, check=0)
    no_keys = s3_server.env(AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY="")
    results = run_ranks(tmp_path, "tiny", [a], env_of_rank={0: no_keys})
    check_reports(results, tensors)
    assert {t["source"] for t in results[0][3]["tensors"]} == {"stream:a"}, "the rank had no keys of its own"
    assert s3_server.secret_access_key not in a.logs()


def test_the_readme_recipe_runs_and_verifies():
    """scripts/s3-demo.sh, README.md's object-storage recipe, as a new user runs it: a local S3
    server, the demo checkpoint uploaded, inspect, a metad on s3://, two ranks without keys."""
    import os
    import pathlib
    import subprocess

    from conftest import BUILD_DIR
    from s3_server import require_moto

    require_moto()
    root = pathlib.Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["METALOAD_BUILD_DIR"] = str(BUILD_DIR)
    r = subprocess.run([str(root / "scripts" / "s3-demo.sh")], capture_output=True, text=True, env=env, timeout=300)
    print(r.stdout[-3000:])
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert "model.embed_tokens.weight                       BF16   [32000, 1024]   62.50 MiB" in r.stdout
    # Each rank half the checkpoint's bytes, all streamed through the daemon (no keys of its own).
    for rank in (0, 1):
        assert re.search(rf"rank {rank}: node node-a \(asked node-a\) cpu: \d+ tensors, 105\.51 MiB "
                         r"\(direct 0 B, streamed 105\.51 MiB\)", r.stdout), r.stdout
    assert "content proven: 39 stored tensors checked against their registered fast digests" in r.stdout
    assert "VERDICT: both ranks hold their half" in r.stdout
