// The one place a rank decides, per tensor, how its values come (client/resolve/resolver.h),
// for the plan-driven load and materialize alike; then FillResolved carries it out against a
// real file: whole tensors, row and column boxes (tp), an uneven and an empty dim-0 chunk
// (fsdp), a tied alias filled once, a computed buffer and an initialized missing tensor.
#include "client/resolve/resolver.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "client/resolve/missing_init.h"
#include "planner/format/quantization.h"
#include "tests/test_support.h"

namespace metaload {
namespace {

using ResolutionKind = Resolution::Kind;

// "w" [4, 6] U8 holding 0..23 at offset 0 of "f.bin"; "e" [2] U8 after it. `path`: the file.
ModelView View(const std::string& path) {
  ModelView view;
  view.model = "m";
  view.stored["w"] = TensorLayout{"w", DType::kU8, {4, 6}, "f.bin", 0, 24, std::nullopt};
  view.stored["e"] = TensorLayout{"e", DType::kU8, {2}, "f.bin", 24, 26, std::nullopt};
  view.files["f.bin"] = FileRoute{"f.bin", path, 26, {}, {}};
  view.tied_to["lm_head.w"] = "w";
  view.buffer_rules["inv_freq"] = "rope_inv_freq(base=10000,dim=4)";
  return view;
}

MaterializeRequest Request(const std::string& name, std::vector<int64_t> full_shape,
                           std::optional<TensorBox> box = std::nullopt, bool is_buffer = false) {
  std::vector<int64_t> held = box.has_value() ? box->length : full_shape;
  return MaterializeRequest{name, std::move(full_shape), std::move(box), is_buffer,
                            torch::full(held, 255, torch::kUInt8)};
}

TEST(Resolve, DecidesEachTensorOnceBeforeAnyRead) {
  const ModelView view = View("/nonexistent");
  std::vector<MaterializeRequest> requests{
      Request("w", {4, 6}),
      Request("lm_head.w", {4, 6}),  // an alias, held apart: read as the stored tensor
      Request("inv_freq", {2}, std::nullopt, true),
      Request("step_buffer", {1}, std::nullopt, true),  // no rule: the module's
      Request("score.weight", {3}),                     // the checkpoint lacks it
      Request("e", {3}),                                // another shape than stored
      Request("w", {4, 6}, TensorBox{{3, 0}, {2, 6}}),  // a box outside the tensor
  };
  requests.push_back({"lm_head.w", {4, 6}, std::nullopt, false, requests[0].dest});  // the same tensor
  const std::vector<Resolution> plan =
      Resolve(view, requests, InitPolicy{}, "--init-missing zeros|normal:STD");
  ASSERT_EQ(plan.size(), requests.size());
  EXPECT_EQ(plan[0].kind, ResolutionKind::kRead);
  EXPECT_EQ(plan[0].stored, &view.stored.at("w"));
  EXPECT_EQ(plan[1].kind, ResolutionKind::kRead);
  EXPECT_EQ(plan[1].stored, &view.stored.at("w"));
  EXPECT_EQ(plan[2].kind, ResolutionKind::kBuffer);
  EXPECT_EQ(plan[2].detail, "rope_inv_freq(base=10000,dim=4)");
  EXPECT_EQ(plan[3].kind, ResolutionKind::kModule);
  EXPECT_EQ(plan[4].kind, ResolutionKind::kRefused);
  EXPECT_EQ(plan[4].detail, MissingTensorReason("--init-missing zeros|normal:STD"));
  EXPECT_EQ(plan[5].kind, ResolutionKind::kRefused);
  EXPECT_EQ(plan[5].detail,
            "the module's shape [3] differs from the checkpoint's [2] (another size of this model?)");
  EXPECT_EQ(plan[6].kind, ResolutionKind::kRefused);
  EXPECT_EQ(plan[6].detail, "its local part [3, +2) of dimension 0 is outside the tensor's 4");
  EXPECT_EQ(plan[7].kind, ResolutionKind::kTied);
  EXPECT_EQ(plan[7].same_as, 0u);

  InitPolicy zeros;
  zeros.kind = InitPolicy::Kind::kZeros;
  EXPECT_EQ(Resolve(view, requests, zeros, "")[4].kind, ResolutionKind::kInit)
      << "an initializing policy fills it";
}

// Known from the (meta) destination before anything is allocated: a dtype no checkpoint bytes
// convert to is refused; an alias the checkpoint stores too is read from its own bytes.
TEST(Resolve, RefusesADtypeItCannotFillAndReadsAStoredAliasAsItself) {
  ModelView view = View("/nonexistent");
  view.stored["lm_head.w"] = TensorLayout{"lm_head.w", DType::kU8, {4, 6}, "f.bin", 0, 24, std::nullopt};
  std::vector<MaterializeRequest> requests{
      Request("w", {4, 6}),
      Request("lm_head.w", {4, 6}),
  };
  requests[0].dest =
      torch::empty({4, 6}, torch::TensorOptions().dtype(torch::kComplexFloat).device(torch::kMeta));
  const std::vector<Resolution> plan = Resolve(view, requests, InitPolicy{}, "");
  EXPECT_EQ(plan[0].kind, ResolutionKind::kRefused);
  EXPECT_EQ(plan[0].detail,
            "the module holds it as torch ComplexFloat, which no checkpoint bytes convert to (the "
            "checkpoint's is U8): build the module in that dtype");
  EXPECT_EQ(plan[1].kind, ResolutionKind::kRead);
  EXPECT_EQ(plan[1].stored, &view.stored.at("lm_head.w"));
}

// Codes kept as stored by a module that declares its granularity (torchao's Float8Tensor):
// read when it is the checkpoint's, refused naming both otherwise, and refused for a tensor the
// checkpoint stores unquantized.
TEST(Resolve, KeptCodesOfADeclaredGranularityMustBeTheCheckpoints) {
  ModelView view = View("/nonexistent");
  view.stored["q"] = TensorLayout{"q", DType::kF8E4M3, {256, 128}, "f.bin", 0, 32768, std::nullopt};
  view.stored["q_scale_inv"] = TensorLayout{"q_scale_inv", DType::kF32, {2, 1}, "f.bin", 0, 8, std::nullopt};
  Quantization q;
  q.method = "fp8";
  q.scheme = QuantScheme::kFp8Block;
  q.block = {128, 128};
  view.quantization = q;
  view.quantized = FindQuantized(q, {view.stored.at("q"), view.stored.at("q_scale_inv")});
  const auto kept = [](const std::string& name, std::vector<int64_t> shape, std::vector<int64_t> block) {
    MaterializeRequest r{
        name, shape, std::nullopt, false,
        torch::empty(shape, torch::TensorOptions().dtype(torch::kFloat8_e4m3fn).device(torch::kMeta))};
    r.scale_block = std::move(block);
    return r;
  };
  std::vector<MaterializeRequest> requests{kept("q", {256, 128}, {128, 128}), kept("q", {256, 128}, {1, 128}),
                                           kept("w", {4, 6}, {1, 6})};
  requests.push_back(MaterializeRequest{"q_scale_inv",
                                        {2, 1},
                                        std::nullopt,
                                        false,
                                        torch::empty({2, 1}, torch::TensorOptions().device(torch::kMeta))});
  const std::vector<Resolution> plan = Resolve(view, requests, InitPolicy{}, "");
  EXPECT_EQ(plan[0].kind, ResolutionKind::kRead);
  EXPECT_EQ(plan[1].kind, ResolutionKind::kRefused);
  EXPECT_EQ(
      plan[1].detail,
      "q: the module keeps these codes with one scale per row ([1, 128]), but the checkpoint stores one "
      "per 128x128 block (fp8-block 128x128: q F8_E4M3 x q_scale_inv F32): build the module with the "
      "checkpoint's granularity (one scale per 128x128 block) or dequantize on load (dequantize=True)");
  EXPECT_EQ(plan[2].kind, ResolutionKind::kRefused);
  EXPECT_EQ(
      plan[2].detail,
      "the module keeps it as FP8 codes with their scales, but the checkpoint stores it unquantized, as "
      "U8: load it into an unquantized module and quantize it after");
  EXPECT_EQ(plan[3].kind, ResolutionKind::kRefused);  // the scales of the refused granularity
  EXPECT_EQ(plan[3].detail, "the scales of q, refused with its codes (see q)");
}

TEST(FillResolved, ReadsBoxesAsTheirPartsOfTheWholeAndTiesOnce) {
  testing::TempDir dir;
  std::string bytes;
  for (int i = 0; i < 26; ++i) bytes.push_back(static_cast<char>(i));
  testing::WriteFileOrDie(dir.File("f.bin"), bytes);
  const ModelView view = View(dir.File("f.bin"));
  std::vector<MaterializeRequest> requests{
      Request("w", {4, 6}),
      Request("w", {4, 6}, TensorBox{{2, 0}, {2, 6}}),  // tp: rows (column-parallel)
      Request("w", {4, 6}, TensorBox{{0, 3}, {4, 3}}),  // tp: columns (row-parallel)
      Request("w", {4, 6}, TensorBox{{3, 0}, {1, 6}}),  // fsdp: the last, short chunk
      Request("w", {4, 6}, TensorBox{{4, 0}, {0, 6}}),  // fsdp: a rank past the end
      Request("score.weight", {3}),
  };
  requests.push_back({"lm_head.w", {4, 6}, std::nullopt, false, requests[0].dest});
  InitPolicy zeros;
  zeros.kind = InitPolicy::Kind::kZeros;
  const std::vector<Resolution> plan = Resolve(view, requests, zeros, "");
  absl::StatusOr<FillOutcome> filled = FillResolved(view, requests, plan, zeros, ReadSettings{});
  ASSERT_TRUE(filled.ok()) << filled.status();
  const at::Tensor whole = torch::arange(24, torch::kUInt8).reshape({4, 6});
  EXPECT_TRUE(requests[0].dest.equal(whole));
  EXPECT_TRUE(requests[1].dest.equal(whole.narrow(0, 2, 2)));
  EXPECT_TRUE(requests[2].dest.equal(whole.narrow(1, 3, 3)));
  EXPECT_TRUE(requests[3].dest.equal(whole.narrow(0, 3, 1)));
  EXPECT_EQ(requests[4].dest.numel(), 0);
  EXPECT_TRUE(requests[5].dest.equal(torch::zeros({3}, torch::kUInt8)));
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_TRUE(filled->results[i].filled) << i;
  EXPECT_EQ(ProvenanceText(filled->results[0].provenance), "direct");
  EXPECT_EQ(ProvenanceText(filled->results[4].provenance), "") << "an empty chunk reads nothing";
  EXPECT_EQ(ProvenanceText(filled->results[5].provenance), "init:zeros");
  EXPECT_EQ(filled->results[6].provenance.kind, Provenance::Kind::kTied);
  EXPECT_EQ(filled->results[6].provenance.tied_to, "w");
  EXPECT_EQ(filled->direct_bytes, 24u + 12 + 12 + 6) << "the alias is not read again";
}

TEST(FillResolved, AnAliasHeldApartIsReadAsItsStoredTensorAndSaysSo) {
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.File("f.bin"), std::string(26, '\7'));
  const ModelView view = View(dir.File("f.bin"));
  std::vector<MaterializeRequest> requests{Request("lm_head.w", {4, 6})};
  const std::vector<Resolution> plan = Resolve(view, requests, InitPolicy{}, "");
  std::string told;  // what a fan-out reader is told says so too
  absl::StatusOr<FillOutcome> filled =
      FillResolved(view, requests, plan, InitPolicy{}, ReadSettings{},
                   [&told](size_t, const FillResult& result) { told = ProvenanceText(result.provenance); });
  ASSERT_TRUE(filled.ok()) << filled.status();
  EXPECT_TRUE(requests[0].dest.equal(torch::full({4, 6}, 7, torch::kUInt8)));
  EXPECT_EQ(ProvenanceText(filled->results[0].provenance), "direct (tied:w)");
  EXPECT_EQ(told, "direct (tied:w)");
}

// A fan-out reader sends each piece as soon as it is read (client/load/fanout_fill.cc): each
// request read from a file is told once, by its request index, with its bytes already in place
// and the result the outcome holds; computed, tied, empty and failed requests are not.
TEST(FillResolved, TellsEachRequestReadFromAFileOnceWithItsBytesInPlace) {
  testing::TempDir dir;
  std::string bytes;
  for (int i = 0; i < 26; ++i) bytes.push_back(static_cast<char>(i));
  testing::WriteFileOrDie(dir.File("f.bin"), bytes);
  ModelView view = View(dir.File("f.bin"));
  view.stored["e"] = TensorLayout{"e", DType::kU8, {2}, "g.bin", 0, 2, std::nullopt};
  view.files["g.bin"] = FileRoute{"g.bin", dir.File("g.bin"), 2, {}, {}};  // never written
  std::vector<MaterializeRequest> requests{
      Request("score.weight", {3}),  // initialized: not told
      Request("w", {4, 6}),          // told as request 1, not target 0
      Request("w", {4, 6}, TensorBox{{2, 0}, {2, 6}}),
      Request("w", {4, 6}, TensorBox{{4, 0}, {0, 6}}),  // empty: nothing read, not told
      Request("e", {2}),                                // its read fails: not told
  };
  requests.push_back({"lm_head.w", {4, 6}, std::nullopt, false, requests[1].dest});  // tied: not told
  InitPolicy zeros;
  zeros.kind = InitPolicy::Kind::kZeros;
  const std::vector<Resolution> plan = Resolve(view, requests, zeros, "");
  ASSERT_EQ(plan[5].kind, ResolutionKind::kTied);
  const at::Tensor whole = torch::arange(24, torch::kUInt8).reshape({4, 6});
  std::mutex mu;
  std::map<size_t, int> told;
  std::map<size_t, std::string> told_provenance;
  std::map<size_t, bool> in_place;
  absl::StatusOr<FillOutcome> filled =
      FillResolved(view, requests, plan, zeros, ReadSettings{}, [&](size_t i, const FillResult& result) {
        std::lock_guard<std::mutex> lock(mu);
        ++told[i];
        told_provenance[i] = ProvenanceText(result.provenance);
        in_place[i] = result.filled && requests[i].dest.equal(i == 2 ? whole.narrow(0, 2, 2) : whole);
      });
  ASSERT_TRUE(filled.ok()) << filled.status();
  EXPECT_EQ(told, (std::map<size_t, int>{{1, 1}, {2, 1}}));
  EXPECT_TRUE(in_place[1]);
  EXPECT_TRUE(in_place[2]);
  EXPECT_EQ(told_provenance[1], "direct");
  EXPECT_EQ(told_provenance[1], ProvenanceText(filled->results[1].provenance));
  EXPECT_EQ(told_provenance[2], ProvenanceText(filled->results[2].provenance));
  EXPECT_FALSE(filled->results[4].filled) << "the read of a missing file fails, and is only in the outcome";
  EXPECT_TRUE(filled->results[0].filled);
  EXPECT_TRUE(filled->results[3].filled);
  EXPECT_TRUE(filled->results[5].filled);
}

}  // namespace
}  // namespace metaload
