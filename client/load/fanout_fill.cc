#include "client/load/fanout_fill.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// Only `only` of `plan` (the rest left alone, as kModule leaves a request).
std::vector<Resolution> Restricted(const std::vector<Resolution>& plan, const std::vector<size_t>& only) {
  std::vector<Resolution> out(plan.size(), Resolution{Resolution::Kind::kModule});
  for (size_t i : only) out[i] = plan[i];
  return out;
}

// Which of this rank's items are read so far: the exchange waits on it for each piece it sends.
class ReadProgress {
 public:
  explicit ReadProgress(size_t items) : read_(items, false), results_(items) {}

  // The first result told of an item is its final one: told as soon as it is read, and again
  // with its batch.
  void Done(size_t i, const FillResult& result) {
    absl::MutexLock lock(&mu_);
    if (read_[i]) return;
    results_[i] = result;
    read_[i] = true;
  }
  // Every item not read yet, as not filled: its receivers read it themselves.
  void FailRest(const std::string& why) {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < read_.size(); ++i) {
      if (read_[i]) continue;
      results_[i].filled = false;
      results_[i].error = why;
      read_[i] = true;
    }
  }
  FillResult Await(size_t i) {
    absl::MutexLock lock(&mu_);
    const auto read = [this, i]() -> bool { return read_[i]; };
    mu_.Await(absl::Condition(&read));
    return results_[i];
  }

 private:
  absl::Mutex mu_;
  std::vector<bool> read_ ABSL_GUARDED_BY(mu_);
  std::vector<FillResult> results_ ABSL_GUARDED_BY(mu_);
};

// The batches this rank reads in: what it sends, in the order it sends it, in parts of a
// sixteenth of those bytes (at least 64 MiB), so that the reads keep to the order the receivers
// wait in (each piece is sent as soon as it is read); then everything else it reads itself.
struct ReadBatches {
  std::vector<std::vector<size_t>> batches;
  size_t send_batches = 0;  // the first ones: what this rank sends
};

ReadBatches BatchesToRead(const RankFanout& fan, const std::vector<at::Tensor>& tensors, size_t items) {
  const std::vector<size_t> send = SendOrder(fan);
  uint64_t total = 0;
  for (size_t i : send) total += static_cast<uint64_t>(tensors[i].nbytes());
  const uint64_t part_bytes = std::max<uint64_t>(uint64_t{64} << 20, total / 16);
  std::vector<std::vector<size_t>> batches;
  uint64_t in_part = part_bytes;
  for (size_t i : send) {
    if (in_part >= part_bytes) {
      batches.emplace_back();
      in_part = 0;
    }
    batches.back().push_back(i);
    in_part += static_cast<uint64_t>(tensors[i].nbytes());
  }
  const size_t send_batches = batches.size();
  std::vector<size_t> rest;  // no piece: neither sent nor received
  for (size_t i = 0; i < items; ++i) {
    if (i >= fan.part.piece_of_item.size() || fan.part.piece_of_item[i] < 0) rest.push_back(i);
  }
  if (!rest.empty()) batches.push_back(std::move(rest));
  return ReadBatches{std::move(batches), send_batches};
}

// Adds what FillResolved read of `batch` to `into`.
void Merge(FillOutcome& part, const std::vector<size_t>& batch, FillOutcome& into) {
  for (size_t i : batch) into.results[i] = std::move(part.results[i]);
  into.direct_bytes += part.direct_bytes;
  into.streamed_bytes += part.streamed_bytes;
  for (const auto& [node, bytes] : part.streamed_bytes_by_node) into.streamed_bytes_by_node[node] += bytes;
}

}  // namespace

absl::StatusOr<FillOutcome> FillWithFanout(const RankFanout& fan, const FanoutSettings& settings,
                                           const ModelView& view, std::vector<MaterializeRequest>& requests,
                                           const std::vector<Resolution>& plan, const InitPolicy& init,
                                           const ReadSettings& read, ExchangeOutcome* exchanged_out) {
  std::vector<at::Tensor> tensors;
  for (const MaterializeRequest& r : requests) tensors.push_back(r.dest);
  ReadProgress progress(plan.size());
  // What a piece that arrives proves is the reader's proof of its bytes: each item's proof, as
  // every member of its group makes it alike, the sum to come with the piece.
  std::vector<FillResult> received(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind == Resolution::Kind::kRead && plan[i].stored != nullptr) {
      received[i].proof = ProofTemplate(*plan[i].stored);
    }
  }
  // What arrives by fan-out arrives in the dtype it is held in, not the stored one.
  FanoutSettings counted = settings;
  counted.meter = read.meter;
  for (size_t i = 0; read.meter != nullptr && i < plan.size(); ++i) {
    if (!fan.Receives(i) || plan[i].kind != Resolution::Kind::kRead || plan[i].stored == nullptr) continue;
    read.meter->AdjustTotalBytes(static_cast<int64_t>(tensors[i].nbytes()) -
                                 static_cast<int64_t>(HeldStoredBytes(requests[i], *plan[i].stored)));
  }
  ExchangeOutcome exchanged;
  std::thread exchange([&] {
    exchanged = ExchangePieces(
        fan, counted, tensors, [&progress](size_t i) { return progress.Await(i); }, received);
  });
  FillOutcome outcome;
  outcome.results.resize(plan.size());
  absl::Status status = absl::OkStatus();
  const ReadBatches to_read = BatchesToRead(fan, tensors, plan.size());
  // What this rank sends is read in the order its receivers wait for it, not staggered.
  ReadSettings in_send_order = read;
  in_send_order.stagger_count = 1;
  for (size_t b = 0; b < to_read.batches.size(); ++b) {
    const std::vector<size_t>& batch = to_read.batches[b];
    const bool sends = b < to_read.send_batches;
    // A piece goes out as soon as it is read, not when its whole batch is.
    absl::StatusOr<FillOutcome> part = FillResolved(
        view, requests, Restricted(plan, batch), init, sends ? in_send_order : read,
        sends ? FilledFn([&progress](size_t i, const FillResult& r) { progress.Done(i, r); }) : FilledFn());
    if (!part.ok()) {
      status = part.status();
      break;
    }
    Merge(*part, batch, outcome);
    for (size_t i : batch) progress.Done(i, outcome.results[i]);
  }
  if (!status.ok()) progress.FailRest(std::string(status.message()));
  exchange.join();
  ML_RETURN_IF_ERROR(status);
  for (size_t i = 0; i < plan.size(); ++i) {
    if (received[i].filled) outcome.results[i] = std::move(received[i]);
  }
  if (!exchanged.read_yourself.empty()) {
    ML_ASSIGN_OR_RETURN(FillOutcome rest,
                        FillResolved(view, requests, Restricted(plan, exchanged.read_yourself), init, read));
    Merge(rest, exchanged.read_yourself, outcome);
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].kind != Resolution::Kind::kTied) continue;
    const FillResult& holder = outcome.results[plan[i].same_as];
    outcome.results[i].filled = holder.filled;
    outcome.results[i].error = holder.error;
  }
  exchanged.read_yourself.clear();  // read above
  *exchanged_out = std::move(exchanged);
  return outcome;
}

}  // namespace metaload
