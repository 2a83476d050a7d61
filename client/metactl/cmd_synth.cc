// `metactl synth OUT_DIR [dims]`: writes a synthetic Llama-shaped (or, with --experts,
// DeepSeek-V3-shaped) sharded checkpoint and its config.json, for the demo, the tests and the
// 100k-tensor benchmark: real files, in the layout Hugging Face writes, of any size, without
// downloading a model. The weights are pseudo-random but deterministic (the
// same flags give the same bytes) and always finite, so a loaded model can even run.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "client/metactl/commands.h"
#include "client/metactl/offline_common.h"
#include "nlohmann/json.hpp"
#include "planner/format/checkpoint.h"
#include "planner/format/dtype.h"
#include "planner/format/safetensors_writer.h"
#include "util/cli_args.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace metaload {
namespace {

namespace fs = std::filesystem;

struct SynthOptions {
  std::string out_dir;
  int64_t layers = 8;
  int64_t hidden = 1024;
  int64_t intermediate = 2816;
  int64_t heads = 16;
  int64_t kv_heads = 4;
  int64_t vocab = 32000;
  // DeepSeek-V3's mixture of experts (experts > 0): routed experts per MoE layer, the dense
  // layers before the first MoE layer (first_k_dense_replace), each expert's intermediate size.
  int64_t experts = 0;
  int64_t dense_layers = 3;
  int64_t moe_intermediate = 0;  // 0: --intermediate
  bool weight_scales = false;
  DType dtype = DType::kBF16;
  uint64_t max_shard_bytes = 100'000'000;
  uint64_t seed = 1;
  bool tie_embeddings = false;
  bool overwrite = false;

  int64_t head_dim() const { return hidden / heads; }
};

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// FNV-1a: each tensor's stream depends on its name, not on its position, so adding a layer
// leaves the bytes of the others unchanged.
uint64_t HashName(const std::string& name) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001B3ull;
  return hash;
}

// Turns 64 random bits into packed floats of `dtype` (4 BF16/F16 or 2 F32 lanes, little-endian)
// by keeping each lane's sign and mantissa bits and forcing its exponent into a small range:
// every value is finite, non-zero and of magnitude in [2^-10, 2^-2) — like a trained
// weight, never NaN or Inf. Lane-wise with masks, so no carry crosses lanes; fast enough
// to write hundreds of MB in about a second.
uint64_t RandomFloatBits(uint64_t bits, DType dtype) {
  switch (dtype) {
    case DType::kBF16:  // sign 1, exponent 8 (bias 127), mantissa 7
      return (bits & 0x807F807F807F807Full) |
             ((((bits >> 7) & 0x0007000700070007ull) + 0x0075007500750075ull) << 7);
    case DType::kF16:  // sign 1, exponent 5 (bias 15), mantissa 10
      return (bits & 0x83FF83FF83FF83FFull) |
             ((((bits >> 10) & 0x0007000700070007ull) + 0x0005000500050005ull) << 10);
    default:  // kF32: sign 1, exponent 8 (bias 127), mantissa 23
      return (bits & 0x807FFFFF807FFFFFull) |
             ((((bits >> 23) & 0x0000000700000007ull) + 0x0000007500000075ull) << 23);
  }
}

void FillRandom(const std::string& name, uint64_t seed, DType dtype, absl::Span<uint8_t> out) {
  uint64_t state = seed ^ HashName(name);
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    const uint64_t word = RandomFloatBits(SplitMix64(state), dtype);
    std::memcpy(out.data() + i, &word, 8);
  }
  if (i < out.size()) {  // sizes are whole elements, so a partial word holds whole lanes
    const uint64_t word = RandomFloatBits(SplitMix64(state), dtype);
    std::memcpy(out.data() + i, &word, out.size() - i);
  }
}

