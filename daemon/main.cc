// metad: the per-node daemon. See docs/node-config.md.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/meta_store.h"
#include "daemon/net/accept_loop.h"
#include "daemon/net/connection_cap.h"
#include "daemon/net/fd_limit.h"
#include "daemon/net/listen_socket.h"
#include "daemon/node_config.h"
#include "daemon/peer_registry.h"
#include "daemon/registry/embedded_model_store.h"
#include "daemon/self_address.h"
#include "daemon/service.h"
#include "daemon/serving/kill_fault.h"
#include "security/server_security.h"
#include "util/cli_args.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

constexpr absl::Duration kRejoinInterval = absl::Seconds(2);

// Keeps a node agent joined: retries until the coordinator answers, then re-joins every
// few seconds so that it stays a live member and a restarted coordinator learns it again.
class Joiner {
 public:
  explicit Joiner(MetadService* service) : service_(service), thread_([this] { Run(); }) {}
  ~Joiner() { Stop(); }

  // Stops re-joining and tells the coordinator this daemon is leaving, so that plans made from
  // now on list other servers (a coordinator that does not answer expires it after
  // member_timeout instead).
  void Leave() {
    Stop();
    absl::Status left = service_->JoinCoordinator(absl::Seconds(2), /*leaving=*/true);
    if (left.ok()) {
      LogInfo("left the cluster: new plans no longer list this node");
    } else {
      LogWarning(absl::StrCat("could not tell the coordinator that this node is leaving (", left.message(),
                              "); it expires after member_timeout"));
    }
  }

 private:
  void Run() {
    bool joined = false;
    std::string last_error;
    while (true) {
      absl::Status status = service_->JoinCoordinator(absl::Seconds(2));
      if (status.ok() && !joined) LogInfo("joined the coordinator");
      if (!status.ok() && std::string(status.message()) != last_error) {
        LogWarning(absl::StrCat(status.message(), " (retrying)"));
        last_error = std::string(status.message());
      }
      if (status.ok()) last_error.clear();
      joined = status.ok();
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, absl::ToChronoNanoseconds(joined ? kRejoinInterval : absl::Seconds(1)),
                       [this] { return stop_; })) {
        return;
      }
    }
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  MetadService* service_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// metad's gRPC server, and the accept loop of its own that hands it its connections.
struct Serving {
  std::unique_ptr<grpc::Server> grpc;
  std::unique_ptr<AcceptLoop> accept_loop;  // declared last: stopped before the server goes
};

