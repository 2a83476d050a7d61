#include "daemon/serving/read_range/stream_table.h"

#include <malloc.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/log.h"

namespace metaload {

struct StreamTable::Stream {
  std::string host;  // the client it counts against: an identity, or the peer's host
  grpc::CallbackServerContext* ctx = nullptr;
  absl::Time waiting_since = absl::InfiniteFuture();  // it has waited on its peer since
  absl::Time deadline = absl::InfiniteFuture();
  bool cancelled = false;
  // While the sweeper calls TryCancel without the lock, Release (from another thread) waits:
  // the context must outlive the call.
  bool pinned = false;
  bool released = false;  // released inline, from inside the sweeper's TryCancel
  std::list<Stream>::iterator self;
};

std::string PeerHost(absl::string_view peer) {
  const size_t scheme_end = peer.find(':');
  if (scheme_end == absl::string_view::npos) return std::string(peer);
  if (absl::StartsWith(peer, "unix")) return "unix";
  absl::string_view address = peer.substr(scheme_end + 1);
  const size_t port = address.rfind(':');
  absl::string_view host = port == absl::string_view::npos ? address : address.substr(0, port);
  // Newer gRPC writes an IPv6 peer URI-escaped: "ipv6:%5B::1%5D:5".
  if (absl::StartsWith(host, "%5B") && absl::EndsWith(host, "%5D")) {
    return absl::StrCat("[", host.substr(3, host.size() - 6), "]");
  }
  return std::string(host);
}

StreamTable::StreamTable(Options options) : options_(std::move(options)), sweeper_([this] { Sweep(); }) {}

StreamTable::~StreamTable() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  sweeper_.join();
}

absl::StatusOr<StreamTable::Stream*> StreamTable::Admit(grpc::CallbackServerContext* ctx,
                                                        std::string client) {
  std::string host = client.empty() ? PeerHost(ctx->peer()) : std::move(client);
  absl::MutexLock lock(&mu_);
  if (streams_.size() >= options_.max_streams) {
    ++refusals_.max_streams;
    return absl::ResourceExhaustedError(absl::StrCat(options_.node, ": ", streams_.size(), " ", options_.what,
                                                     " already in flight (", options_.max_streams_key,
                                                     "); try again, or another server"));
  }
  uint32_t& from_host = per_host_[host];
  if (from_host >= options_.max_streams_per_client) {
    ++refusals_.max_streams_per_client;
    return absl::ResourceExhaustedError(absl::StrCat(options_.node, ": ", from_host, " ", options_.what,
                                                     " from ", host, " already in flight (",
                                                     options_.max_streams_per_client_key, ")"));
  }
  ++from_host;
  Stream& stream = streams_.emplace_back();
  stream.host = std::move(host);
  stream.ctx = ctx;
  stream.self = std::prev(streams_.end());
  return &stream;
}

StreamTable::Refusals StreamTable::refusals() const {
  absl::MutexLock lock(&mu_);
  return refusals_;
}

void StreamTable::SetDeadline(Stream* stream, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  stream->deadline = deadline;
}

void StreamTable::WaitStarted(Stream* stream) {
  absl::MutexLock lock(&mu_);
  stream->waiting_since = absl::Now();
}

void StreamTable::WaitDone(Stream* stream) {
  absl::MutexLock lock(&mu_);
  stream->waiting_since = absl::InfiniteFuture();
}

void StreamTable::Release(Stream* stream) {
  absl::MutexLock lock(&mu_);
  // The sweeper's own thread may get here from inside its TryCancel (gRPC can run the
  // reactions inline): the context is still valid then, and waiting would never end; the
  // sweeper erases the stream once TryCancel returns.
  if (stream->pinned && std::this_thread::get_id() == sweeper_.get_id()) {
    stream->released = true;
    return;
  }
  mu_.Await(absl::Condition(
      +[](Stream* s) { return !s->pinned; }, stream));
  EraseLocked(stream);
}

void StreamTable::EraseLocked(Stream* stream) {
  auto host = per_host_.find(stream->host);
  if (--host->second == 0) per_host_.erase(host);
  streams_.erase(stream->self);
  released_since_trim_ = true;
}

uint32_t StreamTable::in_flight() const {
  absl::MutexLock lock(&mu_);
  return static_cast<uint32_t>(streams_.size());
}

void StreamTable::Sweep() {
  // A quarter of the timeout between looks: a stream goes within 1.25 timeouts.
  const absl::Duration period =
      std::clamp(options_.idle_timeout / 4, absl::Milliseconds(50), absl::Seconds(1));
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) {
    // Once the last stream is gone, the chunk buffers it freed go back to the system: glibc
    // keeps freed 1 MiB blocks in its arenas (past its first frees they no longer come from
    // mmap), and the daemon would stay at its peak.
    const bool trim = streams_.empty() && released_since_trim_;
    released_since_trim_ = released_since_trim_ && !trim;
    mu_.Unlock();
    if (trim) ::malloc_trim(0);
    CancelIdle();
    mu_.Lock();
  }
}

void StreamTable::CancelIdle() {
  std::vector<std::pair<Stream*, bool>> idle;  // and whether it is past its deadline
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (Stream& stream : streams_) {
      const bool late = now > stream.deadline;
      if (stream.cancelled || (!late && now - stream.waiting_since < options_.idle_timeout)) continue;
      stream.cancelled = stream.pinned = true;
      ++(late ? refusals_.deadline : refusals_.idle);
      idle.emplace_back(&stream, late);
    }
  }
  for (const auto& [stream, late] : idle) {
    LogWarning(absl::StrCat(
        "cancelling one of the ", options_.what, " of ", stream->host, ": ",
        late ? "it is past its deadline"
             : absl::StrCat("its peer left it waiting ", absl::FormatDuration(options_.idle_timeout),
                            " (idle_stream_timeout)")));
    stream->ctx->TryCancel();
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [stream, late] : idle) {
    stream->pinned = false;
    if (stream->released) EraseLocked(stream);
  }
}

}  // namespace metaload
