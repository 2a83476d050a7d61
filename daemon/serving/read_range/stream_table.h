// The ReadRange streams a daemon serves: admission against the node config's max_streams and
// max_streams_per_client, and idle_stream_timeout. Uploads (daemon/service/upload_call.h) are
// counted and timed out in a table of their own, the same way. A stream is admitted before its RangeWriter
// exists and released in its OnDone, so the count covers every stream that can hold a chunk
// buffer; with at most two buffers per stream (range_writer.h) that bounds the daemon's
// streaming memory (docs/node-config.md, "Limits and memory").
//
// Idle: a stream that has waited on its peer for idle_timeout (a write on its reader, which
// stopped reading or never opened its HTTP/2 window; a read on its sender) is cancelled from a sweeper
// thread, which frees its buffers and its slot. Time spent reading the file does not count. So is a
// stream past the deadline its owner set (SetDeadline: an upload must be whole in a time its size
// sets, issue 35: 32 uploads trickling a piece just under the idle timeout held every slot). When
// the last stream is gone, the sweeper hands the memory freed back to the system (malloc_trim).
//
//   absl::StatusOr<StreamTable::Stream*> stream = table.Admit(ctx);   // in the handler
//   table.WaitStarted(*stream); StartWrite(...);  ...  table.WaitDone(*stream);  // per chunk
//   table.Release(*stream);                                            // in OnDone
//
// Thread-safety: every method may be called from any thread.
#ifndef METALOAD_DAEMON_SERVING_READ_RANGE_STREAM_TABLE_H_
#define METALOAD_DAEMON_SERVING_READ_RANGE_STREAM_TABLE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <list>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace metaload {

// The host of a gRPC peer string ("ipv4:10.0.0.7:41234" -> "10.0.0.7", "ipv6:[::1]:5" ->
// "[::1]"); every Unix-socket peer is "unix". Streams are counted per host: a client opening
// many connections still counts as one.
std::string PeerHost(absl::string_view peer);

class StreamTable {
 public:
  struct Options {
    std::string node;            // this daemon's name, for messages
    uint32_t max_streams = 256;  // node config keys of the same names
    uint32_t max_streams_per_client = 64;
    absl::Duration idle_timeout = absl::Seconds(60);
    // How refusals name the streams and the limits they met.
    std::string what = "ReadRange streams";
    std::string max_streams_key = "max_streams";
    std::string max_streams_per_client_key = "max_streams_per_client";
  };
  struct Stream;

  // Starts the sweeper thread.
  explicit StreamTable(Options options);
  // Stops it. REQUIRES: every admitted stream was released (the gRPC server has stopped).
  ~StreamTable();
  StreamTable(const StreamTable&) = delete;
  StreamTable& operator=(const StreamTable&) = delete;

  // Counts a new stream of `ctx`, which must stay valid until Release. ResourceExhausted,
  // naming the node config key to raise, when max_streams are in flight, or
  // max_streams_per_client from one client: `client` (the caller's identity, where it names
  // one holder), else the peer's host.
  absl::StatusOr<Stream*> Admit(grpc::CallbackServerContext* ctx, std::string client = "");
  // `stream` is cancelled once `deadline` passed, whether it waits on its peer or not.
  void SetDeadline(Stream* stream, absl::Time deadline);
  // `stream` waits on its peer (a write or a read was started) / no longer does (it completed):
  // the idle clock runs in between.
  void WaitStarted(Stream* stream);
  void WaitDone(Stream* stream);
  // Forgets `stream` (from the reactor's OnDone, before the context goes).
  void Release(Stream* stream);

  uint32_t in_flight() const;

  // Streams refused at Admit and cancelled by the sweeper since the table was made, by reason
  // (the node config key met, or why it was cancelled): metad's metrics (docs/operations.md).
  struct Refusals {
    uint64_t max_streams = 0;             // past max_streams (or the table's total)
    uint64_t max_streams_per_client = 0;  // past the per-client limit
    uint64_t idle = 0;                    // cancelled after idle_timeout waiting on its peer
    uint64_t deadline = 0;                // cancelled past its SetDeadline
  };
  Refusals refusals() const;

 private:
  void Sweep();
  // The streams idle for longer than the timeout or past their deadline, pinned; cancels
  // them, then unpins.
  void CancelIdle();
  void EraseLocked(Stream* stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::list<Stream> streams_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> per_host_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool released_since_trim_ ABSL_GUARDED_BY(mu_) = false;
  Refusals refusals_ ABSL_GUARDED_BY(mu_);
  std::thread sweeper_;  // last: started once everything above is built
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVING_READ_RANGE_STREAM_TABLE_H_
