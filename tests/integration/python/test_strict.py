"""Strict accounting, no silent zeros, bounded verification (issue 21), as users meet them.

transformers builds and save_pretrained()s tiny Llama (2 and 4 layers), Qwen2 and Mixtral
models, and safetensors' save_model saves a plain torch module whose head is its embedding
(tied_net.py); one fresh Python process runs every single-process case (strict_cases.py), one
torchrun launch (2 CPU ranks, Gloo) the FSDP2 ones, and plain processes with RANK=0
WORLD_SIZE=2 and no rank 1 show that verification gives up in time, naming rank 1, and that
Ctrl-C stops it at once; a daemon registration with --digest proves the digest-checked count.
Loads that succeed are compared with from_pretrained (or load_model) bit for bit.
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import Daemon, free_port, metactl
from pyproc import ENV, ok

HERE = pathlib.Path(__file__).resolve().parent
VENV_BIN = pathlib.Path(sys.executable).parent


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    import transformers  # noqa: F401  pinned in scripts/requirements.txt: missing is a failure, never a skip
    root = tmp_path_factory.mktemp("strict")
    ok(f"""
        import torch
        from transformers import AutoModelForCausalLM, LlamaConfig, MixtralConfig, Qwen2Config
        common = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64)
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(LlamaConfig(vocab_size=1002, num_hidden_layers=2, tie_word_embeddings=False,
                                                     **common)).save_pretrained("{root}/llama2")
        AutoModelForCausalLM.from_config(LlamaConfig(vocab_size=1002, num_hidden_layers=4, tie_word_embeddings=False,
                                                     **common)).save_pretrained("{root}/llama4")
        AutoModelForCausalLM.from_config(Qwen2Config(vocab_size=998, num_hidden_layers=2, tie_word_embeddings=True,
                                                     **common)).save_pretrained("{root}/qwen2")
        # A config that ties lm_head to the embeddings, beside a checkpoint that stores its own.
        AutoModelForCausalLM.from_config(Qwen2Config(vocab_size=998, num_hidden_layers=2, tie_word_embeddings=False,
                                                     **common)).save_pretrained("{root}/qwen2-own-head")
        config = Qwen2Config.from_pretrained("{root}/qwen2-own-head")
        config.tie_word_embeddings = True
        config.save_pretrained("{root}/qwen2-own-head")
        # Experts stored apart, fused by transformers' conversion mapping into one tensor each.
        AutoModelForCausalLM.from_config(MixtralConfig(vocab_size=998, num_hidden_layers=1, num_local_experts=4,
                                                       num_experts_per_tok=2, tie_word_embeddings=False,
                                                       **common)).save_pretrained("{root}/mixtral")
    """, timeout=240)
    return root


@pytest.fixture(scope="module")
def cases(root):
    out = root / "cases.json"
    proc = subprocess.run([sys.executable, str(HERE / "strict_cases.py"), str(root), str(out)], capture_output=True,
                          text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(out.read_text())


def test_a_checkpoint_of_another_size_is_refused_naming_the_cause_and_strict_false_loads_the_rest(cases):
    refused = cases["smaller-module"]
    assert refused["error"] == "MetaTensorError", refused
    assert ("18 checkpoint tensors the module has no place for (model.layers.2.input_layernorm.weight, "
            in refused["message"])
    assert "the checkpoint has 4 of model.layers, the module 2: another size of this model?" in refused["message"]
    assert "strict=False" in refused["message"]
    assert cases["smaller-module-meta"] is True  # refused before anything was allocated
    lenient = cases["smaller-module-lenient"]
    assert lenient.get("ok"), lenient
    assert len(lenient["unexpected"]) == 18 and all(n.startswith(("model.layers.2.", "model.layers.3."))
                                                    for n in lenient["unexpected"])
    assert lenient["differs"] == []  # bit for bit what from_pretrained loads into 2 layers
    assert "18 checkpoint tensors unused" in lenient["report"]


def test_a_llama_module_from_a_qwen2_checkpoint_is_refused_as_another_architecture(cases):
    refused = cases["llama-from-qwen2"]
    assert refused["error"] == "MetaTensorError", refused
    message = refused["message"]
    # Qwen2's q/k/v biases, which a Llama has no place for: 3 in each of 2 layers.
    assert "6 checkpoint tensors the module has no place for (model.layers.0.self_attn.k_proj.bias" in message
    assert "the checkpoint is a qwen2 model (its config.json), the module a llama: another architecture?" in message
    # Its untied lm_head is not filled from the embeddings the Qwen2 checkpoint ties it to.
    assert ("lm_head.weight: it is not in the checkpoint: the checkpoint stores only model.embed_tokens.weight, "
            "which its config ties it to, and this module does not tie them") in message
    assert ["lm_head.weight", 0] in [f[:2] for f in refused["findings"]]


def test_init_missing_applies_only_where_asked_and_never_to_most_of_the_model(cases):
    most = cases["gpt2-from-llama-zeros"]
    assert most["error"] == "MetaTensorError", most
    assert "init_missing would initialize" in most["message"] and "most of the model: refused" in most["message"]
    assert "it is not in the checkpoint" in most["message"]
    by_pattern = cases["init-by-pattern"]
    assert by_pattern.get("ok"), by_pattern
    assert by_pattern["head_zero"] is True and by_pattern["source"] == "init:zeros"
    assert by_pattern["counts"]["initialized"] == 2
    assert by_pattern["differs"] == []
    # One policy for whatever is missing covers a few tensors; a whole layer must be named.
    layer = cases["a-layer-of-zeros"]
    assert layer["error"] == "MetaTensorError", layer
    assert "init_missing=\"zeros\" applies to a few missing tensors only, here 9 of the module's" in layer["message"]
    assert "as init_missing={\"model.layers.2." in layer["message"]
    assert cases["a-layer-of-zeros-by-pattern"]["counts"]["initialized"] == 9
    other = cases["init-pattern-names-other-tensors"]
    assert other["error"] == "MetaTensorError", other
    assert {f[0] for f in other["findings"]} == {"value_head.weight", "value_head.bias"}


def test_a_dtype_metaload_cannot_fill_is_refused_before_allocation_and_verify_then_fails(cases):
    refused = cases["complex-module-tensor"]
    assert refused["error"] == "MetaTensorError", refused
    assert "v: the module holds it as torch ComplexFloat, which no checkpoint bytes convert to" in refused["message"]
    after = cases["complex-module-tensor-after"]
    assert after["meta"] is True
    assert after["verify"] == "raised"


def test_a_fill_that_fails_midway_leaves_nothing_looking_filled(cases):
    failed = cases["fill-fails-midway"]
    assert failed["error"] == "LoadError", failed
    after = cases["fill-fails-midway-after"]
    assert after["verify"] == "raised", after
    assert "the load stopped before it was filled: LoadError: the daemon went away (simulated)" in \
        after["verify_message"]


NOT_ON_META = (
    "): moved off meta with to_empty() they hold uninitialized memory, built on a device their initial values; "
    "metaload would keep either unread and unproven\n"
    "  rank 0:   fix: overwrite=True reads the checkpoint into them where they are; or call materialize on the "
    "model still on meta, in place of to_empty() (it allocates and fills what each rank holds); strict=False keeps "
    "them (reported as kept)")


def test_a_model_moved_off_meta_with_to_empty_is_told_what_to_do(cases):
    """Was: after torch's own hint (to_empty()), "was the model built under torch.device("meta")?" —
    it was (issue 37)."""
    refused = cases["to-empty"]
    assert refused["error"] == "MetaTensorError", refused
    assert ("\n  rank 0: 21 tensors the checkpoint has are not on meta (model.embed_tokens.weight, "
            "model.layers.0.self_attn.q_proj.weight, model.layers.0.self_attn.k_proj.weight, …" + NOT_ON_META
            ) in refused["message"], refused["message"]
    assert "was the model built" not in refused["message"]
    overwritten = cases["to-empty-overwrite"]
    assert overwritten.get("ok"), overwritten
    assert overwritten["differs"] == [] and overwritten["verified"] > 0


def test_a_model_not_built_on_meta_never_verifies(cases):
    refused = cases["not-on-meta"]
    assert refused["error"] == "MetaTensorError", refused
    assert NOT_ON_META in refused["message"], refused["message"]
    kept = cases["not-on-meta-kept"]
    assert kept.get("ok"), kept
    assert kept["sources"] == ["kept"] and kept["bytes"] == 0 and kept["unchanged"] is True
    assert kept["verified"] == 0 and kept["unproven"] > 0
    assert "loaded, not verified across all ranks: content not proven for every tensor:" in kept["report"]
    assert "23 kept as they were (unread: unproven)" in kept["report"] and "kept unproven" in kept["report"]
    assert kept["verify"] == 0  # verify(model) counts them as unproven, not verified
    overwritten = cases["not-on-meta-overwrite"]
    assert overwritten.get("ok"), overwritten
    assert overwritten["differs"] == [] and overwritten["verified"] == overwritten["verify"] > 0


def test_one_buffer_object_in_two_modules_is_filled_once(cases):
    shared = cases["one-buffer-two-modules"]
    assert shared.get("ok"), shared
    assert shared["one_object"] is True and shared["same"] is True
    assert shared["sources"]["b.scale"] == "tied:a.scale"


def test_the_report_says_what_verified_proves_and_name_is_optional_with_a_checkpoint(cases):
    counts = cases["counts"]
    assert counts.get("ok"), counts
    assert counts["model"] == "qwen2" and counts["differs"] == []
    c = counts["counts"]
    # Qwen2: 2 layers of 12 tensors, embeddings and the final norm read; 2 inv_freq buffers
    # computed; lm_head tied to the embeddings.
    assert c["checkpoint"] == 2 * 12 + 2 and c["tied"] == 1 and c["computed"] >= 1, c
    assert c["initialized"] == 0 and c["kept"] == 0
    assert f"(this rank: {c['checkpoint']} from checkpoint bytes" in counts["report"]


def test_the_errors_for_a_missing_source_say_what_is_missing(cases):
    neither = cases["neither-daemon-nor-checkpoint"]
    assert neither["error"] == "BadInputError"
    assert neither["message"].startswith("neither a daemon nor a checkpoint for llama: give checkpoint=PATH")
    nameless = cases["no-name-no-checkpoint"]
    assert nameless["error"] == "BadInputError"
    assert "or checkpoint=" in nameless["message"]


def test_a_config_that_ties_a_head_the_checkpoint_stores_loads_it_untied_as_transformers_does(cases):
    head = cases["tied-config-stored-head"]
    assert head.get("ok"), head
    assert head["tied_in_module_before"] is True
    assert head["differs"] == [] and head["logits_equal"] is True
    assert head["one_object"] is False
    assert head["untied"] == [["lm_head.weight", "model.embed_tokens.weight"]]


def test_a_tie_save_model_recorded_loads_bit_exact_and_its_metadata_aliases_nothing_else(cases):
    intact = cases["saved-tie-intact"]
    assert intact.get("ok"), intact
    assert intact["one_object"] and intact["same"], intact
    assert intact["counts"]["tied"] == 1 and intact["counts"]["checkpoint"] == 3, intact
    assert intact["ties"] == [["head.weight", "embed.weight", True]]
    sharded = cases["saved-tie-sharded"]
    assert sharded.get("ok"), sharded
    assert sharded["files"] == 2 and sharded["same"] and sharded["one_object"], sharded
    assert sharded["ties"] == [["head.weight", "embed.weight", True]], sharded
    other = cases["saved-tie-another-dtype"]
    assert other["error"] == "MetaTensorError", other
    assert ("head.weight: the checkpoint stores it as embed.weight (one tensor under both names), but the module "
            "holds head.weight as [16, 8] float16 and embed.weight as [16, 8] float32: not the module the checkpoint "
            "was saved from") in other["message"], other
    assert cases["saved-tie-another-dtype-meta"] is True
    shape = cases["saved-tie-another-shape"]
    assert shape["error"] == "MetaTensorError", shape
    assert ("head.weight: the checkpoint stores it as embed.weight (one tensor under both names), but the module "
            "holds head.weight as [17, 8] float32 and embed.weight as [16, 8] float32") in shape["message"], shape
    assert cases["saved-tie-another-shape-meta"] is True
    hostile = cases["saved-tie-hostile-metadata"]
    assert hostile["error"] == "MetaTensorError", hostile
    assert [f[0] for f in hostile["findings"]] == ["head.weight"], hostile
    assert "it is not in the checkpoint" in hostile["findings"][0][2], hostile
    assert cases["saved-tie-hostile-metadata-meta"] is True


FSDP_RANK = """
import json, os, sys, torch, torch.distributed as dist, metaload
from torch.distributed.fsdp import fully_shard
from transformers import AutoConfig, AutoModelForCausalLM
dist.init_process_group("gloo")
folder, out = sys.argv[1], sys.argv[2]
with torch.device("meta"):
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
fully_shard(model.model.embed_tokens)  # the tie with lm_head is broken here, inside torch
fully_shard(model)
result = {}
try:
    metaload.materialize(model, "qwen2", checkpoint=folder)
