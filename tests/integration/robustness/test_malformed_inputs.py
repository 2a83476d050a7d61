"""Malformed inputs that had no end-to-end test (docs/malformed-inputs.md lists them all): a
bad node config makes metad exit 2 naming the file, the key and the problem before it listens;
bad `metactl load` flags and environment exit 2 naming the flag or variable before any daemon
is asked (the address given is one nothing listens on, so a check done too late would exit 1).
"""
import subprocess

import pytest

from conftest import METAD, metactl

BAD_NODE_CONFIGS = [
    ("node: a\ngpu: 8\n", "gpu: unknown key (known: node, listen,"),
    ("gpus: 8\n", "node: required (a unique name for this host)"),
    ("node: a\nchunk_size: 8MiB\n", "chunk_size: 8MiB is outside 4KiB..3MiB"),
    ("node: a\nroots: [/no/such/folder]\n", 'roots: "/no/such/folder" does not exist'),
    ("node: a\nlisten: h:99999\n", 'listen: bad port "99999" in "h:99999"'),
    ("node: a\nshutdown_grace: 30\n", 'shutdown_grace: "30" is not a duration from 0 to 1h'),
    ("node: a\nsame_device: yes-please\n", 'same_device: "yes-please" is not true or false'),
]


@pytest.mark.parametrize("yaml,message", BAD_NODE_CONFIGS, ids=[m.split(":")[0] for _, m in BAD_NODE_CONFIGS])
def test_a_bad_node_config_makes_metad_exit_2_naming_key_and_problem(tmp_path, yaml, message):
    config = tmp_path / "n.yaml"
    config.write_text(yaml)
    proc = subprocess.run([str(METAD), "--node-config", str(config)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"metad: {config}: {message}"), proc.stderr
    assert "listening on" not in proc.stdout


def test_a_node_config_metad_cannot_read_says_why_and_exits_2(tmp_path):
    """Was: "metad: cannot read node config missing.yaml", the reason left out (issue 37)."""
    folder = tmp_path / "a-folder.yaml"
    folder.mkdir()
    for path, why in ((tmp_path / "missing.yaml", f"cannot open {tmp_path}/missing.yaml: No such file or directory"),
                      (folder, f"{folder} is not a regular file")):
        proc = subprocess.run([str(METAD), "--node-config", str(path)], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == f"metad: node config: {why}\n"
        assert "listening on" not in proc.stdout


BAD_LOAD_ARGUMENTS = [
    ({"RANK": "abc"}, [], 'environment RANK="abc" must be an integer from 0 to 1048576 (or pass --rank)'),
    ({"WORLD_SIZE": "2"}, ["--rank", "5"], "rank 5 must be below the world size 2"),
    ({}, ["--source", "sideways"], '--source "sideways": use auto, direct or stream'),
    ({}, ["--dtype", "int7"], '--dtype "int7": use bf16, fp16 or fp32'),
    ({}, ["--read-threads", "0"], '--read-threads "0" must be an integer from 1 to 64'),
    ({}, ["--timeout", "-5"], '--timeout "-5" must be an integer from 1 to 86400'),
]


@pytest.mark.parametrize("env,args,message", BAD_LOAD_ARGUMENTS, ids=[m.split(" ")[0] for _, _, m in BAD_LOAD_ARGUMENTS])
def test_bad_load_flags_exit_2_before_asking_a_daemon(env, args, message):
    proc = metactl("load", "m", "--daemon", "127.0.0.1:1", *args, env={"RANK": "0", "WORLD_SIZE": "1", **env},
                   check=2)
    assert proc.stderr == f"metactl load: {message}\n", proc.stderr
