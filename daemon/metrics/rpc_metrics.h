// Per-RPC metrics of metad's main port: each call's duration (a histogram per method) and how
// it ended (a counter per method and gRPC status code), recorded by a server interceptor
// (daemon/metad_main.cc) for every call that passed the header check. Methods are a closed
// set — metaload.v1.Metad's and grpc.health.v1.Health's — so that a client naming methods
// that do not exist cannot grow the label set; every other path counts as "unknown".
//
//   RpcMetrics rpcs;
//   RpcMethod method = RpcMetrics::MethodOf("/metaload.v1.Metad/GetPlan");
//   rpcs.Record(method, grpc::StatusCode::OK, absl::Milliseconds(3));
//   rpcs.Write(text);
//
// Thread-safety: Record and Write from any thread (atomics).
#ifndef METALOAD_DAEMON_METRICS_RPC_METRICS_H_
#define METALOAD_DAEMON_METRICS_RPC_METRICS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/metrics/histogram.h"
#include "daemon/metrics/metrics_text.h"

namespace metaload {

// An index into RpcMetrics's methods.
using RpcMethod = size_t;

class RpcMetrics {
 public:
  RpcMetrics();

  // The method a gRPC path names ("/metaload.v1.Metad/GetPlan"); "unknown" for any other.
  static RpcMethod MethodOf(absl::string_view path);

  // `code`: gRPC's status code, 0..16; another counts as 2 (UNKNOWN).
  void Record(RpcMethod method, int code, absl::Duration took);
  // metaload_rpc_duration_seconds and metaload_rpc_handled_total, with their families.
  void Write(MetricsText& text) const;
  // Calls recorded for `method` (its histogram's count).
  uint64_t calls(RpcMethod method) const;

 private:
  static constexpr int kCodes = 17;
  std::vector<std::unique_ptr<Histogram>> durations_;  // per method
  std::unique_ptr<std::atomic<uint64_t>[]> handled_;   // method * kCodes + code
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_METRICS_RPC_METRICS_H_
