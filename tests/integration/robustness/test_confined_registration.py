"""Registration confined like reading (issue 23): a real metad opens every file of a checkpoint
it registers (safetensors headers, model.safetensors.index.json, config.json) beneath its roots,
as ReadRange does, and its errors never show what a file holds.

- A header, an index, a config.json or a folder on the way that is a symlink out of the roots is
  refused, naming the file and the rule; the outside file's bytes appear nowhere: not in
  metactl's output, not in the daemon's log (a secret is put in it, and looked for).
- A symlink out of the roots to a valid checkpoint is refused with --digest too: no digest is
  ever taken of a file outside the roots.
- Files under the root that are not what they claim (a text file named model.safetensors, an
  index that is not JSON) are refused saying what is wrong, never what is there.
- `same_device: true` refuses a hard-linked file, at registration and at ReadRange, and a folder
  bind-mounted into the root.
"""
import json
import os
import shutil

import pytest
import torch
from safetensors.torch import save_file

from checkpoints import llama_like_config, llama_like_tensors, save_sharded
from conftest import metactl
from ranks import run_ranks

SECRET = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
# What a reader that took the file for a safetensors file would show: its first 8 bytes as the
# header's length.
SECRET_AS_LENGTH = str(int.from_bytes(SECRET.encode()[:8], "little"))
OUT_OF_ROOTS = "leads out of this daemon's roots"
MODEL = "confined-model"


def small_tensors():
    return {"embed.weight": torch.arange(24, dtype=torch.float32).reshape(6, 4),
            "head.weight": torch.ones(3, 4, dtype=torch.float32)}


@pytest.fixture
def places(tmp_path):
    root, outside = tmp_path / "storage", tmp_path / "outside"
    (root / "m").mkdir(parents=True)
    outside.mkdir()
    root, outside = root.resolve(), outside.resolve()  # as metad resolves its roots
    return root, outside, root / "m"


def register(daemon, ckpt, *flags, check=None):
    return metactl("register", MODEL, "--checkpoint", ckpt, "--daemon", daemon.address, *flags, check=check)


def assert_nothing_leaked(proc, daemon, *more):
    shown = proc.stdout + proc.stderr + daemon.logs()
    for secret in (SECRET[:12], SECRET[-12:], SECRET_AS_LENGTH, *more):
        assert secret not in shown, shown


def assert_refused_out_of_roots(proc, daemon, path, root):
    assert proc.returncode != 0, proc.stdout
    assert f'"{path}" {OUT_OF_ROOTS} [{root}] through a symbolic link' in proc.stderr, proc.stderr
    assert "metad opens only files beneath its roots" in proc.stderr, proc.stderr
    assert MODEL not in metactl("status", "--daemon", daemon.address, check=0).stdout, "registered anyway"


def header_to_a_secret(outside, model):
    (outside / "secret.env").write_text(SECRET + "\n")
    os.chmod(outside / "secret.env", 0o600)
    (model / "model.safetensors").symlink_to(outside / "secret.env")
    return model / "model.safetensors"


def index_to_a_secret(outside, model):
    # Unterminated: a JSON parser's message would quote it from the opening quote on.
    (outside / "secret.json").write_text('{"weight_map": {"a": "' + SECRET)
    (model / "model.safetensors.index.json").symlink_to(outside / "secret.json")
    return model / "model.safetensors.index.json"


def config_to_a_secret(outside, model):
    save_file(small_tensors(), str(model / "model.safetensors"))
    (outside / "secret.json").write_text(json.dumps(SECRET))
    (model / "config.json").symlink_to(outside / "secret.json")
    return model / "config.json"


def folder_to_a_secret(outside, model):
    shard = "model-00001-of-00001.safetensors"
    (outside / shard).write_text(SECRET)
    (model / "sub").symlink_to(outside, target_is_directory=True)
    (model / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {"embed.weight": f"sub/{shard}"}}))
    return model / "sub" / shard


@pytest.mark.parametrize("make", [header_to_a_secret, index_to_a_secret, config_to_a_secret, folder_to_a_secret],
                         ids=["header", "index", "config", "folder"])
def test_a_symlink_out_of_the_root_is_refused_unread(daemons, places, make):
    root, outside, model = places
    refused_path = make(outside, model)
    a = daemons("a", [root])
    proc = register(a, model)
    assert_refused_out_of_roots(proc, a, refused_path, root)
    assert_nothing_leaked(proc, a)


def test_whether_a_path_outside_the_roots_exists_is_not_told(daemons, places):
    """A dangling symlink out of the roots was "no safetensors checkpoint found", one to a file
    that exists there "leads out of the roots": the difference told whether a path outside
    exists. Both are now refused alike."""
    root, outside, model = places
    (outside / "exists.bin").write_text("x")
    for name, target in (("present", outside / "exists.bin"), ("absent", outside / "no-such-file")):
        (model / name).mkdir()
        (model / name / "model.safetensors").symlink_to(target)
    a = daemons("a", [root])
    for name in ("present", "absent"):
        proc = register(a, model / name)
        assert_refused_out_of_roots(proc, a, model / name / "model.safetensors", root)


def test_a_symlink_to_a_valid_checkpoint_outside_is_refused_and_never_digested(daemons, places):
    root, outside, model = places
    save_file(small_tensors(), str(outside / "elsewhere.safetensors"))
    (model / "model.safetensors").symlink_to(outside / "elsewhere.safetensors")
    a = daemons("a", [root])
    proc = register(a, model, "--digest")
    assert_refused_out_of_roots(proc, a, model / "model.safetensors", root)
    assert "digests of" not in a.logs()