// The server on `address`; null when it cannot listen there. metad binds the port itself
// (daemon/net/listen_socket.h: not shared, SO_REUSEPORT off, so a second metad on a port in use
// fails instead of answering half the calls) and accepts on a thread of its own
// (daemon/net/accept_loop.h), which counts every connection against max_connections(_per_client)
// through `connections` and hands the admitted ones to gRPC's external connection acceptor
// with the service's credentials (gRPC runs the TLS handshake).
std::unique_ptr<Serving> StartServer(const std::string& address, MetadService* service,
                                     ConnectionCap* connections) {
  absl::StatusOr<ListenSockets> sockets = ListenSockets::Open(address);
  if (!sockets.ok()) return nullptr;
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor =
      builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
          service->security().credentials);
  // A connection that never finishes its HTTP/2 handshake holds a descriptor: 10 s, not 120.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 10'000);
  // Idle connections are closed after 10 minutes (clients reconnect transparently).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 600'000);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(service->config().max_request_bytes));  // max_request_size
  builder.RegisterService(service);
  auto server = std::make_unique<Serving>();
  server->grpc = builder.BuildAndStart();
  if (server->grpc == nullptr) return nullptr;
  // Started after the server, stopped before it: gRPC drops, without closing it, a connection
  // handed to it before it starts or once it is shut down.
  absl::StatusOr<std::unique_ptr<AcceptLoop>> loop =
      AcceptLoop::Start(*std::move(sockets), connections, [acceptor](int listener_fd, int fd) {
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

// The coordinator's registry under state_dir, its models restored into `service`; null
// without a state_dir, and on a node agent (which only warns: who coordinates is known only
// now, so the config parser could not refuse it).
absl::StatusOr<std::unique_ptr<ModelStore>> OpenRegistry(const NodeConfig& config, bool coordinator,
                                                         MetadService& service) {
  if (config.state_dir.empty()) return nullptr;
  if (!coordinator) {
    LogWarning(absl::StrCat("state_dir ", config.state_dir,
                            " is ignored: this node is not the coordinator, and ",
                            "only the coordinator persists the registry"));
    return nullptr;
  }
  ML_ASSIGN_OR_RETURN(std::unique_ptr<EmbeddedModelStore> store, EmbeddedModelStore::Open(config.state_dir));
  ML_RETURN_IF_ERROR(service.RestoreRegistry(store.get()));
  return std::unique_ptr<ModelStore>(std::move(store));
}

// Tells the service the address it is reached at (with `listen: host:0` the kernel picked the
// port; a wildcard host becomes our name) and whether it is the coordinator, once a
// coordinator's registry is restored, or a peer has read the shared one (so its first answer
// already knows every model); prints the line scripts wait for. Returns whether this daemon
// answers itself (coordinator or peer).
absl::StatusOr<bool> Announce(const NodeConfig& config, int port, const FdLimit& fds, MetadService& service,
                              std::unique_ptr<ModelStore>& registry, std::unique_ptr<PeerRegistry>& peers) {
  char hostname[256] = "localhost";
  ::gethostname(hostname, sizeof(hostname) - 1);
  const std::string self_address = AdvertisedAddress(config, port, hostname);
  const bool peer = !config.registry_endpoints.empty();
  const bool coordinator = peer || CoordinatorIsSelf(config, self_address, port, hostname);
  if (peer) {
    v1::NodeInfo self = service.self();
    self.set_address(self_address);
    ML_ASSIGN_OR_RETURN(peers, PeerRegistry::Open(config, self, service));
  } else {
    ML_ASSIGN_OR_RETURN(registry, OpenRegistry(config, coordinator, service));
  }
  service.SetBoundAddress(self_address, coordinator);
  std::cout << "metad: " << config.node << " listening on " << self_address << std::endl;
  LogInfo(absl::StrCat(
      "node ", config.node, " serving ", config.roots.size(), " roots; ",
      peer          ? absl::StrCat("peer of registry etcd://", absl::StrJoin(config.registry_endpoints, ","))
      : coordinator ? std::string("coordinator")
                    : absl::StrCat("joining ", config.coordinator),
      "; file descriptors: ", fds.soft, " (hard limit ", fds.hard, ")"));
  if (fds.soft < 4096) {
    LogWarning(absl::StrCat("only ", fds.soft,
                            " file descriptors: every connection and open file takes one; ",
                            "raise the hard limit (systemd LimitNOFILE, ulimit -Hn)"));
  }
  // Each connection takes one; the margin is for the files being streamed and the daemon's own.
  if (fds.soft < static_cast<uint64_t>(config.max_connections) + 256) {
    LogWarning(absl::StrCat("max_connections is ", config.max_connections, " but only ", fds.soft,
                            " file descriptors are allowed: connections past that fail as the descriptors ",
                            "run out, not as refused (lower max_connections or raise the limit)"));
  }
  return coordinator;
}

// Serves until a stop signal; once a second, samples memory and drops the connections gRPC
// has closed from the count (off gRPC's threads and the accept loop's). Returns the signal.
int ServeUntilStopped(const sigset_t& stop_signals, MetadService& service, ConnectionCap& connections) {
  const struct timespec one_second = {1, 0};
  int signal_number = 0;
  while ((signal_number = sigtimedwait(&stop_signals, nullptr, &one_second)) < 0) {
    service.SampleResidentMemory();
    connections.Prune();
  }
  return signal_number;
}

// Leaves the cluster, refuses new calls, and gives the streams in flight `grace` to finish
// before they are cancelled (a rank whose stream is cancelled resumes from another server).
void StopGracefully(int signal_number, absl::Duration grace, MetadService& service, Joiner* joiner,
                    PeerRegistry* peers, AcceptLoop& accept_loop, std::unique_ptr<grpc::Server>& server) {
  const absl::Time start = absl::Now();
  service.MarkStopping();
  LogInfo(absl::StrCat("stopping on signal ", signal_number, ": ", service.streams_in_flight(),
                       " streams in flight get up to ", absl::FormatDuration(grace),
                       " (shutdown_grace) to finish; new calls are refused"));
  if (joiner != nullptr) joiner->Leave();
  if (peers != nullptr) {
    // Revoking the lease takes this daemon out of the other peers' plans at once.
    absl::Status left = peers->Leave();
    if (left.ok()) {
      LogInfo("left the registry: new plans no longer list this node");
    } else {
      LogWarning(absl::StrCat("leaving the registry: ", left.message(), " (the lease will expire)"));
    }
  }
  if (server != nullptr) {
    accept_loop.Stop();  // first: see StartServer
    server->Shutdown(absl::ToChronoTime(start + grace));
    server->Wait();
  }
  LogInfo(absl::StrFormat("stopped after %.2f s", absl::ToDoubleSeconds(absl::Now() - start)));
}

int Main(int argc, char** argv) {
  SetLogProgramName("metad");
  std::variant<NodeConfig, int> read = ReadConfig(argc, argv);
  if (const int* exit_code = std::get_if<int>(&read)) return *exit_code;
  const NodeConfig& config = std::get<NodeConfig>(read);
  if (!ArmKillFaultFromEnvironment()) return 2;  // a test's fault hook (daemon/serving/kill_fault.h)

  // Block the stop signals in every thread (gRPC's included); the main thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::StatusOr<ServerSecurity> security =
      LoadServerSecurity(ServerSecurityFiles{config.tls_cert, config.tls_key, config.tls_client_ca,
                                             config.tls_ca, config.auth_token_file, config.source});
  if (!security.ok()) {
    std::cerr << "metad: " << security.status().message() << "\n";
    return 2;
  }
  if (!security->tls && config.allow_insecure) {
    LogWarning(
        absl::StrCat("INSECURE: allow_insecure is set and ", config.listen,
                     " serves plaintext: anyone who can reach it can read the weights under ",
                     config.roots.empty() ? "no roots" : absl::StrJoin(config.roots, ", "),
                     (security->token.empty() ? " and join the cluster" : ", and see the token in flight")));
  }
  LogInfo(absl::StrCat("security: ", security->Describe()));

  const FdLimit fds = RaiseFdLimit();
  MetaStore meta;
  std::unique_ptr<ModelStore> registry;  // before the service, whose queued jobs may still write it
  std::unique_ptr<PeerRegistry> peers;   // likewise; Left before the service goes
  MetadService service(config, *std::move(security), &meta);
  ConnectionCap connections(config.max_connections,
                            config.max_connections_per_client);  // outlives the server
  std::unique_ptr<Serving> server = StartServer(config.listen, &service, &connections);
  if (server == nullptr) {
    std::cerr << "metad: cannot listen on " << config.listen
              << " (the port is in use, or the host is not an address of this machine)\n";
    return 1;
  }
  const int port = server->accept_loop->port();
  absl::StatusOr<bool> coordinator = Announce(config, port, fds, service, registry, peers);
  if (!coordinator.ok()) {
    std::cerr << "metad: " << coordinator.status().message() << "\n";
    return 1;
  }
  std::unique_ptr<Joiner> joiner;
  if (!*coordinator) joiner = std::make_unique<Joiner>(&service);

  const int signal_number = ServeUntilStopped(stop_signals, service, connections);
  StopGracefully(signal_number, config.shutdown_grace, service, joiner.get(), peers.get(),
                 *server->accept_loop, server->grpc);
  joiner.reset();
  return 0;
}

}  // namespace
}  // namespace metaload

int main(int argc, char** argv) { return metaload::Main(argc, argv); }
