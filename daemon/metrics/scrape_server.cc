#include "daemon/metrics/scrape_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "daemon/metrics/metrics_text.h"

namespace metaload {
namespace {

constexpr size_t kTimedOut = 6, kEvicted = 7, kRefused = 8;
// Out of descriptors, the listener is left alone this long (accept would fail again at once).
constexpr absl::Duration kPauseOutOfDescriptors = absl::Milliseconds(100);
// How long a client that has its answer may take to close its end.
constexpr absl::Duration kDrainTime = absl::Seconds(1);

absl::string_view StatusLine(int code) {
  switch (code) {
    case 200:
      return "200 OK";
    case 400:
      return "400 Bad Request";
    case 401:
      return "401 Unauthorized";
    case 404:
      return "404 Not Found";
    case 405:
      return "405 Method Not Allowed";
    default:
      return "431 Request Header Fields Too Large";
  }
}

}  // namespace

struct ScrapeServer::Connection {
  int fd = -1;
  absl::Time deadline;
  std::string in;
  std::string out;  // the answer, once the request is whole
  size_t sent = 0;
  bool answering = false;
  // The answer is written and the write side shut: what the client still sends is read and
  // dropped until it closes (or the deadline), so that closing never resets the connection
  // before the client has read its answer (a 431 leaves unread bytes behind).
  bool draining = false;
  ~Connection() {
    if (fd >= 0) ::close(fd);
  }
};

absl::StatusOr<std::unique_ptr<ScrapeServer>> ScrapeServer::Start(ScrapeServerOptions options) {
  absl::StatusOr<ListenSockets> sockets = ListenSockets::Open(options.address);
  if (!sockets.ok()) return sockets.status();
  const int wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    return absl::UnavailableError(absl::StrCat("metrics listener: eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<ScrapeServer>(new ScrapeServer(std::move(options), *std::move(sockets), wake_fd));
}

ScrapeServer::ScrapeServer(ScrapeServerOptions options, ListenSockets sockets, int wake_fd)
    : options_(std::move(options)),
      sockets_(std::move(sockets)),
      wake_fd_(wake_fd),
      thread_([this] { Run(); }) {}

ScrapeServer::~ScrapeServer() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  thread_.join();
  ::close(wake_fd_);
}

ScrapeServer::Counts ScrapeServer::counts() const {
  const auto n = [this](size_t i) { return counts_[i].load(std::memory_order_relaxed); };
  return Counts{n(0), n(1), n(2), n(3), n(4), n(5), n(kTimedOut), n(kEvicted), n(kRefused)};
}

void ScrapeServer::Count(Outcome outcome) {
  counts_[static_cast<size_t>(outcome)].fetch_add(1, std::memory_order_relaxed);
}

void ScrapeServer::Run() {
  std::vector<std::unique_ptr<Connection>> connections;
  std::vector<pollfd> fds;
  absl::Time listeners_paused_until = absl::InfinitePast();
  while (true) {
    const absl::Time now = absl::Now();
    // Past their deadline: closed, whether still sending or not reading their answer.
    std::erase_if(connections, [&](const std::unique_ptr<Connection>& c) {
      if (c->deadline > now) return false;
      if (!c->answering) counts_[kTimedOut].fetch_add(1, std::memory_order_relaxed);
      return true;
    });
    absl::Time wake_at = listeners_paused_until > now ? listeners_paused_until : absl::InfiniteFuture();
    for (const auto& c : connections) wake_at = std::min(wake_at, c->deadline);
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    const bool listening = listeners_paused_until <= now;
    for (int listener : sockets_.fds())
      fds.push_back({listener, static_cast<short>(listening ? POLLIN : 0), 0});
    const size_t first_connection = fds.size();
    for (const auto& c : connections) {
      fds.push_back({c->fd, static_cast<short>(c->answering && !c->draining ? POLLOUT : POLLIN), 0});
    }
    const int timeout_ms =
        wake_at == absl::InfiniteFuture()
            ? -1
            : static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(wake_at - now) + 1, 0, 60'000));
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;  // stopping
    // Connections first (their indices are those of `fds`), then new ones.
    std::vector<bool> close(connections.size(), false);
    for (size_t i = 0; i < connections.size(); ++i) {
      const short revents = fds[first_connection + i].revents;
      if (revents == 0) continue;
      Connection& c = *connections[i];
      close[i] = c.draining ? !Drain(c) : c.answering ? !WriteAnswer(c) : !ReadRequest(c);
    }
    size_t i = 0;
    std::erase_if(connections, [&](const std::unique_ptr<Connection>&) { return close[i++]; });
    for (size_t l = 1; l < first_connection; ++l) {
      if (fds[l].revents == 0) continue;
      if (!AcceptAll(fds[l].fd, connections)) listeners_paused_until = absl::Now() + kPauseOutOfDescriptors;
    }
  }
}

bool ScrapeServer::AcceptAll(int listener, std::vector<std::unique_ptr<Connection>>& connections) {
  while (true) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return errno != EMFILE && errno != ENFILE;  // EAGAIN: none left
    }
    auto connection = std::make_unique<Connection>();
    connection->fd = fd;
    connection->deadline = absl::Now() + options_.request_timeout;
    if (connections.size() >= options_.max_connections) {
      // The oldest still sending its request makes room; none: this one is not served.
      auto oldest =
          std::find_if(connections.begin(), connections.end(),
                       [](const std::unique_ptr<Connection>& c) { return !c->answering || c->draining; });
      if (oldest == connections.end()) {
        counts_[kRefused].fetch_add(1, std::memory_order_relaxed);
        continue;  // `connection` closes it
      }
      counts_[kEvicted].fetch_add(1, std::memory_order_relaxed);
      connections.erase(oldest);
    }
    connections.push_back(std::move(connection));
  }
}

