#include "daemon/metad_main.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/config/node_config.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/metrics/rpc_metrics.h"
#include "daemon/metrics/scrape_server.h"
#include "daemon/net/accept_loop.h"
#include "daemon/net/connection_cap.h"
#include "daemon/net/fd_limit.h"
#include "daemon/net/freed_memory.h"
#include "daemon/net/listen_socket.h"
#include "daemon/net/preauth_connections.h"
#include "daemon/requests/refusal_log.h"
#include "daemon/requests/request_limits.h"
#include "daemon/service/metad_service.h"
#include "daemon/service/node.h"
#include "security/auth_processor.h"
#include "security/server_security.h"
#include "security/token.h"
#include "util/cli_args.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

// What gRPC's transports may hold at once (docs/security.md): no message is larger than
// kMaxMessageBytes (128 KiB; RegisterModel and PublishModel come in pieces), so this is what
// thousands of calls at once need (gRPC reserves ~15 KiB per call), not a multiple of the largest
// registration.
constexpr int64_t kTransportBufferBytes = int64_t{32} << 20;

// metad's gRPC server, and the accept loop of its own that hands it its connections.
struct Serving {
  // Declared first: the interceptor gRPC holds and the accept loop use it till they are gone.
  std::unique_ptr<PreauthConnections> preauth;
  std::unique_ptr<grpc::Server> grpc;
  std::unique_ptr<AcceptLoop> accept_loop;  // declared last: stopped before the server goes
};

// Tells `preauth` of every call that reached the service, as it starts and as it ends: gRPC
// runs interceptors only for calls that passed the header check (security/auth_processor.h; a
// daemon that requires no token has none) on a connection whose TLS handshake completed, so each
// one's connection has authenticated — but for health checks, which need no token and leave
// their connection under the pre-authentication limits; and a call its client reset
// (RST_STREAM) ends cancelled. Records each call's duration and status code in `rpcs`.
class CallEnds final : public grpc::experimental::Interceptor {
 public:
  CallEnds(PreauthConnections* preauth, RpcMetrics* rpcs, grpc::experimental::ServerRpcInfo* info,
           std::string peer)
      : preauth_(preauth),
        rpcs_(rpcs),
        info_(info),
        peer_(std::move(peer)),
        method_(RpcMetrics::MethodOf(info->method())) {}
  ~CallEnds() override {
    if (!recorded_) rpcs_->Record(method_, grpc::StatusCode::CANCELLED, absl::Now() - started_);
  }
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      rpcs_->Record(method_, methods->GetSendStatus().error_code(), absl::Now() - started_);
      recorded_ = true;
    }
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::POST_RECV_CLOSE)) {
      preauth_->CallEnded(peer_, info_->server_context()->IsCancelled());
    }
    methods->Proceed();
  }

 private:
  PreauthConnections* const preauth_;
  RpcMetrics* const rpcs_;
  grpc::experimental::ServerRpcInfo* const info_;
  const std::string peer_;
  const RpcMethod method_;
  const absl::Time started_ = absl::Now();
  bool recorded_ = false;
};

class AuthenticatedCalls final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  AuthenticatedCalls(PreauthConnections* preauth, RpcMetrics* rpcs) : preauth_(preauth), rpcs_(rpcs) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    std::string peer = info->server_context()->peer();
    if (!IsHealthCheckPath(info->method())) preauth_->Authenticated(peer);
    return new CallEnds(preauth_, rpcs_, info, std::move(peer));
  }

 private:
  PreauthConnections* const preauth_;
  RpcMetrics* const rpcs_;
};

// The service's credentials; with a token, checked on each call's headers before its message is
// accepted (security/auth_processor.h), so that a caller without one costs no more than its headers.
std::shared_ptr<grpc::ServerCredentials> ListeningCredentials(const MetadService& service) {
  const ServerSecurity& security = service.security();
  if (!security.tokens_required()) return security.credentials;
  return WithHeaderAuthentication(security.credentials, security.tls, service.config().node,
                                  [&security](std::optional<absl::string_view> authorization) {
                                    absl::Status checked = CheckBearer(security, authorization);
                                    // The caller is not known here: gRPC hands the processor
                                    // the headers only (the reason never names the token).
                                    if (!checked.ok()) LogRefusal("a call", "", checked);
                                    return checked;
                                  });
}