// Llama's tensors in the order of its state_dict (the order save_pretrained shards them).
std::vector<TensorToWrite> LlamaTensors(const SynthOptions& o) {
  const int64_t q_rows = o.heads * o.head_dim(), kv_rows = o.kv_heads * o.head_dim();
  std::vector<TensorToWrite> tensors;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    TensorToWrite t;
    t.name = std::move(name);
    t.dtype = o.dtype;
    t.shape = std::move(shape);
    t.fill = [name = t.name, seed = o.seed, dtype = o.dtype](absl::Span<uint8_t> out) {
      FillRandom(name, seed, dtype, out);
    };
    tensors.push_back(std::move(t));
  };
  add("model.embed_tokens.weight", {o.vocab, o.hidden});
  for (int64_t layer = 0; layer < o.layers; ++layer) {
    const std::string prefix = absl::StrCat("model.layers.", layer, ".");
    add(prefix + "self_attn.q_proj.weight", {q_rows, o.hidden});
    add(prefix + "self_attn.k_proj.weight", {kv_rows, o.hidden});
    add(prefix + "self_attn.v_proj.weight", {kv_rows, o.hidden});
    add(prefix + "self_attn.o_proj.weight", {o.hidden, q_rows});
    add(prefix + "mlp.gate_proj.weight", {o.intermediate, o.hidden});
    add(prefix + "mlp.up_proj.weight", {o.intermediate, o.hidden});
    add(prefix + "mlp.down_proj.weight", {o.hidden, o.intermediate});
    add(prefix + "input_layernorm.weight", {o.hidden});
    add(prefix + "post_attention_layernorm.weight", {o.hidden});
  }
  add("model.norm.weight", {o.hidden});
  if (!o.tie_embeddings) add("lm_head.weight", {o.vocab, o.hidden});
  return tensors;
}

// DeepSeek-V3's tensors as its checkpoints name them (MLA attention, a router with its bias,
// per-expert gate/up/down, one shared expert), in the order of its modules. With
// weight_scales, each projection also gets the F32 `weight_scale_inv` of 128x128 blocks that
// DeepSeek-V3's FP8 release stores beside it (the weights themselves stay in --dtype): that is
// what makes the real checkpoint ~91k tensors. The router is F32 as transformers builds it.
std::vector<TensorToWrite> DeepseekTensors(const SynthOptions& o) {
  const int64_t hd = o.head_dim(), rank = o.hidden;  // q_lora_rank = kv_lora_rank = hidden
  const int64_t moe_intermediate = o.moe_intermediate > 0 ? o.moe_intermediate : o.intermediate;
  std::vector<TensorToWrite> tensors;
  auto add = [&](std::string name, std::vector<int64_t> shape, DType dtype) {
    TensorToWrite t;
    t.name = std::move(name);
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.fill = [name = t.name, seed = o.seed, dtype](absl::Span<uint8_t> out) {
      FillRandom(name, seed, dtype, out);
    };
    tensors.push_back(std::move(t));
  };
  auto projection = [&](const std::string& name, int64_t rows, int64_t cols) {
    add(name + ".weight", {rows, cols}, o.dtype);
    if (o.weight_scales)
      add(name + ".weight_scale_inv", {(rows + 127) / 128, (cols + 127) / 128}, DType::kF32);
  };
  auto mlp = [&](const std::string& prefix, int64_t intermediate) {
    projection(prefix + "gate_proj", intermediate, o.hidden);
    projection(prefix + "up_proj", intermediate, o.hidden);
    projection(prefix + "down_proj", o.hidden, intermediate);
  };
  add("model.embed_tokens.weight", {o.vocab, o.hidden}, o.dtype);
  for (int64_t layer = 0; layer < o.layers; ++layer) {
    const std::string prefix = absl::StrCat("model.layers.", layer, ".");
    projection(prefix + "self_attn.q_a_proj", rank, o.hidden);
    add(prefix + "self_attn.q_a_layernorm.weight", {rank}, o.dtype);
    projection(prefix + "self_attn.q_b_proj", o.heads * 2 * hd, rank);  // qk_nope + qk_rope per head
    projection(prefix + "self_attn.kv_a_proj_with_mqa", rank + hd, o.hidden);
    add(prefix + "self_attn.kv_a_layernorm.weight", {rank}, o.dtype);
    projection(prefix + "self_attn.kv_b_proj", o.heads * 2 * hd, rank);  // qk_nope + v per head
    projection(prefix + "self_attn.o_proj", o.hidden, o.heads * hd);
    if (layer < o.dense_layers) {
      mlp(prefix + "mlp.", o.intermediate);
    } else {
      for (int64_t expert = 0; expert < o.experts; ++expert) {
        mlp(absl::StrCat(prefix, "mlp.experts.", expert, "."), moe_intermediate);
      }
      add(prefix + "mlp.gate.weight", {o.experts, o.hidden}, DType::kF32);
      add(prefix + "mlp.gate.e_score_correction_bias", {o.experts}, DType::kF32);
      mlp(prefix + "mlp.shared_experts.", moe_intermediate);
    }
    add(prefix + "input_layernorm.weight", {o.hidden}, o.dtype);
    add(prefix + "post_attention_layernorm.weight", {o.hidden}, o.dtype);
  }
  add("model.norm.weight", {o.hidden}, o.dtype);
  if (!o.tie_embeddings) add("lm_head.weight", {o.vocab, o.hidden}, o.dtype);
  return tensors;
}