bool ScrapeServer::ReadRequest(Connection& c) {
  char buffer[4096];
  while (true) {
    const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), 0);
    if (n == 0) return false;  // closed before its request was whole
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.in.append(buffer, static_cast<size_t>(n));
    const size_t end = c.in.find("\r\n\r\n");
    if (end != std::string::npos && end + 4 <= options_.max_request_bytes) {
      std::string body;
      const Outcome outcome = Handle(absl::string_view(c.in).substr(0, end), &body);
      Answer(c, outcome, body);
      return WriteAnswer(c);
    }
    if (c.in.size() >= options_.max_request_bytes) {
      Answer(c, Outcome::kTooLarge, "");
      return WriteAnswer(c);
    }
  }
}

ScrapeServer::Outcome ScrapeServer::Handle(absl::string_view head, std::string* body) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  std::vector<absl::string_view> request = absl::StrSplit(lines[0], ' ');
  if (request.size() != 3 || !absl::StartsWith(request[2], "HTTP/1.") || request[2].size() != 8 ||
      request[1].empty() || request[0].empty()) {
    return Outcome::kBadRequest;
  }
  if (request[0] != "GET") return Outcome::kMethodNotAllowed;
  const absl::string_view path = request[1].substr(0, request[1].find('?'));
  if (path != "/metrics") return Outcome::kNotFound;
  if (options_.authorize) {
    std::optional<absl::string_view> authorization;
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == absl::string_view::npos) return Outcome::kBadRequest;
      if (absl::EqualsIgnoreCase(lines[i].substr(0, colon), "authorization")) {
        if (authorization.has_value()) return Outcome::kBadRequest;  // which one would count?
        authorization = absl::StripAsciiWhitespace(lines[i].substr(colon + 1));
      }
    }
    if (!options_.authorize(authorization).ok()) return Outcome::kUnauthorized;
  }
  *body = options_.render();
  // This listener's own counts, this scrape not yet among them.
  MetricsText text;
  const Counts counts = this->counts();
  text.CounterByLabel("metaload_metrics_requests_total",
                      "Requests to the metrics listener by outcome (docs/operations.md)", "outcome",
                      {{"ok", counts.ok},
                       {"bad_request", counts.bad_request},
                       {"unauthorized", counts.unauthorized},
                       {"not_found", counts.not_found},
                       {"method_not_allowed", counts.method_not_allowed},
                       {"too_large", counts.too_large},
                       {"timed_out", counts.timed_out},
                       {"evicted", counts.evicted},
                       {"refused", counts.refused}});
  body->append(text.Take());
  return Outcome::kOk;
}

void ScrapeServer::Answer(Connection& c, Outcome outcome, absl::string_view body) {
  Count(outcome);
  static constexpr int kCodes[] = {200, 400, 401, 404, 405, 431};
  const int code = kCodes[static_cast<size_t>(outcome)];
  const std::string text = outcome == Outcome::kOk ? std::string(body) : absl::StrCat(StatusLine(code), "\n");
  c.out = absl::StrCat("HTTP/1.1 ", StatusLine(code), "\r\nContent-Type: ",
                       outcome == Outcome::kOk ? kMetricsContentType : "text/plain; charset=utf-8",
                       "\r\nContent-Length: ", text.size(), "\r\n",
                       outcome == Outcome::kMethodNotAllowed ? "Allow: GET\r\n" : "",
                       outcome == Outcome::kUnauthorized ? "WWW-Authenticate: Bearer\r\n" : "",
                       "Connection: close\r\n\r\n", text);
  c.answering = true;
  c.in.clear();
  c.in.shrink_to_fit();
  c.deadline = absl::Now() + options_.request_timeout;
}

bool ScrapeServer::WriteAnswer(Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.sent += static_cast<size_t>(n);
  }
  ::shutdown(c.fd, SHUT_WR);  // Connection: close
  c.draining = true;
  c.deadline = std::min(c.deadline, absl::Now() + kDrainTime);
  return Drain(c);
}

bool ScrapeServer::Drain(Connection& c) {
  char buffer[4096];
  while (true) {
    const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), 0);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
}

}  // namespace metaload
