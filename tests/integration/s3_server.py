"""A real S3 server on loopback for the object-storage tests and the benchmark: moto's standalone
server (`moto[server]`, pinned in scripts/requirements.txt; run by s3_server_main.py, whose ranged
GETs read their range, not the whole object), as its own process on a free port,
with Signature V4 enforced — every request must be signed with the access key made here, a
wrong secret gets 403 SignatureDoesNotMatch (docs/object-storage.md says why moto).

    server = S3Server(tmp_path)                  # or the `s3_server` fixture
    server.create_bucket("models")
    url = server.upload_folder(folder, "models", "llama")   # "s3://models/llama"; multipart past 8 MiB
    metactl("inspect", url, env=server.env())    # AWS_* for our client: endpoint, keys, region
    server.stop()

API: S3Server(tmp, region) -> .endpoint ("http://127.0.0.1:PORT"), .access_key_id,
.secret_access_key, .region; env(**overrides) -> the AWS_* variables a process needs (nothing of
the caller's own AWS_* or ~/.aws leaks in); client(endpoint=) -> a boto3 client signed with the
keys (to this server, or a proxy in front of it);
create_bucket(name); put(bucket, key, data) -> ETag; upload_file(path, bucket, key,
multipart_threshold_bytes, part_bytes) -> ETag; upload_folder(folder, bucket, prefix, ...) ->
"s3://bucket/prefix"; requests() -> the request lines served so far ('GET /bucket/key HTTP/1.1" 206'),
for counting what a reader asked for; stop(). Fixture `s3_server`: one per test, stopped at teardown.
"""
import os
import pathlib
import re
import subprocess
import sys
import urllib.request

import pytest

from conftest import free_port, stop_process, wait_for

MIB = 1 << 20
# S3's smallest part but the last is 5 MiB; moto enforces it as S3 does.
DEFAULT_PART_BYTES = 5 * MIB
DEFAULT_MULTIPART_THRESHOLD_BYTES = 8 * MIB
# What every request is allowed: the tests read, list and write their own buckets.
_POLICY = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}'


def _boto3():
    try:
        import boto3  # noqa: PLC0415 (only the object-storage tests need it)
        import botocore.config  # noqa: PLC0415
    except ImportError:
        pytest.skip("boto3 is absent: `pip install -r scripts/requirements.txt` (moto[server], boto3)")
    return boto3, botocore.config


def require_moto():
    try:
        import moto.server  # noqa: F401, PLC0415
    except ImportError:
        message = "moto[server] is absent: `pip install -r scripts/requirements.txt`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def clean_environment():
    """os.environ less every AWS_* variable (a developer's own profile or endpoint must not
    reach the process under test) and less LD_PRELOAD (the sanitizer runtime, for Python)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "LD_PRELOAD"}


class S3Server:
    """moto's server on 127.0.0.1:<free port>, authentication on, one IAM user allowed s3:*
    whose access key signs every request (`access_key_id`, `secret_access_key`)."""

    def __init__(self, tmp, region="us-east-1"):
        self.region = region
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = open(pathlib.Path(tmp) / f"moto-{self.port}.log", "w+")
        env = clean_environment()
        # Authentication is off until the IAM user and its key exist (moto counts requests
        # before it enforces: INITIAL_NO_AUTH_ACTION_COUNT), then on for every request after.
        env.update(INITIAL_NO_AUTH_ACTION_COUNT="inf", MOTO_ALLOW_NONEXISTENT_REGION="false")
        self.proc = subprocess.Popen([sys.executable, str(pathlib.Path(__file__).with_name("s3_server_main.py")),
                                      "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_for(self._answers, timeout=30, what=f"moto at {self.endpoint}")
            self._make_user()
        except BaseException:
            self.stop()
            raise

    def _answers(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"moto exited {self.proc.returncode}: {self._log_tail()}")
        try:
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2):
                return True
        except OSError:
            return False

    def _log_tail(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-2000:]

    def requests(self):
        """Every request line the server logged so far, colours stripped: 'METHOD PATH HTTP/1.1" STATUS'."""
        self.log.flush()
        text = re.sub(r"\x1b\[[0-9;]*m", "", pathlib.Path(self.log.name).read_text(errors="replace"))
        return re.findall(r'"([A-Z]+ \S+ HTTP/1\.1" \d{3})', text)

    def _make_user(self):
        boto3, _ = _boto3()
        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name=self.region,
                           aws_access_key_id="setup", aws_secret_access_key="setup")
        iam.create_user(UserName="metaload-tests")
        iam.put_user_policy(UserName="metaload-tests", PolicyName="s3", PolicyDocument=_POLICY)
        key = iam.create_access_key(UserName="metaload-tests")["AccessKey"]
        self.access_key_id, self.secret_access_key = key["AccessKeyId"], key["SecretAccessKey"]
        # From now on every request is authenticated (the count of free requests set to 0).
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset-auth", data=b"0", method="POST",
                                         headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200, response.read()

    def env(self, **overrides):
        """The environment for a process that reads this server through the standard AWS
        variables: the caller's AWS_* removed, no shared files, these keys, this endpoint."""
        env = clean_environment()
        env.update(AWS_ACCESS_KEY_ID=self.access_key_id, AWS_SECRET_ACCESS_KEY=self.secret_access_key,
                   AWS_REGION=self.region, AWS_ENDPOINT_URL=self.endpoint,
                   AWS_CONFIG_FILE="/nonexistent/aws-config", AWS_SHARED_CREDENTIALS_FILE="/nonexistent/aws-credentials")
        env.update(overrides)
        return env

    def client(self, secret_access_key=None, endpoint=None):
        boto3, config = _boto3()
        return boto3.client("s3", endpoint_url=endpoint or self.endpoint, region_name=self.region,
                            aws_access_key_id=self.access_key_id,
                            aws_secret_access_key=secret_access_key or self.secret_access_key,
                            config=config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

    def create_bucket(self, name):
        self.client().create_bucket(Bucket=name)

    def put(self, bucket, key, data):
        return self.client().put_object(Bucket=bucket, Key=key, Body=data)["ETag"]

    def upload_file(self, path, bucket, key, multipart_threshold_bytes=DEFAULT_MULTIPART_THRESHOLD_BYTES,
                    part_bytes=DEFAULT_PART_BYTES):
        """One object; a file past the threshold in parts of `part_bytes` (its ETag "<md5>-<parts>")."""
        data = pathlib.Path(path).read_bytes()
        s3 = self.client()
        if len(data) <= multipart_threshold_bytes:
            return s3.put_object(Bucket=bucket, Key=key, Body=data)["ETag"]
        upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        parts = []
        for number, start in enumerate(range(0, len(data), part_bytes), start=1):
            etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number,
                                  Body=data[start:start + part_bytes])["ETag"]
            parts.append({"PartNumber": number, "ETag": etag})
        return s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                            MultipartUpload={"Parts": parts})["ETag"]

    def upload_folder(self, folder, bucket, prefix, **kwargs):
        """Every file under `folder` as prefix/<relative path>; "s3://bucket/prefix"."""
        folder = pathlib.Path(folder)
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                self.upload_file(path, bucket, f"{prefix}/{path.relative_to(folder).as_posix()}", **kwargs)
        return f"s3://{bucket}/{prefix}"

    def stop(self):
        stop_process(self.proc, timeout=10)
        self.log.close()


@pytest.fixture
def s3_server(tmp_path):
    require_moto()
    server = S3Server(tmp_path)
    yield server
    server.stop()
