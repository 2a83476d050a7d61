#include "client/read/daemon_client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/read/busy_retry.h"
#include "proto/chunk_wire.h"
#include "proto/convert.h"
#include "proto/fanout_wire.h"
#include "proto/metaload.grpc.pb.h"
#include "security/client_credentials.h"
#include "security/server_identity.h"
#include "util/status_macros.h"

namespace metaload {

// Chunks are ~1 MiB and a rank's part of a plan small, but a whole plan (`metactl plan NAME
// --daemon`) of a 405B model at fsdp on 1,024 GPUs is 124 MiB: gRPC's 4 MiB default would
// refuse it.
constexpr int kMaxReceiveBytes = 512 << 20;
constexpr size_t kMaxQuantizationConfigBytes = 64 << 10;
constexpr int kStreamWindowBytes = 4 << 20;
// How long one connection attempt may take, TCP and HTTP/2 handshakes together (the server
// side gives a handshake 10 s too, daemon/main.cc).
constexpr int kConnectTimeoutMs = 10'000;

struct DaemonClient::Impl {
  std::shared_ptr<grpc::Channel> channel;  // says whether a failed call ever reached the daemon
  std::unique_ptr<v1::Metad::Stub> stub;
  // ReadRange is read raw (proto/chunk_wire.h): chunk data is copied once, from the received
  // slices straight into the destination.
  std::unique_ptr<grpc::GenericStub> generic;
  absl::Status setup_error;  // the credentials could not be loaded: every call fails with it
  // The planned node's certificate name, checked in the TLS handshake; null: the address's.
  std::shared_ptr<ServerNameCheck> server_check;

  // A call's status as the daemon's (FromDaemonCallStatus); a server refused for its
  // certificate's name says so, keeping UNAVAILABLE (a failed server, for failover).
  absl::Status CallStatus(const grpc::Status& status, const std::string& address, absl::string_view context) {
    absl::Status converted = FromDaemonCallStatus(status, *channel, address, context);
    // A connection that failed the check carried no call: the status is the transport's.
    if (server_check == nullptr || !(absl::IsUnavailable(converted) || absl::IsUnauthenticated(converted) ||
                                     absl::IsDeadlineExceeded(converted))) {
      return converted;
    }
    const std::optional<std::string> refused = server_check->Refused();
    if (!refused.has_value()) return converted;
    return absl::UnavailableError(absl::StrCat(context, ": ", server_check->Explain(address, *refused)));
  }
};

namespace {

constexpr char kReadRangeMethod[] = "/metaload.v1.Metad/ReadRange";

// How many received chunks may wait for the caller to copy them out. Copying a chunk into its
// tensor costs the tensor's first-touch page faults and a CRC pass: done on gRPC's callback
// thread, it kept that thread from reading the socket meanwhile, and a rank streamed at half
// the rate of a plain TCP receive (issue 39's profile). The caller's own thread copies instead,
// while gRPC reads on; a full queue stops reading (and so the HTTP/2 window) until it drains,
// so a rank holds at most this many chunks (~1 MiB each) beyond the window per stream.
constexpr size_t kMaxQueuedChunks = 4;

// A ReadRange stream's chunks, handed from the reactor to the caller, and how it ended; shared
// by both (the reactor deletes itself when the call is over, the caller may still drain).
struct RangeOutcome {
  absl::Mutex mu;
  std::deque<grpc::ByteBuffer> chunks ABSL_GUARDED_BY(mu);  // received, not yet copied
  // The queue was full and no read is outstanding: the caller starts the next one.
  bool paused ABSL_GUARDED_BY(mu) = false;
  bool done ABSL_GUARDED_BY(mu) = false;  // OnDone ran: the reactor is gone
  grpc::Status status ABSL_GUARDED_BY(mu);
  bool Ready() const ABSL_SHARED_LOCKS_REQUIRED(mu) { return done || !chunks.empty(); }
};

// One ReadRange stream; the caller copies its chunks out (RangeOutcome). A server-streaming call
// is, on the wire, a bidi stream whose client sends one message and closes: the generic stub
// only offers the latter.
class RawRangeReader final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // Starts the call; deletes itself when it is over. `ctx` must outlive that (Await).
  static RawRangeReader* Start(grpc::GenericStub* stub, grpc::ClientContext* ctx,
                               const v1::ReadRangeRequest& request, std::shared_ptr<RangeOutcome> outcome) {
    auto* reader = new RawRangeReader(std::move(outcome));
    const std::string bytes = request.SerializeAsString();
    grpc::Slice slice(bytes);
    reader->request_ = grpc::ByteBuffer(&slice, 1);
    stub->PrepareBidiStreamingCall(ctx, kReadRangeMethod, grpc::StubOptions(), reader);
    reader->StartWriteLast(&reader->request_, grpc::WriteOptions());
    reader->StartRead(&reader->chunk_);
    // The caller may start reads from outside a reaction (Resume): the hold keeps OnDone, and
    // the reactor's end, from coming before the last read has failed, which ends the hold.
    reader->AddHold();
    reader->StartCall();
    return reader;
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the stream ended (or was cancelled): no read follows
      RemoveHold();
      return;
    }
    bool pause = false;
    {
      absl::MutexLock lock(&outcome_->mu);
      outcome_->chunks.push_back(std::move(chunk_));
      pause = outcome_->chunks.size() >= kMaxQueuedChunks;
      outcome_->paused = pause;
    }
    if (!pause) StartRead(&chunk_);
  }

