"""Hostile clients for the integration tests, which have no gRPC or protobuf of their own:
one raw ReadRange (read_range_probe.cc) and forged model records (record_probe.cc)."""
import json
import os
import subprocess

from conftest import BUILD_DIR

READ_RANGE_PROBE = BUILD_DIR / "tests" / "read_range_probe"
RECORD_PROBE = BUILD_DIR / "tests" / "record_probe"


def probe(daemon, model, path, offset, length, bytes_out=None):
    """(code, message) of one ReadRange: "OK" and the number of bytes received, or the gRPC code
    name. With `bytes_out`, every payload byte received (refused or not) is written there."""
    args = [str(READ_RANGE_PROBE), daemon.address, model, str(path), str(offset), str(length)]
    out = subprocess.run(args + ([str(bytes_out)] if bytes_out else []),
                         capture_output=True, text=True, timeout=60, check=True).stdout.rstrip("\n")
    code, _, message = out.partition(" ")
    return code, message


def _env(token_file):
    return dict(os.environ, METALOAD_TOKEN_FILE=str(token_file)) if token_file else None


def layout_record(daemon, model, token_file=None):
    """The model's record as GetLayout gives it (a dict in protobuf JSON, proto field names);
    with `token_file`, asked with that token."""
    out = subprocess.run([str(RECORD_PROBE), "layout", daemon.address, model], capture_output=True, text=True,
                         timeout=60, check=True, env=_env(token_file)).stdout
    return json.loads(out)


def u8(name, file, begin, end):
    """A record's tensor: `end - begin` bytes of `file` from `begin`, as one U8 vector."""
    return {"name": name, "dtype": "U8", "shape": [end - begin], "file": file, "begin_offset": begin,
            "end_offset": end}


def publish(daemon, record, tmp_path, replace=False, token_file=None):
    """(code, message) of a PublishModel of `record` sent straight to `daemon` (with
    `token_file`'s token when given)."""
    path = tmp_path / f"{record['name']}.record.json"
    path.write_text(json.dumps(record))
    out = subprocess.run([str(RECORD_PROBE), "publish", daemon.address, str(path)] + (["replace"] if replace else []),
                         capture_output=True, text=True, timeout=60, check=True,
                         env=_env(token_file)).stdout.rstrip("\n")
    code, _, message = out.partition(" ")
    return code, message


def encoded(record, tmp_path):
    """The bytes a state_dir file (or an etcd value) holds for `record`."""
    path, out = tmp_path / f"{record['name']}.record.json", tmp_path / f"{record['name']}.pb"
    path.write_text(json.dumps(record))
    subprocess.run([str(RECORD_PROBE), "encode", str(path), str(out)], timeout=60, check=True)
    return out.read_bytes()
