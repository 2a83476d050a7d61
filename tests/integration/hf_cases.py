"""Tiny configs of every architecture metactl skeleton supports, for transformers to build
models from: the cases of test_hf_skeletons.py and test_buffers.py."""

TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, bos_token_id=None, eos_token_id=None, pad_token_id=None)

# (id, model_type, config overrides, dtype name). Together: every architecture, tied and untied
# where the architecture allows, biases, fused and MoE layers, old and new Falcon, RoPE scalings.
CASES = [
    ("llama", "llama", dict(num_key_value_heads=2), "float32"),
    ("llama-tied-bias-headdim-llama3", "llama",
     dict(tie_word_embeddings=True, attention_bias=True, mlp_bias=True, head_dim=32, max_position_embeddings=256,
          rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                               high_freq_factor=4.0, original_max_position_embeddings=64)), "bfloat16"),
    ("mistral", "mistral", dict(num_key_value_heads=2, sliding_window=None), "bfloat16"),
    ("mistral-tied-yarn", "mistral",
     dict(num_key_value_heads=1, tie_word_embeddings=True, max_position_embeddings=512,
          rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                               original_max_position_embeddings=128)), "float32"),
    ("mixtral-4-experts", "mixtral", dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2),
     "bfloat16"),
    ("qwen2-tied", "qwen2", dict(num_key_value_heads=2, tie_word_embeddings=True), "bfloat16"),
    ("qwen2-untied-linear", "qwen2",
     dict(num_key_value_heads=4, rope_parameters=dict(rope_type="linear", rope_theta=1000000.0, factor=2.0)),
     "float16"),
    ("gemma-headdim", "gemma", dict(num_key_value_heads=1, head_dim=24), "bfloat16"),
    ("gemma-untied", "gemma", dict(num_key_value_heads=2, head_dim=16, tie_word_embeddings=False), "float32"),
    ("phi3", "phi3", dict(num_key_value_heads=2), "bfloat16"),
    ("phi3-tied-longrope-partial", "phi3",
     dict(num_key_value_heads=4, tie_word_embeddings=True, max_position_embeddings=512,
          original_max_position_embeddings=128,
          rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.5,
                               short_factor=[1.0, 1.25, 1.5, 2.0], long_factor=[2.0, 3.0, 4.0, 5.0])),
     "float32"),
    ("falcon-old-multiquery", "falcon",
     dict(multi_query=True, parallel_attn=True, new_decoder_architecture=False, bias=False,
          tie_word_embeddings=False), "bfloat16"),
    ("falcon-old-sequential-alibi", "falcon",
     dict(multi_query=False, parallel_attn=False, new_decoder_architecture=False, bias=True, alibi=True),
     "float32"),
    ("falcon-new-decoder", "falcon",
     dict(new_decoder_architecture=True, num_kv_heads=2, bias=True, ffn_hidden_size=80), "bfloat16"),
    ("gpt2", "gpt2", dict(n_positions=32), "float32"),
    ("gpt2-untied-inner-cross", "gpt2",
     dict(n_positions=16, n_inner=40, tie_word_embeddings=False, add_cross_attention=True), "float16"),
]


def tiny_config(transformers, model_type, overrides):
    kwargs = dict(TINY)
    if model_type == "gpt2":
        kwargs = dict(vocab_size=128, n_embd=64, n_layer=2, n_head=4, bos_token_id=None, eos_token_id=None)
    if model_type == "falcon":
        kwargs.pop("intermediate_size")
    kwargs.update(overrides)
    return transformers.AutoConfig.for_model(model_type, **kwargs)
