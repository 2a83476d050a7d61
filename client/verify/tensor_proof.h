// What a rank's bytes of one stored tensor prove, and what the sum over all ranks decides about
// that tensor's content (docs/integrity.md). Every rank holding any part of a tensor adds the
// terms of the tiles it holds (util/hash/tile_digest.h) into the tensor's slot; one all-reduce
// later every holder judges the slot alike: R whole copies of the tensor's tiles summing to R
// times the registered digest is content checked, whatever split the ranks held it in.
//
// Pure, torch-free.
#ifndef METALOAD_CLIENT_VERIFY_TENSOR_PROOF_H_
#define METALOAD_CLIENT_VERIFY_TENSOR_PROOF_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/format/tensor_layout.h"
#include "util/hash/tile_digest.h"

namespace metaload {

// One rank's contribution for one stored tensor it read (or received by fan-out: then the
// sender's sum for the same bytes).
struct TensorProof {
  std::string stored;                  // the stored tensor's name
  int64_t index = -1;                  // its slot: TensorLayout::index
  uint64_t tile_count = 0;             // of the whole tensor
  std::optional<TensorDigest> digest;  // as registered; absent: read without a digest
  TensorProofSum sum;                  // this rank's tiles
};

// The proof of the bytes `held` runs of `stored` hold, to be filled in as they arrive: sum
// empty, kind the digest's. Absent digest: a proof that says only "read without a digest".
TensorProof ProofTemplate(const TensorLayout& stored);

// A slot after the all-reduce: every rank's contributions summed.
struct SlotSum {
  uint64_t hashed = 0;          // tiles hashed, over all ranks and copies
  uint64_t cut = 0;             // tiles some rank held only in part
  uint64_t holders = 0;         // rank contributions
  std::vector<uint16_t> lanes;  // mod 2^16
};

// The state of a stored tensor's content, as every rank holding it judges it.
enum class ContentState {
  kChecked,   // R whole copies of its tiles sum to R times its registered digest
  kNoDigest,  // read from the checkpoint; no digest was registered to check it against
  kUnproven,  // a digest, but the ranks' tiles cannot be checked against it (`why` says why)
  kMismatch,  // its bytes differ from the registered digest: a failure
};
const char* ContentStateName(ContentState state);  // "checked", "no_digest", "unproven", "mismatch"

struct ContentVerdict {
  ContentState state = ContentState::kNoDigest;
  std::string why;  // for kUnproven and kMismatch
};

// `mine`: a proof this rank holds for the slot; `all`: the slot summed over every rank.
ContentVerdict JudgeSlot(const TensorProof& mine, const SlotSum& all);

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_TENSOR_PROOF_H_