// The server on `address`; null when it cannot listen there. metad binds the port itself
// (daemon/net/listen_socket.h: not shared, SO_REUSEPORT off, so a second metad on a port in use
// fails instead of answering half the calls) and accepts on a thread of its own
// (daemon/net/accept_loop.h), which counts every connection against max_connections(_per_client)
// through `connections` and hands the admitted ones to gRPC's external connection acceptor
// with the service's credentials (gRPC runs the TLS handshake).
std::unique_ptr<Serving> StartServer(const std::string& address, MetadService* service,
                                     ConnectionCap* connections, RpcMetrics* rpcs) {
  absl::StatusOr<ListenSockets> sockets = ListenSockets::Open(address);
  if (!sockets.ok()) return nullptr;
  const NodeConfig& config = service->config();
  auto server = std::make_unique<Serving>();
  absl::StatusOr<std::unique_ptr<PreauthConnections>> preauth = PreauthConnections::Start(
      PreauthLimits{config.max_preauth_connections, config.max_preauth_connections_per_client,
                    config.preauth_timeout, config.max_preauth_bytes},
      connections);
  if (!preauth.ok()) {
    LogError(std::string(preauth.status().message()));
    return nullptr;
  }
  server->preauth = *std::move(preauth);
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor =
      builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
          ListeningCredentials(*service));
  // A connection that never finishes its TLS and HTTP/2 handshakes is closed by gRPC too, at the
  // same preauth_timeout after which daemon/net/preauth_connections.h closes it anyway.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(config.preauth_timeout)));
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<AuthenticatedCalls>(server->preauth.get(), rpcs));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  // Idle connections are closed after 10 minutes (clients reconnect transparently).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 600'000);
  // Every message: kilobytes. A registration's skeleton or a record comes as an upload of pieces
  // (daemon/service/upload_call.h), whole at most max_request_size.
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxMessageBytes));
  // gRPC 1.51 buffers a call's whole declared message before it checks that limit (a 1 MiB
  // limit still let 40 half-sent 60 MiB messages hold 2.4 GiB): what its transports may hold at
  // once is capped too; past it gRPC cancels streams ("Buffers full") rather than read more.
  // Unauthenticated calls never get there (security/auth_processor.h).
  grpc::ResourceQuota transport_buffers("metad transport buffers");
  transport_buffers.Resize(kTransportBufferBytes);
  builder.SetResourceQuota(transport_buffers);
  builder.RegisterService(service);
  // grpc.health.v1.Health (docs/operations.md): NOT_SERVING until the node has started, then
  // what Node::Serving says, once a second (ServeUntilStopped).
  grpc::EnableDefaultHealthCheckService(true);
  server->grpc = builder.BuildAndStart();
  if (server->grpc == nullptr) return nullptr;
  server->grpc->GetHealthCheckService()->SetServingStatus(false);
  // Started after the server, stopped before it: gRPC drops, without closing it, a connection
  // handed to it before it starts or once it is shut down.
  absl::StatusOr<std::unique_ptr<AcceptLoop>> loop = AcceptLoop::Start(
      *std::move(sockets), connections, server->preauth.get(), [acceptor](int listener_fd, int fd) {
        grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters connection;
        connection.listener_fd = listener_fd;
        connection.fd = fd;
        acceptor->HandleNewConnection(&connection);  // gRPC owns `fd` from here
      });
  if (!loop.ok()) {
    LogError(std::string(loop.status().message()));
    return nullptr;
  }
  server->accept_loop = *std::move(loop);
  return server;
}