  // The caller took a chunk out of a queue that was full (outcome's paused, which it cleared).
  // Safe outside a reaction: no read is outstanding, so the hold has not ended.
  void Resume() { StartRead(&chunk_); }

  // The last reaction: every OnReadDone has returned.
  void OnDone(const grpc::Status& status) override {
    {
      absl::MutexLock lock(&outcome_->mu);
      outcome_->status = status;
      outcome_->done = true;
    }
    delete this;
  }

 private:
  explicit RawRangeReader(std::shared_ptr<RangeOutcome> outcome) : outcome_(std::move(outcome)) {}

  const std::shared_ptr<RangeOutcome> outcome_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer chunk_;
};

// One unary call under a deadline `timeout` from now, made again while the daemon answers "busy,
// try again" (busy_retry.h); its status as the daemon's (FromDaemonCallStatus), naming `rpc`.
template <typename Impl, typename Call>
absl::Status UnaryRetryingWhileBusy(Impl& impl, const std::string& address, absl::string_view rpc,
                                    absl::Duration timeout, Call call) {
  return RetryWhileBusy(absl::Now() + timeout, [&](absl::Time deadline) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    return impl.CallStatus(call(&ctx), address, absl::StrCat(rpc, " from ", address));
  });
}

// A file's route as the daemon answered it; each server with the certificate name `pattern`
// (GetPlanResponse.server_certificate) gives its node.
FileRoute RouteFromProto(const v1::FileSource& f, const std::string& pattern) {
  FileRoute route{f.file(),
                  f.path(),
                  f.size_bytes(),
                  {},
                  {f.registered_size_bytes(), f.registered_mtime_ns(), 0, 0, 0, f.registered_version()}};
  for (const v1::Endpoint& e : f.servers()) {
    route.servers.push_back(
        {e.node(), e.address(), pattern.empty() ? std::string() : NodeCertificateNameFor(pattern, e.node())});
  }
  return route;
}

}  // namespace

DaemonClient::DaemonClient(const std::string& address, ChunkChecksums checksums)
    : DaemonClient(FileRoute::Server{"", address, ""}, checksums) {}

