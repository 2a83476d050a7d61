#include "daemon/metrics/rpc_metrics.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace metaload {
namespace {

constexpr absl::string_view kMetadPrefix = "/metaload.v1.Metad/";
constexpr absl::string_view kHealthPrefix = "/grpc.health.v1.Health/";

// The label values: Metad's methods by their names, the health service's as "Health.<name>".
constexpr absl::string_view kMethods[] = {"RegisterModel", "UnregisterModel", "GetPlan", "GetLayout",
                                          "ReadRange",     "GetStatus",       "Join",    "PublishModel",
                                          "Health.Check",  "Health.Watch",    "unknown"};
constexpr size_t kMethodCount = sizeof(kMethods) / sizeof(kMethods[0]);
constexpr RpcMethod kUnknown = kMethodCount - 1;

constexpr absl::string_view kCodeNames[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

// From a cached plan answered in under a millisecond to a ReadRange stream of a large shard
// (minutes); a Watch lasts as long as its caller keeps it.
std::vector<double> DurationBounds() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
}

}  // namespace

RpcMetrics::RpcMetrics() : handled_(new std::atomic<uint64_t>[kMethodCount * kCodes]) {
  for (size_t i = 0; i < kMethodCount; ++i)
    durations_.push_back(std::make_unique<Histogram>(DurationBounds()));
  for (size_t i = 0; i < kMethodCount * kCodes; ++i) handled_[i].store(0, std::memory_order_relaxed);
}

RpcMethod RpcMetrics::MethodOf(absl::string_view path) {
  if (absl::ConsumePrefix(&path, kMetadPrefix)) {
    for (RpcMethod m = 0; m < 8; ++m) {
      if (path == kMethods[m]) return m;
    }
    return kUnknown;
  }
  if (absl::ConsumePrefix(&path, kHealthPrefix)) {
    if (path == "Check") return 8;
    if (path == "Watch") return 9;
  }
  return kUnknown;
}

void RpcMetrics::Record(RpcMethod method, int code, absl::Duration took) {
  if (method >= kMethodCount) method = kUnknown;
  if (code < 0 || code >= kCodes) code = 2;
  durations_[method]->Observe(absl::ToDoubleSeconds(took));
  handled_[method * kCodes + static_cast<size_t>(code)].fetch_add(1, std::memory_order_relaxed);
}

uint64_t RpcMetrics::calls(RpcMethod method) const {
  return method < kMethodCount ? durations_[method]->count() : 0;
}

void RpcMetrics::Write(MetricsText& text) const {
  text.Family("metaload_rpc_duration_seconds", MetricType::kHistogram,
              "Time from a call's start on the main port to its status, by method (calls that passed the "
              "header check)");
  for (RpcMethod m = 0; m < kMethodCount; ++m) {
    durations_[m]->Write("metaload_rpc_duration_seconds", {{"method", kMethods[m]}}, text);
  }
  text.Family("metaload_rpc_handled_total", MetricType::kCounter,
              "Calls ended on the main port, by method and gRPC status code (only pairs seen so far)");
  for (RpcMethod m = 0; m < kMethodCount; ++m) {
    for (int code = 0; code < kCodes; ++code) {
      const uint64_t n = handled_[m * kCodes + static_cast<size_t>(code)].load(std::memory_order_relaxed);
      if (n != 0)
        text.Sample("metaload_rpc_handled_total", {{"method", kMethods[m]}, {"code", kCodeNames[code]}}, n);
    }
  }
}

}  // namespace metaload