// The node config named by the flags; the exit code when there is nothing to serve (--help,
// a bad flag or config).
std::variant<NodeConfig, int> ReadConfig(int argc, char** argv) {
  CliArgs args("metad", "--node-config node.yaml",
               "The metaload node daemon: one per host. Keeps registered models as LibTorch meta\n"
               "tensors, plans device maps (on the coordinator), and streams checkpoint bytes\n"
               "under its roots to ranks that cannot read them directly.");
  args.Flag("node-config", "FILE", "node configuration (YAML; keys in docs/node-config.md)");
  args.Epilog(
      "example node.yaml:\n"
      "  node: node-a\n  listen: 127.0.0.1:7070\n  coordinator: 127.0.0.1:7070\n"
      "  gpus: 8\n  gpu_memory: 80GiB\n  roots: [/models]\n\n"
      "Prints \"metad: <node> listening on <host:port>\" on stdout once it serves.\n"
      "Stops cleanly on SIGTERM or SIGINT. Exit codes: 0 stopped, 1 failure, 2 bad config.");
  absl::Status parsed = args.Parse(argc, argv, 1);
  if (!parsed.ok()) {
    std::cerr << parsed.message() << "\n";
    return 2;
  }
  if (args.help()) {
    std::cout << args.Help();
    return 0;
  }
  if (!args.Has("node-config")) {
    std::cerr << "metad: --node-config is required (see metad --help)\n";
    return 2;
  }
  absl::StatusOr<NodeConfig> config = LoadNodeConfig(*args.Get("node-config"));
  if (!config.ok()) {
    std::cerr << "metad: " << config.status().message() << "\n";
    return 2;
  }
  return *std::move(config);
}

// The metrics listener of `config.metrics_listen` (daemon/metrics/scrape_server.h); null when
// off, or when the default address cannot be bound (warned: several daemons on one host). An
// address the config names that cannot be bound is an error. Off loopback (allow_insecure, the
// node config checked), a scrape needs a token when the daemon has tokens.
absl::StatusOr<std::unique_ptr<ScrapeServer>> StartMetrics(const NodeConfig& config,
                                                           const ServerSecurity& security,
                                                           DaemonMetricsSources sources) {
  if (config.metrics_listen.empty()) return nullptr;
  ScrapeServerOptions options;
  options.address = config.metrics_listen;
  options.render = [sources] { return WriteDaemonMetrics(sources); };
  const bool loopback = IsLoopbackAddress(config.metrics_listen);
  if (!loopback && security.tokens_required()) {
    options.authorize = [&security](std::optional<absl::string_view> authorization) {
      return CheckBearer(security, authorization);
    };
  }
  absl::StatusOr<std::unique_ptr<ScrapeServer>> server = ScrapeServer::Start(std::move(options));
  if (!server.ok()) {
    if (config.metrics_listen_set) {
      return absl::UnavailableError(absl::StrCat("cannot listen for metrics on ", config.metrics_listen, ": ",
                                                 server.status().message()));
    }
    LogWarning(absl::StrCat("no metrics: the default metrics_listen ", config.metrics_listen,
                            " cannot be bound (", server.status().message(),
                            "); set metrics_listen: HOST:PORT (or off) in the node config"));
    return nullptr;
  }
  const std::string host = config.metrics_listen.substr(0, config.metrics_listen.rfind(':'));
  LogInfo(absl::StrCat("metrics on http://", host, ":", (*server)->port(), "/metrics",
                       loopback                     ? ""
                       : security.tokens_required() ? " (a scrape needs the daemon's token)"
                                                    : ""));
  if (!loopback && !security.tokens_required()) {
    LogWarning(absl::StrCat("INSECURE: metrics_listen ", config.metrics_listen,
                            " is not a loopback address and the daemon has no token: anyone who can reach it "
                            "can read its metrics"));
  }
  return server;
}