except metaload.MetaTensorError as e:
    result["materialize"] = str(e)
try:
    metaload.verify(model)
except metaload.MetaTensorError as e:
    result["verify"] = [list(f) for f in e.findings]
# A plain torch module tied as users tie it, saved by safetensors' save_model (no config.json):
# the tie is in the file's metadata only.
sys.path.insert(0, sys.argv[3])
from tied_net import TiedNet, loaded_by_safetensors, save_tied
saved = sys.argv[4]
if dist.get_rank() == 0:
    save_tied(saved)
dist.barrier()
with torch.device("meta"):
    net = TiedNet()
fully_shard(net.embed)
fully_shard(net)
try:
    metaload.materialize(net, checkpoint=saved)
except metaload.MetaTensorError as e:
    result["plain-broken"] = str(e)
with torch.device("meta"):
    net = TiedNet()
fully_shard(net)  # embed and head in one group: the tie holds
report = metaload.materialize(net, checkpoint=saved)
want = loaded_by_safetensors(saved).state_dict()
mine = {n: t.full_tensor() for n, t in net.state_dict().items()}
result["plain-one-group"] = {"one_object": net.head.weight is net.embed.weight, "names": sorted(mine) == sorted(want),
                             "same": all(torch.equal(t, want[n]) for n, t in mine.items()), "counts": report.counts}
