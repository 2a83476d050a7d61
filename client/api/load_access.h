// What the facade's own files see of a LoadedRank (include/metaload/load.h): the library's
// RankLoad it holds, which verification (client/api/verify.cc) hands to VerifyAcrossRanks.
// Not installed. Thread-safety: a LoadedRank is immutable once made.
#ifndef METALOAD_CLIENT_API_LOAD_ACCESS_H_
#define METALOAD_CLIENT_API_LOAD_ACCESS_H_

#include <memory>
#include <vector>

#include "client/load/rank_loader.h"
#include "metaload/load.h"

namespace metaload {

struct LoadedRank::Impl {
  RankLoad load;
  std::vector<LoadedRank::Tensor> tensors;  // load.tensors as the public type, in order
};

struct LoadedRankAccess {
  static LoadedRank Make(RankLoad load);
  static const RankLoad& Load(const LoadedRank& loaded);
};

}  // namespace metaload

#endif  // METALOAD_CLIENT_API_LOAD_ACCESS_H_
