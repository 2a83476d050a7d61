"""Names the way transformers maps them (issue 21), proven the way users load.

transformers builds and save_pretrained()s tiny MoE models whose experts it stores per expert
and fuses on load (qwen3_moe and deepseek_v3: the qwen2_moe conversion family; Mixtral's own),
a Qwen2 ...ForCausalLM checkpoint and one saved from the base Qwen2Model, an OLMo-hybrid whose
conv1d it concatenates from three stored tensors (Concatenate alone), a GTE whose q/k/v and
up/gate projections it chunks out of one stored tensor each (Chunk) and a Lara-mini whose linear
attention's input projections it splits out of one (Split). Two CPU ranks on Gloo
(one torchrun launch, tests/integration/python/names_rank.py) build each on meta, plain or
FSDP2-sharded, materialize it, and compare with the same class's from_pretrained bit for bit:
every local shard, the bytes read, the output. A model wrapped in the user's own module is
refused naming the prefix to strip.
"""
import pytest

from pyproc import ok
from test_python_materialize import torchrun

WRAPPED = ("qwen2-wrapped: every module name starts with 'lm.' and the checkpoint has none of them: strip it? "
           "(materialize the module the checkpoint was saved from, model.lm)")


def make_models(root):
    import torch
    from transformers import (CONFIG_MAPPING, AutoModel, AutoModelForCausalLM, DeepseekV3Config, GteConfig,
                              MixtralConfig, OlmoHybridConfig, Qwen2Config, Qwen3MoeConfig)

    common = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, vocab_size=1000)
    configs = {
        # Layer 0 dense, layer 1 four experts: gate_up_proj [4, 64, 64] from 8 stored tensors.
        "qwen3_moe": (AutoModelForCausalLM, Qwen3MoeConfig(
            moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, mlp_only_layers=[0],
            tie_word_embeddings=False, **common), torch.bfloat16),
        # float32: it keeps its router's e_score_correction_bias in float32, and FSDP2 wants one dtype.
        "deepseek_v3": (AutoModelForCausalLM, DeepseekV3Config(
            moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
            first_k_dense_replace=1, n_group=1, topk_group=1, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
            qk_nope_head_dim=8, v_head_dim=16, tie_word_embeddings=False, **common), torch.float32),
        "mixtral": (AutoModelForCausalLM, MixtralConfig(num_local_experts=4, num_experts_per_tok=2,
                                                        tie_word_embeddings=False, **common), torch.float32),
        "qwen2": (AutoModelForCausalLM, Qwen2Config(tie_word_embeddings=False, **common), torch.float32),
        # Saved from the base model: names without "model.", no lm_head (tied to the embedding).
        "qwen2_base": (AutoModel, Qwen2Config(tie_word_embeddings=True, **common), torch.float32),
        # Its conv1d is q/k/v_conv1d concatenated (Concatenate(dim=0)), not stacked.
        "olmo_hybrid": (AutoModelForCausalLM, OlmoHybridConfig(pad_token_id=0, eos_token_id=1, bos_token_id=None,
                                                               **common), torch.float32),
        # Stored as attention.qkv_proj and mlp.up_gate_proj, each chunked (Chunk(dim=0)) into the module's.
        # Its linear attention's in_proj_qkv/_z/_b/_a are one stored in_proj, split (Split(dim=0)) by their sizes.
        "lara_mini": (AutoModelForCausalLM, CONFIG_MAPPING["lara_mini"](
            layer_types=["full_attention", "linear_attention"], head_dim=16, linear_key_head_dim=16,
            linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=32, eos_token_id=1, **common), torch.float32),
        "gte": (AutoModel, GteConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                     max_position_embeddings=64, vocab_size=1000), torch.float32),
    }
    for name, (auto, config, dtype) in configs.items():
        torch.manual_seed(len(name))
        auto.from_config(config).to(dtype).save_pretrained(root / name, max_shard_size="150KB")
    return root


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import transformers  # noqa: F401  pinned in scripts/requirements.txt: missing is a failure, never a skip
    return make_models(tmp_path_factory.mktemp("names"))


