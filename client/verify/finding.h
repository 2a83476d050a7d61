// One thing a rank found wrong: a tensor and why, or (tensor empty) something about the whole
// rank. What materialize refuses (client/resolve/materialize.h) and what verification exchanges
// (client/verify/rank_report.h) are the same findings.
#ifndef METALOAD_CLIENT_VERIFY_FINDING_H_
#define METALOAD_CLIENT_VERIFY_FINDING_H_

#include <string>

namespace metaload {

struct Finding {
  std::string tensor;  // empty: about the whole rank ("could not load: ...")
  std::string why;     // "still on meta", "not filled: bytes differ from the digest ..."

  bool operator==(const Finding&) const = default;
};

// "lm_head.weight: still on meta", or `why` alone for the whole rank.
inline std::string FindingLine(const Finding& f) {
  return f.tensor.empty() ? f.why : f.tensor + ": " + f.why;
}

}  // namespace metaload

#endif  // METALOAD_CLIENT_VERIFY_FINDING_H_
