"""Messages that help: what metactl says for the mistakes people make most.

A forgotten --daemon (a registered model's name where a file is expected), a daemon that is
not running (every command that talks to one asks whether metad runs at the address it used),
and a forgotten --checkpoint. Exit codes as docs/cli.md says: 2 bad input, 1 unreachable.
"""
import os

import pytest

from conftest import free_port, metactl, wait_for

NAME_HINT = "tiny-llama: no such file or folder; it looks like a registered model's name: "


# --- a forgotten --daemon ----------------------------------------------------------------------

def test_plan_of_a_models_name_says_to_pass_daemon(tmp_path):
    env = {"METAD_ADDRESS": ""}
    proc = metactl("plan", "tiny-llama", "--gpus", 2, env=env, check=2)
    assert proc.stderr == f"metactl plan: {NAME_HINT}pass --daemon ADDR to show the plan a daemon gives its ranks\n"
    # With METAD_ADDRESS set, the message says which address --daemon would take.
    proc = metactl("plan", "tiny-llama", "--gpus", 2, env={"METAD_ADDRESS": "node-a:7070"}, check=2)
    assert proc.stderr.endswith("pass --daemon ADDR to show the plan a daemon gives its ranks "
                                "(METAD_ADDRESS is node-a:7070)\n")


@pytest.mark.parametrize("args", [["skeleton", "tiny-llama"], ["inspect", "tiny-llama"],
                                  ["check", "tiny-llama", "{ckpt}"], ["check", "{ckpt}", "tiny-llama"]])
def test_offline_commands_given_a_models_name_say_they_read_files(tmp_path, args):
    ckpt = tmp_path / "ckpt"
    metactl("synth", ckpt, "--layers", 1, "--hidden", 64, "--intermediate", 128, "--heads", 4, "--kv-heads", 2,
            "--vocab", 64, check=0)
    command = args[0]
    proc = metactl(*[a.format(ckpt=ckpt) for a in args], check=2)
    assert proc.stderr.startswith(f"metactl {command}: {NAME_HINT}metactl {command} reads files only: pass a "
                                  "checkpoint folder or file"), proc.stderr
    assert "`metactl status`, with --daemon ADDR or METAD_ADDRESS, lists the registered models" in proc.stderr


@pytest.mark.parametrize("argument", ["no/such/folder", "absent.json", "absent.safetensors"])
def test_a_missing_path_is_not_taken_for_a_models_name(argument):
    proc = metactl("plan", argument, "--gpus", 2, check=2)
    assert "looks like a registered model's name" not in proc.stderr
    assert argument in proc.stderr


def test_a_folder_named_like_a_model_is_still_a_folder(tmp_path):
    metactl("synth", tmp_path / "tiny-llama", "--layers", 1, "--hidden", 64, "--intermediate", 128, "--heads", 4,
            "--kv-heads", 2, "--vocab", 64, check=0)
    metactl("plan", "tiny-llama", "--gpus", 1, prefix=("env", "-C", str(tmp_path)), check=0)


# --- a daemon that is not there -----------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["status"],
    ["register", "m", "--checkpoint", "{tmp}"],
    ["plan", "m", "--gpus", "1"],
    ["load", "m"],
])
def test_every_command_that_talks_to_a_daemon_asks_whether_it_runs(tmp_path, args):
    address = f"127.0.0.1:{free_port()}"
    proc = metactl(*[a.format(tmp=tmp_path) for a in args], "--daemon", address, check=1)
    assert proc.stderr.startswith(f"metactl {args[0]}: "), proc.stderr
    assert proc.stderr.endswith(f"; is metad running at {address}?\n"), proc.stderr
    # METAD_ADDRESS is the same address, said the same way.
    if args[0] != "plan":  # plan asks a daemon only with --daemon
        proc = metactl(*[a.format(tmp=tmp_path) for a in args], env={"METAD_ADDRESS": address}, check=1)
        assert proc.stderr.endswith(f"; is metad running at {address}?\n"), proc.stderr


def test_a_daemon_that_cannot_reach_its_coordinator_is_not_blamed(tmp_path, daemons):
    a = daemons("a", [tmp_path], gpus=1)
    b = daemons("b", [tmp_path], gpus=1, coordinator=a.address)
    wait_for(lambda: "b " in metactl("status", "--daemon", a.address).stdout, what="node b to join")
    a.stop()
    proc = metactl("plan", "m", "--gpus", "1", "--daemon", b.address, check=1)
    assert f"coordinator {a.address}" in proc.stderr, proc.stderr
    assert f"is metad running at {b.address}?" not in proc.stderr, proc.stderr


# --- a forgotten --checkpoint -------------------------------------------------------------------

def test_register_with_the_checkpoint_as_a_positional_says_to_use_the_flag(tmp_path):
    proc = metactl("register", "llama", tmp_path, "--daemon", f"127.0.0.1:{free_port()}", check=2)
    assert proc.stderr == (f"metactl register: the checkpoint is passed with --checkpoint: metactl register llama "
                           f"--checkpoint {tmp_path}\n")


def test_register_without_a_checkpoint_says_to_pass_it(tmp_path):
    proc = metactl("register", "llama", "--daemon", f"127.0.0.1:{free_port()}", check=2)
    assert proc.stderr == ("metactl register: pass --checkpoint DIR, the checkpoint folder to register as llama "
                           "(a folder under the daemon's roots)\n")