// Starts the node's role once the server listens (with `listen: host:0` the kernel picked the
// port; a wildcard host becomes our name), so that its first answer already knows every model;
// prints the line scripts wait for.
absl::StatusOr<Node::Role> Announce(const NodeConfig& config, int port, const FdLimit& fds, Node& node) {
  char hostname[256] = "localhost";
  ::gethostname(hostname, sizeof(hostname) - 1);
  ML_ASSIGN_OR_RETURN(Node::Role role, node.Start(port, hostname));
  std::cout << "metad: " << config.node << " listening on " << node.address() << std::endl;
  LogInfo(absl::StrCat("node ", config.node, " serving ", config.roots.size(), " roots; ",
                       role == Node::Role::kPeer          ? absl::StrCat("peer of registry etcd://",
                                                                         absl::StrJoin(config.registry_endpoints, ","))
                       : role == Node::Role::kCoordinator ? std::string("coordinator")
                                                          : absl::StrCat("joining ", config.coordinator),
                       "; file descriptors: ", fds.soft, " (hard limit ", fds.hard, ")"));
  if (fds.soft < 4096) {
    LogWarning(absl::StrCat("only ", fds.soft,
                            " file descriptors: every connection and open file takes one; ",
                            "raise the hard limit (systemd LimitNOFILE, ulimit -Hn)"));
  }
  // Each connection takes two (gRPC's and the duplicate preauth_connections.h closes it by);
  // the margin is for the files being streamed and the daemon's own.
  const uint64_t connection_fds = 2 * (static_cast<uint64_t>(config.max_connections) +
                                       static_cast<uint64_t>(config.max_preauth_connections));
  if (fds.soft < connection_fds + 256) {
    LogWarning(absl::StrCat("max_connections is ", config.max_connections, " and max_preauth_connections ",
                            config.max_preauth_connections, " but only ", fds.soft,
                            " file descriptors are allowed: connections past that fail as the descriptors ",
                            "run out, not as refused (lower them or raise the limit)"));
  }
  return role;
}

// Serves until a stop signal; once a second, gives back the memory freed meanwhile (closed
// connections' buffers: daemon/net/freed_memory.h), samples memory, drops the connections gRPC
// has closed from the count (off gRPC's threads and the accept loop's) and logs the loads that
// ended and the members gone down. Returns the signal.
// Also says, through gRPC's health service, whether the node can serve (Node::Serving), logging
// each change.
int ServeUntilStopped(const sigset_t& stop_signals, Node& node, ConnectionCap& connections,
                      grpc::HealthCheckServiceInterface& health, std::atomic<bool>& serving) {
  const struct timespec one_second = {1, 0};
  int signal_number = 0;
  do {
    ReleaseFreedMemory();
    node.service().SampleResidentMemory();
    connections.Prune();
    node.service().LogQuietChanges();
    std::string why_not;
    const bool now_serving = node.Serving(&why_not);
    if (now_serving != serving.load()) {
      health.SetServingStatus(now_serving);
      serving.store(now_serving);
      LogInfo(now_serving ? "health: SERVING" : absl::StrCat("health: NOT_SERVING (", why_not, ")"));
    }
  } while ((signal_number = sigtimedwait(&stop_signals, nullptr, &one_second)) < 0);
  return signal_number;
}

// Leaves the cluster, refuses new calls, and gives the streams in flight `grace` to finish
// before they are cancelled (a rank whose stream is cancelled resumes from another server).
// What may still run past shutdown_grace — a registration hashing a checkpoint on a slow disk,
// jobs queued behind it — is not waited for: a read in progress cannot be interrupted, and
// SIGTERM must stop metad whatever runs (issue 23: 4 slow registrations kept it up past 30 s).
// The destructors after the server stopped get this long, then the process ends.
constexpr absl::Duration kStopSlack = absl::Seconds(1);

void ExitWhenOverdue(absl::Time deadline) {
  std::thread([deadline] {
    absl::SleepFor(deadline - absl::Now());
    LogWarning(
        absl::StrCat("still busy ", absl::FormatDuration(kStopSlack),
                     " after shutdown_grace (a registration or read blocked on its disk?): exiting now"));
    std::_Exit(0);
  }).detach();
}