def case(case_id, model, root, build, mode, **extra):
    return {"id": case_id, "model": case_id, "folder": str(root / model), "build": build, "mode": mode, **extra}


def assert_loaded(result):
    assert "crash" not in result, result["crash"]
    assert "error" not in result, result["message"]
    assert result["mismatches"] == []
    assert result["bytes_read"] == result["expected_bytes"] > 0
    assert result["verified"] > 0
    assert result["output_equal"], result["output_max_diff"]


def test_fused_experts_prefixes_and_a_wrapper_as_transformers_maps_them(models, tmp_path):
    cases = []
    for name, dtype in (("qwen3_moe", "bfloat16"), ("deepseek_v3", "float32"), ("mixtral", "float32")):
        cases += [case(f"{name}-plain", name, models, "causal", "plain", dtype=dtype),
                  case(f"{name}-fsdp", name, models, "causal", "fsdp", dtype=dtype)]
    cases += [case("base-from-causal-plain", "qwen2", models, "base", "plain"),
              case("base-from-causal-fsdp", "qwen2", models, "base", "fsdp"),
              case("causal-from-base-plain", "qwen2_base", models, "causal", "plain"),
              case("causal-from-base-fsdp", "qwen2_base", models, "causal", "fsdp"),
              # from_pretrained's key_mapping (checkpoint-name regex -> module name) reads into a wrapper.
              case("wrapped-key-mapping", "qwen2", models, "causal", "plain", wrapped=True,
                   key_mapping={r"^model\.": "lm.model.", r"^lm_head\.": "lm.lm_head."}),
              case("olmo_hybrid-plain", "olmo_hybrid", models, "causal", "plain"),
              case("olmo_hybrid-fsdp", "olmo_hybrid", models, "causal", "fsdp"),
              case("lara_mini-plain", "lara_mini", models, "causal", "plain"),
              case("lara_mini-fsdp", "lara_mini", models, "causal", "fsdp"),
              case("gte-plain", "gte", models, "base", "plain"),
              case("gte-fsdp", "gte", models, "base", "fsdp"),
              case("qwen3_moe-2-experts", "qwen3_moe", models, "causal", "plain", dtype="bfloat16",
                   config={"num_experts": 2}),
              case("qwen2-wrapped", "qwen2", models, "causal", "plain", wrapped=True)]
    results = torchrun(2, cases, tmp_path, script="names_rank.py")
    for rank in results:
        for c in cases[:-2]:
            assert_loaded(rank[c["id"]])
        for name, experts in (("qwen3_moe", "model.layers.1.mlp.experts"), ("deepseek_v3", "model.layers.1.mlp.experts"),
                              ("mixtral", "model.layers.0.mlp.experts")):
            r = rank[f"{name}-fsdp"]
            assert r["sources"][f"{experts}.gate_up_proj"] == "direct (fused from 4 stored tensors)"
            rule = r["name_rules"][f"{experts}.gate_up_proj"]
            assert rule.startswith("transformers WeightConverter(") and "gate_up_proj" in rule
            assert rule.endswith("operations=[MergeModulelist(dim=0), Concatenate(dim=1)]"), rule
            assert r["name_rules"][f"{experts}.down_proj"].endswith("operations=[MergeModulelist(dim=0)]")
        assert rank["mixtral-plain"]["sources"]["model.layers.0.mlp.experts.gate_up_proj"] == \
            "direct (fused from 8 stored tensors)"
        assert "WeightRenaming(source_patterns=['.block_sparse_moe.']" in \
            rank["mixtral-plain"]["name_rules"]["model.layers.0.mlp.gate.weight"]
        base = rank["base-from-causal-fsdp"]
        assert base["name_rules"]["layers.0.self_attn.q_proj.weight"] == "transformers base_model_prefix 'model' stripped"
        assert base["sources"]["layers.0.self_attn.q_proj.weight"] == "direct (as model.layers.0.self_attn.q_proj.weight)"
        causal = rank["causal-from-base-plain"]
        assert causal["name_rules"]["model.embed_tokens.weight"] == "transformers base_model_prefix 'model' added"
        assert rank["wrapped-key-mapping"]["name_rules"]["lm.model.norm.weight"] == \
            "transformers WeightRenaming(source_patterns=['^model\\\\.'], target_patterns=['lm.model.'])"
        assert rank["qwen2-wrapped"] == {"name": "qwen2-wrapped", "error": "BadInputError", "message": WRAPPED}
        conv = "model.layers.0.linear_attn.conv1d.weight"
        assert rank["olmo_hybrid-plain"]["sources"][conv] == "direct (fused from 3 stored tensors)"
        # FSDP2: each rank's half of its rows meets two of the three stored tensors.
        assert rank["olmo_hybrid-fsdp"]["sources"][conv] == "direct (fused from 2 stored tensors)"
        assert rank["olmo_hybrid-plain"]["name_rules"][conv].endswith("operations=[Concatenate(dim=0)]")
        for layer in ("layers.0.self_attn.k_proj.weight", "layers.1.mlp.gate_proj.weight"):
            for mode in ("plain", "fsdp"):
                stored = "attention.qkv_proj" if "self_attn" in layer else "mlp.up_gate_proj"
                assert rank[f"gte-{mode}"]["sources"][layer] == \
                    f"direct (part of encoder.layer.{layer.split('.')[1]}.{stored}.weight)", (mode, layer)
        assert rank["gte-plain"]["name_rules"]["layers.0.mlp.up_proj.weight"].endswith("operations=[Chunk(dim=0)]")
        lara = "model.layers.1.linear_attn"
        for part in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"):
            for mode in ("plain", "fsdp"):
                assert rank[f"lara_mini-{mode}"]["sources"][f"{lara}.{part}.weight"] == \
                    f"direct (part of {lara}.in_proj.weight)", (mode, part)
        assert rank["lara_mini-plain"]["name_rules"][f"{lara}.in_proj_z.weight"].endswith("operations=[Split(dim=0)]")
        assert rank["qwen3_moe-2-experts"] == {
            "name": "qwen3_moe-2-experts", "error": "BadInputError",
            "message": "model.layers.1.mlp.experts.down_proj: the module's shape is [2, 64, 32], but the checkpoint's "
                       "mlp.experts.*.down_proj.weight tensors (4 of shape [64, 32]) do not make it: another size of "
                       "this model?"}
    # FSDP2 ranks each read their own experts: together exactly what one plain rank read (not
    # deepseek_v3: every rank reads its router's e_score_correction_bias, a buffer FSDP2 leaves whole).
    for name in ("qwen3_moe", "mixtral", "base-from-causal", "olmo_hybrid", "gte", "lara_mini"):
        plain = results[0][f"{name}-plain"]["bytes_read"]
        assert sum(rank[f"{name}-fsdp"]["bytes_read"] for rank in results) == plain


def test_a_converter_that_changes_the_bytes_is_refused_naming_the_tensor(models):
    """A conversion the user registers with transformers (its public
    register_checkpoint_conversion_mapping) that transposes a stored tensor: its bytes are not
    the stored ones in place, so metaload refuses it before anything is allocated or read."""
    out = ok(f"""
        import torch, metaload
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.conversion_mapping import register_checkpoint_conversion_mapping
        from transformers.core_model_loading import Transpose, WeightConverter
        register_checkpoint_conversion_mapping("qwen2", [WeightConverter(
            source_patterns="self_attn.q_proj.weight", target_patterns="self_attn.q_proj.weight",
            operations=[Transpose(0, 1)])], overwrite=True)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained("{models / 'qwen2'}"))
        try:
            metaload.materialize(model, checkpoint="{models / 'qwen2'}")
        except metaload.BadInputError as e:
            print(e)
        print(all(t.is_meta for t in model.parameters()))
    """)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert out.splitlines()[0] == f"{q}: transformers builds it from {q} by [Transpose], which metaload cannot read " \
                                  "as stored pieces", out
    assert out.splitlines()[1] == "True"