DaemonClient::DaemonClient(const FileRoute::Server& server, ChunkChecksums checksums)
    : address_(server.address), checksums_(checksums), impl_(std::make_unique<Impl>()) {
  const std::string& address = server.address;
  if (!server.certificate.empty()) {
    impl_->server_check = std::make_shared<ServerNameCheck>(server.node, server.certificate);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  // A fixed HTTP/2 window per stream instead of BDP probing, which grew receive buffers until
  // a streaming rank held 24-47 MB beyond its tensors (issue 5's rank_rss_growth_over_shard);
  // 4 MiB keeps a 10 GB/s link with 0.4 ms round trips full, per stream, and a rank runs
  // --read-threads streams.
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  // gRPC waits 1 s, growing to 120 s, before dialing a daemon that went away again, failing
  // calls meanwhile: a daemon restarted mid-load would be skipped for the rest of it. Readers
  // back off themselves (source_order.h).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // gRPC takes its minimum *connect timeout* from this argument, not a backoff: at 100 ms, a
  // daemon whose HTTP/2 SETTINGS came later than that (32 ranks starting at once on a loaded
  // host; a link with a 150 ms round trip; a TLS handshake) was "unreachable", and the first
  // call failed (issue 13 §4). A refused connection still fails at once and is retried after
  // the backoff above; only a handshake that is under way gets this long.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectTimeoutMs);
  // TLS and token from metactl's flags or METALOAD_TLS_* / METALOAD_TOKEN_FILE; a bad file
  // fails every call of this client with the reason (a constructor cannot).
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = DialDaemon(address, args, impl_->server_check);
  if (!channel.ok()) {
    impl_->setup_error = channel.status();
    channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  impl_->channel = *std::move(channel);
  impl_->stub = v1::Metad::NewStub(impl_->channel);
  impl_->generic = std::make_unique<grpc::GenericStub>(impl_->channel);
}

DaemonClient::~DaemonClient() = default;

absl::StatusOr<Assignment> DaemonClient::GetPlan(const std::string& model, int world_size,
                                                 const StrategyOptions& options, std::optional<int> rank,
                                                 absl::Duration timeout, bool fanout) {
  ML_RETURN_IF_ERROR(impl_->setup_error);
  v1::GetPlanRequest request;
  request.set_model(model);
  request.set_world_size(world_size);
  StrategyOptionsToProto(options, &request);
  if (rank.has_value()) request.set_rank(*rank);
  request.set_fanout(fanout && rank.has_value());
  v1::GetPlanResponse response;
  ML_RETURN_IF_ERROR(UnaryRetryingWhileBusy(
      *impl_, address_, "GetPlan", timeout,
      [&](grpc::ClientContext* ctx) { return impl_->stub->GetPlan(ctx, request, &response); }));

  Assignment out;
  ML_ASSIGN_OR_RETURN(out.plan, PlanFromProto(response.plan()));
  out.answered_by = response.answered_by();
  out.skeleton_json = response.skeleton_json();
  out.plan_digest = response.plan_digest();
  out.init_missing = response.init_missing();
  out.proof_required = response.proof_required();
  for (const v1::TiedGroup& group : response.tied_groups()) {
    out.tied_groups.emplace_back(group.names().begin(), group.names().end());
  }
  ML_RETURN_IF_ERROR(CheckServerCertificatePattern(response.server_certificate()));
  for (const v1::FileSource& f : response.files())
    out.files[f.file()] = RouteFromProto(f, response.server_certificate());
  if (!response.quantization_config_json().empty()) {
    const std::string where = absl::StrCat("GetPlan from ", address_, ": quantization_config_json");
    // A quantization_config is a few hundred bytes; the cap keeps a hostile answer from making the
    // rank parse megabytes of JSON.
    if (response.quantization_config_json().size() > kMaxQuantizationConfigBytes) {
      return absl::InvalidArgumentError(absl::StrCat(where, " is ",
                                                     response.quantization_config_json().size(),
                                                     " bytes, over ", kMaxQuantizationConfigBytes));
    }
    ML_ASSIGN_OR_RETURN(out.quantization, ParseQuantization(response.quantization_config_json(), where));
    if (!out.quantization.has_value() || !out.quantization->scheme.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " declares no quantization metaload reads"));
    }
  }
  if (request.fanout() && response.has_fanout()) {  // none when the rank's plan shares nothing
    // The part decides whom this rank waits for and sends to: checked against its own items.
    if (out.plan.ranks.size() != 1 || out.plan.ranks.front().rank != *rank) {
      return absl::InvalidArgumentError(absl::StrCat("GetPlan from ", address_, ": the answer for rank ",
                                                     *rank, " is not that rank's part"));
    }
    std::vector<uint64_t> item_bytes;
    for (const ReadItem& item : out.plan.ranks.front().items) item_bytes.push_back(item.size_bytes);
    absl::StatusOr<FanoutPart> part =
        FanoutPartFromProto(response.fanout(), *rank, out.plan.world_size, item_bytes);
    if (!part.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("GetPlan from ", address_, ": ", part.status().message()));
    out.fanout = *std::move(part);
  }
  return out;
}

absl::StatusOr<ModelLayout> DaemonClient::GetLayout(const std::string& model, absl::Duration timeout) {
  ML_RETURN_IF_ERROR(impl_->setup_error);
  v1::GetLayoutRequest request;
  request.set_model(model);
  v1::GetLayoutResponse response;
  ML_RETURN_IF_ERROR(UnaryRetryingWhileBusy(
      *impl_, address_, "GetLayout", timeout,
      [&](grpc::ClientContext* ctx) { return impl_->stub->GetLayout(ctx, request, &response); }));
  ModelLayout out;
  for (const v1::TensorLocation& t : response.tensors()) {
    ML_ASSIGN_OR_RETURN(TensorLayout layout, LayoutFromProto(t));
    layout.index = static_cast<int64_t>(out.tensors.size());  // the record's order, as every rank numbers it
    out.tensors.push_back(std::move(layout));
  }
  ML_RETURN_IF_ERROR(CheckServerCertificatePattern(response.server_certificate()));
  for (const v1::FileSource& f : response.files())
    out.files[f.file()] = RouteFromProto(f, response.server_certificate());
  out.skeleton_json = response.skeleton_json();
  out.init_missing = response.init_missing();
  out.answered_by = response.answered_by();
  out.hf_config_json = response.hf_config_json();
  out.proof_required = response.proof_required();
  return out;
}