void StopGracefully(int signal_number, absl::Duration grace, Node& node, AcceptLoop& accept_loop,
                    std::unique_ptr<grpc::Server>& server) {
  const absl::Time start = absl::Now();
  ExitWhenOverdue(start + grace + kStopSlack);
  MetadService& service = node.service();
  service.MarkStopping();
  LogInfo(absl::StrCat("stopping on signal ", signal_number, ": ", service.streams_in_flight(),
                       " streams in flight get up to ", absl::FormatDuration(grace),
                       " (shutdown_grace) to finish; new calls are refused"));
  node.Leave();
  if (server != nullptr) {
    accept_loop.Stop();  // first: see StartServer
    server->Shutdown(absl::ToChronoTime(start + grace));
    server->Wait();
  }
  service.EndLoads();
  LogInfo(absl::StrFormat("stopped after %.2f s", absl::ToDoubleSeconds(absl::Now() - start)));
}

}  // namespace

int MetadMain(int argc, char** argv, const MetadSeams& seams) {
  SetLogProgramName("metad");
  std::variant<NodeConfig, int> read = ReadConfig(argc, argv);
  if (const int* exit_code = std::get_if<int>(&read)) return *exit_code;
  const NodeConfig& config = std::get<NodeConfig>(read);
  SetLogFormat(config.log_format);          // before the first line: the faults' armed warnings included
  if (seams.arm && !seams.arm()) return 2;  // metad_faulty's faults (tests/faults/)

  // Block the stop signals in every thread (gRPC's included); the main thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::StatusOr<ServerSecurity> security = LoadNodeSecurity(config);
  if (!security.ok()) {
    std::cerr << "metad: " << security.status().message() << "\n";
    return 2;
  }
  if (!security->tls && config.allow_insecure) {
    LogWarning(absl::StrCat(
        "INSECURE: allow_insecure is set and ", config.listen,
        " serves plaintext: anyone who can reach it can read the weights under ",
        config.roots.empty() ? "no roots" : absl::StrJoin(config.roots, ", "),
        (!security->tokens_required() ? " and join the cluster" : ", and see the token in flight")));
  }
  if (security->tls && config.tls_client_ca.empty() && !security->tokens_required() &&
      config.allow_insecure && !IsLoopbackAddress(config.listen)) {
    LogWarning(absl::StrCat("INSECURE: allow_insecure is set and ", config.listen,
                            " accepts any client over TLS (no client_ca, no token): anyone who can reach it "
                            "can read the weights under ",
                            config.roots.empty() ? "no roots" : absl::StrJoin(config.roots, ", "),
                            " and join the cluster"));
  }
  LogInfo(absl::StrCat("security: ", security->Describe()));
  for (const std::string& note : security->RoleNotes()) LogInfo(absl::StrCat("roles: ", note));

  const FdLimit fds = RaiseFdLimit();
  Node node(config, *std::move(security), seams.service);
  MetadService& service = node.service();
  ConnectionCap connections(config.max_connections,
                            config.max_connections_per_client);  // outlives the server
  RpcMetrics rpcs;                   // outlives the server, whose interceptors record into it
  std::atomic<bool> serving{false};  // what the health service says
  std::unique_ptr<Serving> server = StartServer(config.listen, &service, &connections, &rpcs);
  if (server == nullptr) {
    std::cerr << "metad: cannot listen on " << config.listen
              << " (the port is in use, or the host is not an address of this machine)\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<ScrapeServer>> metrics =
      StartMetrics(config, service.security(),
                   DaemonMetricsSources{&service, server->preauth.get(), &connections,
                                        config.max_preauth_connections, &rpcs, &serving, fds.soft});
  if (!metrics.ok()) {
    std::cerr << "metad: " << metrics.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<Node::Role> role = Announce(config, server->accept_loop->port(), fds, node);
  if (!role.ok()) {
    std::cerr << "metad: " << role.status().message() << "\n";
    return 1;
  }
  node.StartJoining();

  const int signal_number =
      ServeUntilStopped(stop_signals, node, connections, *server->grpc->GetHealthCheckService(), serving);
  server->grpc->GetHealthCheckService()->SetServingStatus(false);  // stopping: take it out of rotation
  serving.store(false);
  StopGracefully(signal_number, config.shutdown_grace, node, *server->accept_loop, server->grpc);
  return 0;
}

}  // namespace metaload