std::string TorchDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    default:
      return "float32";
  }
}

// Enough of a Hugging Face config for transformers to build the model written:
// LlamaForCausalLM, or with experts DeepseekV3ForCausalLM (one expert group, top-k of at most
// 8 experts, MLA with both LoRA ranks = hidden and every head dimension = hidden / heads).
std::string ConfigJson(const SynthOptions& o) {
  const bool moe = o.experts > 0;
  nlohmann::ordered_json config;
  config["architectures"] = {moe ? "DeepseekV3ForCausalLM" : "LlamaForCausalLM"};
  config["model_type"] = moe ? "deepseek_v3" : "llama";
  config["hidden_size"] = o.hidden;
  config["intermediate_size"] = o.intermediate;
  config["num_hidden_layers"] = o.layers;
  config["num_attention_heads"] = o.heads;
  config["num_key_value_heads"] = o.kv_heads;  // = heads with experts
  if (moe) {
    config["moe_intermediate_size"] = o.moe_intermediate > 0 ? o.moe_intermediate : o.intermediate;
    config["first_k_dense_replace"] = o.dense_layers;
    config["n_routed_experts"] = o.experts;
    config["n_shared_experts"] = 1;
    config["num_experts_per_tok"] = std::min<int64_t>(8, o.experts);
    config["n_group"] = 1;
    config["topk_group"] = 1;
    config["norm_topk_prob"] = true;
    config["routed_scaling_factor"] = 2.5;
    for (const char* rank : {"q_lora_rank", "kv_lora_rank"}) config[rank] = o.hidden;
    for (const char* dim : {"qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}) config[dim] = o.head_dim();
  } else {
    config["head_dim"] = o.head_dim();
  }
  config["vocab_size"] = o.vocab;
  config["max_position_embeddings"] = 4096;
  config["rms_norm_eps"] = moe ? 1e-6 : 1e-5;
  config["rope_theta"] = 10000.0;
  config["hidden_act"] = "silu";
  config["tie_word_embeddings"] = o.tie_embeddings;
  config["torch_dtype"] = TorchDTypeName(o.dtype);
  return config.dump(2) + "\n";
}

bool IsCheckpointFileName(const std::string& name) {
  return name == "model.safetensors" || name == "model.safetensors.index.json" || name == "config.json" ||
         (absl::StartsWith(name, "model-") && absl::StrContains(name, "-of-") &&
          absl::EndsWith(name, ".safetensors"));
}

// Shards of an earlier run with another shard count would linger beside the new ones, and a
// model.safetensors beside a new index would shadow it: replacing a checkpoint means removing
// the old one first, which only --overwrite may do (it deletes nothing else in the folder).
absl::Status PrepareOutputDir(const SynthOptions& o) {
  std::error_code ec;
  if (!fs::exists(o.out_dir, ec)) return absl::OkStatus();
  if (!fs::is_directory(o.out_dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(o.out_dir, ": exists and is not a folder"));
  }
  std::vector<fs::path> existing;
  for (const fs::directory_entry& entry : fs::directory_iterator(o.out_dir, ec)) {
    if (IsCheckpointFileName(entry.path().filename().string())) existing.push_back(entry.path());
  }
  if (ec) return absl::ErrnoToStatus(ec.value(), absl::StrCat(o.out_dir, ": cannot list: ", ec.message()));
  if (existing.empty()) return absl::OkStatus();
  if (!o.overwrite) {
    return absl::AlreadyExistsError(
        absl::StrCat(o.out_dir, " already holds a checkpoint (", existing.front().filename().string(),
                     "); pass --overwrite to replace it, or choose another folder"));
  }
  for (const fs::path& path : existing) {
    if (!fs::remove(path, ec) && ec) {
      return absl::ErrnoToStatus(ec.value(),
                                 absl::StrCat("cannot remove ", path.string(), ": ", ec.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SynthOptions> ParseOptions(const CliArgs& args) {
  ML_RETURN_IF_ERROR(args.ExpectPositionals(1, 1, "one OUT_DIR"));
  SynthOptions o;
  o.out_dir = args.positionals().front();
  ML_ASSIGN_OR_RETURN(o.layers, args.GetInt("layers", o.layers, 1, 10'000));
  ML_ASSIGN_OR_RETURN(o.hidden, args.GetInt("hidden", o.hidden, 1, 1 << 20));
  ML_ASSIGN_OR_RETURN(o.intermediate, args.GetInt("intermediate", o.intermediate, 1, 1 << 22));
  ML_ASSIGN_OR_RETURN(o.heads, args.GetInt("heads", o.heads, 1, 1 << 14));
  ML_ASSIGN_OR_RETURN(o.kv_heads, args.GetInt("kv-heads", o.kv_heads, 1, 1 << 14));
  ML_ASSIGN_OR_RETURN(o.vocab, args.GetInt("vocab", o.vocab, 1, 1 << 24));
  ML_ASSIGN_OR_RETURN(o.experts, args.GetInt("experts", 0, 0, 1 << 16));
  ML_ASSIGN_OR_RETURN(o.dense_layers,
                      args.GetInt("dense-layers", std::min<int64_t>(3, o.layers), 0, o.layers));
  ML_ASSIGN_OR_RETURN(o.moe_intermediate, args.GetInt("moe-intermediate", o.intermediate, 1, 1 << 22));
  o.weight_scales = args.Has("weight-scales");
  if (o.experts == 0 && (args.Has("dense-layers") || args.Has("moe-intermediate") || o.weight_scales)) {
    return absl::InvalidArgumentError(
        "--dense-layers, --moe-intermediate and --weight-scales need --experts N");
  }
  ML_ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed", 1, 0, std::numeric_limits<int64_t>::max()));
  o.seed = static_cast<uint64_t>(seed);
  if (o.hidden % o.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--hidden ", o.hidden, " must be a multiple of --heads ",
                                                   o.heads, " (head_dim = hidden/heads)"));
  }
  if (o.experts > 0) {  // MLA: keys and values come from one latent shared by every head
    if (args.Has("kv-heads"))
      return absl::InvalidArgumentError("--kv-heads does not apply with --experts (MLA)");
    o.kv_heads = o.heads;
  }
  if (o.heads % o.kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--heads ", o.heads, " must be a multiple of --kv-heads ", o.kv_heads));
  }
  const std::string dtype_name = args.GetOr("dtype", "bf16");
  absl::StatusOr<DType> dtype = DTypeFromAnyName(dtype_name);
  if (!dtype.ok() || (*dtype != DType::kBF16 && *dtype != DType::kF16 && *dtype != DType::kF32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype \"", dtype_name, "\" is not supported (choose one of: bf16, f16, f32)"));
  }
  o.dtype = *dtype;
  if (std::optional<std::string> text = args.Get("shard-size")) {
    absl::StatusOr<uint64_t> parsed = ParseByteSize(*text);
    if (!parsed.ok()) return Annotate(parsed.status(), "--shard-size");
    if (*parsed == 0) return absl::InvalidArgumentError("--shard-size must be more than 0 bytes");
    o.max_shard_bytes = *parsed;
  }
  o.tie_embeddings = args.Has("tie-embeddings");
  o.overwrite = args.Has("overwrite");
  return o;
}

absl::Status Synthesize(const CliArgs& args) {
  ML_ASSIGN_OR_RETURN(SynthOptions o, ParseOptions(args));
  const auto start = std::chrono::steady_clock::now();
  ML_RETURN_IF_ERROR(PrepareOutputDir(o));
  const bool moe = o.experts > 0;
  ML_RETURN_IF_ERROR(
      WriteShardedCheckpoint(o.out_dir, moe ? DeepseekTensors(o) : LlamaTensors(o), o.max_shard_bytes));
  // Written last: a config.json says the checkpoint beside it is complete.
  ML_RETURN_IF_ERROR(WriteOutput((fs::path(o.out_dir) / "config.json").string(), ConfigJson(o)));
  // Reading it back costs only the headers and proves the files are what readers expect.
  ML_ASSIGN_OR_RETURN(Checkpoint written, OpenCheckpoint(o.out_dir));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return WriteOutput("-", absl::StrFormat("synth: wrote %s: %d files, %d tensors, %s in %.2f s\n",
                                          written.dir, written.files.size(), written.tensors.size(),
                                          FormatBytes(written.total_size_bytes()), seconds));
}

}  // namespace

int RunSynth(int argc, char** argv) {
  CliArgs args("metactl synth", "OUT_DIR [flags]",
               "Writes a synthetic Llama-shaped checkpoint into OUT_DIR: safetensors shards named like\n"
               "Hugging Face's (model-00001-of-0000N.safetensors) with model.safetensors.index.json, or one\n"
               "model.safetensors when it fits in one shard, and a config.json for LlamaForCausalLM.\n"
               "Weights are deterministic pseudo-random finite numbers: the same flags give the same bytes.");
  args.Flag("layers", "N", "decoder layers (default 8)");
  args.Flag("hidden", "N", "hidden size (default 1024); a multiple of --heads");
  args.Flag("intermediate", "N", "MLP intermediate size (default 2816)");
  args.Flag("heads", "N", "attention heads (default 16)");
  args.Flag("kv-heads", "N", "key/value heads (default 4); --heads must be a multiple of it");
  args.Flag("vocab", "N", "vocabulary size (default 32000)");
  args.Flag("experts", "N",
            "routed experts per MoE layer: a DeepSeek-V3-shaped model (MLA attention, per-expert\n"
            "gate/up/down, a shared expert, a config.json for DeepseekV3ForCausalLM); default 0: Llama");
  args.Flag("dense-layers", "N", "with --experts: dense layers before the first MoE layer (default 3)");
  args.Flag("moe-intermediate", "N",
            "with --experts: each expert's intermediate size (default --intermediate)");
  args.Switch("weight-scales",
              "with --experts: an F32 weight_scale_inv beside every projection, as DeepSeek-V3's FP8\n"
              "release stores them (61 layers x 256 experts: ~90k tensors)");
  args.Flag("dtype", "DTYPE", "bf16 (default), f16 or f32");
  args.Flag("shard-size", "SIZE", "most data bytes per shard, e.g. 100MB (default), 2GiB");
  args.Flag("seed", "N", "seed of the pseudo-random weights (default 1)");
  args.Switch("tie-embeddings", "share lm_head with embed_tokens: write no lm_head.weight");
  args.Switch(
      "overwrite",
      "replace a checkpoint already in OUT_DIR (removes its model*.safetensors, index and config.json)");
  args.Epilog(
      "With the defaults the checkpoint holds 75 tensors, 297 MiB, in 4 shards (about a second).\n\n"
      "examples:\n"
      "  metactl synth /tmp/tiny-llama\n"
      "  metactl synth /tmp/llama-1b --layers 16 --hidden 2048 --intermediate 8192 --heads 32 --kv-heads 8 "
      "\\\n"
      "      --vocab 128256 --shard-size 2GB --overwrite\n"
      "  metactl synth /tmp/deepseek-v3-shaped --layers 61 --experts 256 --weight-scales --hidden 16 --heads "
      "2 \\\n"
      "      --intermediate 32 --moe-intermediate 8 --vocab 64 --shard-size 80KB");
  return ParseAndRun("synth", args, argc, argv, &Synthesize);
}

}  // namespace metaload