def test_a_symlink_inside_the_root_still_registers(daemons, places):
    """Hugging Face's cache links snapshots/<rev>/model.safetensors to ../../blobs/<hash>: a
    symlink that stays under the root is resolved, as before."""
    root, _, model = places
    (root / "blobs").mkdir()
    save_file(small_tensors(), str(root / "blobs" / "0123abcd"))
    (model / "model.safetensors").symlink_to("../blobs/0123abcd")
    a = daemons("a", [root])
    register(a, model, "--digest", check=0)


def test_a_text_file_named_as_a_header_is_refused_saying_what_is_wrong_not_what_is_there(daemons, places):
    root, _, model = places
    (model / "model.safetensors").write_text(SECRET)
    a = daemons("a", [root])
    proc = register(a, model)
    assert proc.returncode != 0
    assert "model.safetensors: the header length field exceeds the 100000000-byte limit: " \
           "not a safetensors file" in proc.stderr, proc.stderr
    assert_nothing_leaked(proc, a)


def test_a_short_text_file_named_as_a_header_is_refused_without_its_length_field(daemons, places):
    root, _, model = places
    (model / "model.safetensors").write_bytes((40).to_bytes(8, "little") + b"{}")
    a = daemons("a", [root])
    proc = register(a, model)
    assert proc.returncode != 0
    assert "model.safetensors: the header length field exceeds the file size (10 bytes): " \
           "truncated, or not a safetensors file" in proc.stderr, proc.stderr
    assert " 40 " not in proc.stderr


def test_an_index_that_is_not_json_is_refused_by_position_not_by_content(daemons, places):
    root, _, model = places
    (model / "model.safetensors.index.json").write_text('{"weight_map": {"a": "' + SECRET)
    a = daemons("a", [root])
    proc = register(a, model)
    assert proc.returncode != 0
    # The text ends inside the string: the parser stops on the end of input, one past its last byte.
    assert (f"model.safetensors.index.json: invalid JSON at byte {22 + len(SECRET) + 1}: syntax error while "
            "parsing value - invalid string") in proc.stderr, proc.stderr
    assert_nothing_leaked(proc, a)


def test_an_index_value_of_the_wrong_type_is_described_not_quoted(daemons, places):
    root, _, model = places
    (model / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": SECRET}, "weight_map": {}}))
    a = daemons("a", [root])
    proc = register(a, model)
    assert proc.returncode != 0
    assert (f"metadata.total_size must be a non-negative integer (or a string of one), got a string of "
            f"{len(SECRET)} bytes") in proc.stderr, proc.stderr
    assert_nothing_leaked(proc, a)


def test_same_device_refuses_a_hard_link_that_plain_roots_accept(daemons, places):
    root, outside, model = places
    save_file(small_tensors(), str(outside / "real.safetensors"))
    os.link(outside / "real.safetensors", model / "model.safetensors")
    strict = daemons("strict", [root], extra=["same_device: true"])
    proc = register(strict, model)
    assert proc.returncode != 0
    assert (f'"{model / "model.safetensors"}" has 2 hard links (same_device: true refuses hard-linked '
            f"files: another name of the file may lie outside root {root})") in proc.stderr, proc.stderr
    # Documented (docs/node-config.md): without same_device, a hard link is a file of the root.
    plain = daemons("plain", [root])
    register(plain, model, check=0)


def test_same_device_refuses_a_read_of_a_file_hard_linked_after_registration(tmp_path, daemons, places):
    root, outside, model = places
    tensors = llama_like_tensors(layers=1)
    save_sharded(tensors, model, shards=1, config=llama_like_config(layers=1))
    a = daemons("a", [root], extra=["same_device: true"])
    register(a, model, check=0)
    [(rc, _, _, _)] = run_ranks(tmp_path, MODEL, [a], extra=["--source", "stream"])
    assert rc == 0
    shard = model / "model-00001-of-00001.safetensors"
    os.link(shard, outside / "copy.safetensors")
    [(rc, out, err, _)] = run_ranks(tmp_path, MODEL, [a], extra=["--source", "stream"])
    assert rc != 0, out
    assert f'"{shard}" has 2 hard links (same_device: true refuses' in err + a.logs(), err


def bind_mounted(source, target):
    """A command prefix that runs a process with `source` bind-mounted on `target`, in a private
    mount namespace (root only): a folder of another place put inside a root without a symlink."""
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$1" "$2" && shift 2 && exec "$@"', "bind", str(source), str(target))


def test_same_device_refuses_a_folder_bind_mounted_into_the_root(daemons, places):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to bind-mount a folder")
    root, outside, model = places
    save_file(small_tensors(), str(outside / "model.safetensors"))
    (model / "mnt").mkdir()
    plain = daemons("plain", [root], prefix=bind_mounted(outside, model / "mnt"))
    register(plain, model / "mnt", check=0)  # documented: a bind mount is part of the root
    strict = daemons("strict", [root], prefix=bind_mounted(outside, model / "mnt"), extra=["same_device: true"])
    proc = register(strict, model / "mnt")
    assert proc.returncode != 0
    assert (f'"{model / "mnt" / "model.safetensors"}" lies across a mount point below root {root} '
            "(same_device: true refuses files on another mount than their root's)") in proc.stderr, proc.stderr