absl::Status DaemonClient::ReadRange(const std::string& model, const std::string& path, uint64_t offset,
                                     absl::Span<uint8_t> dest, absl::Duration timeout) {
  return ReadRuns(model, path, StridedRuns{offset, dest.size(), dest.size(), dest.empty() ? 0u : 1u}, 0, dest,
                  timeout);
}

absl::Status DaemonClient::ReadRuns(const std::string& model, const std::string& path,
                                    const StridedRuns& runs, uint64_t first_run, absl::Span<uint8_t> dest,
                                    absl::Duration timeout, const std::atomic<bool>* cancelled,
                                    const FileStamp& registered, uint64_t* received_bytes,
                                    absl::Duration stall_timeout) {
  if (received_bytes != nullptr) *received_bytes = 0;
  ML_RETURN_IF_ERROR(impl_->setup_error);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::ReadRangeRequest request;
  request.set_model(model);
  request.set_path(path);
  request.set_offset(runs.first_offset + first_run * runs.stride_bytes);
  request.set_length(dest.size());
  if (runs.run_count > 1) {
    request.set_run_bytes(runs.run_bytes);
    request.set_stride_bytes(runs.stride_bytes);
  }
  request.set_expected_size_bytes(registered.size_bytes);
  request.set_expected_mtime_ns(registered.mtime_ns);
  if (received_bytes != nullptr) *received_bytes = 0;
  auto context = [&] {
    return absl::StrCat("streaming ", path, " [", request.offset(), ", +", dest.size(),
                        runs.run_count > 1
                            ? absl::StrCat(" in runs of ", runs.run_bytes, " every ", runs.stride_bytes)
                            : std::string(),
                        ") from ", address_);
  };
  const ChunkCheck check{path, address_, /*strided=*/runs.run_count > 1,
                         /*require_checksum=*/checksums_ == ChunkChecksums::kRequired};
  auto outcome = std::make_shared<RangeOutcome>();
  RawRangeReader* reader = RawRangeReader::Start(impl_->generic.get(), &ctx, request, outcome);
  uint64_t received = 0;
  absl::Status error;  // a bad chunk (then the call was cancelled)
  absl::Time last_progress = absl::Now();
  bool stalled = false;
  absl::MutexLock lock(&outcome->mu);
  bool cancel_sent = false;
  for (;;) {
    // Asked on every turn, not only when no chunk came for a poll: chunks may never stop coming.
    if (!cancel_sent && cancelled != nullptr && cancelled->load()) {
      cancel_sent = true;
      ctx.TryCancel();  // OnDone follows, with CANCELLED
    }
    if (!outcome->mu.AwaitWithTimeout(absl::Condition(outcome.get(), &RangeOutcome::Ready),
                                      absl::Milliseconds(50))) {
      if (!stalled && absl::Now() - last_progress > stall_timeout) {
        stalled = true;
        ctx.TryCancel();
      }
      continue;
    }
    if (outcome->chunks.empty()) break;  // done, and every chunk copied
    grpc::ByteBuffer chunk = std::move(outcome->chunks.front());
    outcome->chunks.pop_front();
    const bool resume = std::exchange(outcome->paused, false);
    // The copy (and its page faults) runs while gRPC reads on; a cancelled call's chunks are
    // dropped, but read to the end so that the call ends.
    outcome->mu.Unlock();
    if (resume) reader->Resume();
    absl::StatusOr<ChunkHeader> header;
    if (error.ok()) header = DecodeChunkInto(chunk, dest.subspan(received), check);
    chunk.Clear();
    outcome->mu.Lock();
    if (!error.ok()) continue;
    if (header.ok() && header->position != received) {
      header = absl::DataLossError(absl::StrCat("a ReadRange chunk of ", path, " from ", address_,
                                                " at position ", header->position, " of ", header->data_bytes,
                                                " bytes does not follow the ", received, " bytes received"));
    }
    if (!header.ok()) {
      error = header.status();
      ctx.TryCancel();
      continue;
    }
    received += header->data_bytes;
    last_progress = absl::Now();
  }
  if (received_bytes != nullptr) *received_bytes = received;
  if (stalled) {
    return absl::DeadlineExceededError(absl::StrCat(context(), ": no byte for ",
                                                    absl::FormatDuration(stall_timeout), " after ", received,
                                                    "; the daemon hangs or is unreachable"));
  }
  // A bad chunk's error names the file and this server already (proto/chunk_wire.h).
  if (!error.ok()) return error;
  ML_RETURN_IF_ERROR(impl_->CallStatus(outcome->status, address_, context()));
  if (received != dest.size()) {
    return absl::DataLossError(absl::StrCat(context(), ": stream ended after ", received, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace metaload