with open(out + str(dist.get_rank()), "w") as f:
    json.dump(result, f)
# Verification's collective tensors are the core's (C++, no Python object): freed on a Gloo
# worker during interpreter shutdown they need no GIL. This script's own full_tensor() calls make
# Python ones (torch's functional collectives, not metaload's): tests/integration/gloo_exit.py.
sys.path.insert(0, os.path.dirname(sys.argv[3]))
from gloo_exit import leave
leave()
"""


def test_a_tie_fsdp_broke_is_refused_naming_both_tensors_and_the_fix_with_or_without_a_config(root, tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(FSDP_RANK)
    proc = subprocess.run([str(VENV_BIN / "torchrun"), "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                           "--master-port", str(free_port()), str(script), str(root / "qwen2"), str(tmp_path / "r"),
                           str(HERE), str(tmp_path / "saved-tie")],
                          capture_output=True, text=True, timeout=240, env={**ENV, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank in (0, 1):
        result = json.loads((tmp_path / f"r{rank}").read_text())
        assert ("lm_head.weight: tied to model.embed_tokens.weight, but torch holds them as two tensors (a tie "
                "fully_shard or _apply broke): shard the tied modules in one fully_shard group, or build the model "
                "untied (tie_word_embeddings=False) and tie after") in result["materialize"], result
        assert any(f[0] == "lm_head.weight" and "tied to model.embed_tokens.weight" in f[2] for f in result["verify"])
        # No config.json: the tie is the one save_model recorded in the checkpoint's metadata.
        assert ("head.weight: tied to embed.weight in the checkpoint, which stores only the latter, but torch holds "
                "them as two tensors (a tie fully_shard or _apply broke): shard the tied modules in one fully_shard "
                "group, or build the model untied and tie after") in result["plain-broken"], result
        assert "not in the checkpoint" not in result["plain-broken"]
        intact = result["plain-one-group"]
        assert intact["one_object"] and intact["names"] and intact["same"], intact
        assert intact["counts"]["tied"] == 1 and intact["counts"]["checkpoint"] == 3, intact


def lonely_rank(code, **env):
    """A rank 0 of 2 whose rank 1 never starts: RANK/WORLD_SIZE/MASTER_* as torchrun sets them."""
    port = free_port()
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**ENV, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                                 "MASTER_PORT": str(port), **env})


def test_verification_without_its_other_ranks_gives_up_in_time_naming_them(root):
    proc = lonely_rank(f"""
        import time, torch, metaload
        from transformers import AutoConfig, AutoModelForCausalLM
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained("{root}/llama2"))
        for call in (lambda: metaload.materialize(model, "m", checkpoint="{root}/llama2", verify_timeout_s=3),
                     lambda: metaload.verify(model, timeout_s=2)):
            started = time.monotonic()
            try:
                call()
            except metaload.LoadError as e:
                print("GAVE UP", round(time.monotonic() - started, 1), "|", e)
    """)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-3000:]
    lines = [line for line in stdout.splitlines() if line.startswith("GAVE UP")]
    assert len(lines) == 2, stdout
    for line, limit in zip(lines, (3, 2)):
        seconds = float(line.split()[2])
        assert limit <= seconds < limit + 3, line
        assert f"rank 1 of 2 never joined within {limit} s" in line


def test_ctrl_c_stops_a_verification_waiting_for_its_ranks_within_a_second(root):
    proc = lonely_rank("""
        import sys, time, torch, metaload
        model = torch.nn.Linear(2, 2)
        print("WAITING", flush=True)
        try:
            metaload.verify(model)  # the default 300 s
        except KeyboardInterrupt:
            print("INTERRUPTED", time.monotonic(), flush=True)
            sys.exit(42)
    """)
    assert proc.stdout.readline().strip() == "WAITING"
    time.sleep(1.5)  # well inside the wait
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 42, f"{stdout}\n{stderr[-3000:]}"
    assert float(stdout.split("INTERRUPTED")[1].split()[0]) - sent < 1.0


def test_register_and_status_count_a_models_tensors_the_same_way(root, tmp_path):
    """A Llama's skeleton also holds its rotary inv_freq buffer, which no checkpoint stores:
    register used to count it, status not."""
    daemon = Daemon(tmp_path, "a", [root])
    try:
        registered = metactl("register", "llama", "--checkpoint", root / "llama2", "--daemon", daemon.address,
                             check=0).stdout
        status = metactl("status", "--daemon", daemon.address, check=0).stdout
    finally:
        assert daemon.stop() == 0
    count = int(registered.split("registered llama: ")[1].split()[0])
    line = next(line for line in status.splitlines() if line.strip().startswith("llama "))
    assert int(line.split()[1]) == count == 2 * 9 + 3, (registered, status)


def test_a_registration_with_digests_proves_every_stored_tensor_fused_experts_included(root, tmp_path):
    """`metactl register` (digests by default), then materialize from the daemon: every stored
    tensor, each of the four per-expert tensors read into a fused one included, is checked
    against its registered digest, counted once; the report says "verified" and "content proven"."""
    daemon = Daemon(tmp_path, "a", [root])
    try:
        registered = metactl("register", "mixtral", "--checkpoint", root / "mixtral", "--daemon", daemon.address,
                             check=0).stdout
        out = ok(f"""
            import json, torch, metaload
            from transformers import AutoConfig, AutoModelForCausalLM
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained("{root}/mixtral"))
            report = metaload.materialize(model, "mixtral", daemon="{daemon.address}")
            fused = sum("fused from" in s for s in report.sources.values())
            print(json.dumps({{"counts": report.counts, "stored": report.stored_states, "proven": report.proven,
                               "fused": fused, "report": str(report)}}))
        """, timeout=180)
    finally:
        assert daemon.stop() == 0
    assert "digests of every tensor recorded" in registered, registered
    result = json.loads(out.splitlines()[-1])
    counts, stored = result["counts"], result["stored"]
    assert result["fused"] == 2, result  # the layer's gate_up_proj and down_proj
    assert result["proven"] is True, result
    assert stored["checked"] > counts["checkpoint"], result  # each per-expert tensor is a stored tensor
    assert stored["no_digest"] == stored["unproven"] == stored["mismatch"] == 0, result
    assert f"verified across all ranks: content proven: {stored['checked']} stored tensors checked against their " \
           "registered fast digests" in result["report"], result["report"]
