// metad's metrics listener (`metrics_listen:` in the node config): a small HTTP/1.1 server on a
// thread of its own, apart from the gRPC port, that answers `GET /metrics` with what `render`
// writes (metrics_text.h) and nothing else. One poll() loop, no gRPC thread involved.
//
// Every byte a client sends is hostile input (docs/malformed-inputs.md):
// - a request's line and headers must arrive whole within `request_timeout` of the connection
//   (5 s; a client that trickles them, slowloris, is closed then) and in at most
//   `max_request_bytes` (8 KiB; more is answered 431 and closed); a body is never read;
// - at most `max_connections` (16) are open at once; a new one past that closes the oldest of
//   those still sending their request (a flood of idle connections cannot lock the scraper
//   out), or is closed itself when all are being answered;
// - anything but `GET /metrics` (a query string is ignored) is answered 405 (another method),
//   404 (another path) or 400 (not an HTTP/1.x request line); `authorize`, when set, is asked
//   about the Authorization header (401 when it refuses);
// - every answer says `Connection: close`, and the connection is closed once it is written (or
//   `request_timeout` after it started, for a client that does not read it).
//
//   ScrapeServerOptions options;
//   options.address = "127.0.0.1:9464";
//   options.render = [&] { return WriteDaemonMetrics(...); };
//   absl::StatusOr<std::unique_ptr<ScrapeServer>> server = ScrapeServer::Start(std::move(options));
//
// Thread-safety: counts() from any thread; the destructor stops the thread.
#ifndef METALOAD_DAEMON_METRICS_SCRAPE_SERVER_H_
#define METALOAD_DAEMON_METRICS_SCRAPE_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/net/listen_socket.h"

namespace metaload {

struct ScrapeServerOptions {
  std::string address;  // host:port (port 0: the kernel picks one)
  // The body of `GET /metrics`; called on the server's thread, once per scrape.
  std::function<std::string()> render;
  // OK when the Authorization header's value (nullopt: none) may scrape; empty: anyone may.
  std::function<absl::Status(std::optional<absl::string_view>)> authorize;
  size_t max_request_bytes = 8 << 10;
  absl::Duration request_timeout = absl::Seconds(5);
  size_t max_connections = 16;
};

class ScrapeServer {
 public:
  // How requests ended, for metaload_metrics_requests_total.
  struct Counts {
    uint64_t ok = 0;                  // 200
    uint64_t bad_request = 0;         // 400
    uint64_t unauthorized = 0;        // 401
    uint64_t not_found = 0;           // 404
    uint64_t method_not_allowed = 0;  // 405
    uint64_t too_large = 0;           // 431
    uint64_t timed_out = 0;           // closed at request_timeout
    uint64_t evicted = 0;             // closed for a newer connection past max_connections
    uint64_t refused = 0;             // closed at once: max_connections were being answered
  };

  // Binds `options.address` (daemon/net/listen_socket.h) and starts the thread. UNAVAILABLE
  // when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<ScrapeServer>> Start(ScrapeServerOptions options);
  ~ScrapeServer();
  ScrapeServer(const ScrapeServer&) = delete;
  ScrapeServer& operator=(const ScrapeServer&) = delete;

  int port() const { return sockets_.port(); }
  Counts counts() const;

 private:
  struct Connection;
  enum class Outcome { kOk, kBadRequest, kUnauthorized, kNotFound, kMethodNotAllowed, kTooLarge };

  ScrapeServer(ScrapeServerOptions options, ListenSockets sockets, int wake_fd);
  void Run();
  // Accepts every pending connection; false when out of descriptors.
  bool AcceptAll(int listener, std::vector<std::unique_ptr<Connection>>& connections);
  // Reads what `c` sent; starts its answer once its headers are whole (or too large).
  // False when it is to be closed now.
  bool ReadRequest(Connection& c);
  // Writes what is left of `c`'s answer; false when it is done (or failed): close it.
  bool WriteAnswer(Connection& c);
  // Reads and drops what `c` sends after its answer; false once it closed (or failed).
  bool Drain(Connection& c);
  void Answer(Connection& c, Outcome outcome, absl::string_view body);
  Outcome Handle(absl::string_view head, std::string* body);
  void Count(Outcome outcome);

  const ScrapeServerOptions options_;
  ListenSockets sockets_;
  const int wake_fd_;  // an eventfd: the destructor makes it readable
  std::atomic<uint64_t> counts_[9] = {};
  std::thread thread_;  // last: started once everything above is built
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_METRICS_SCRAPE_SERVER_H_
