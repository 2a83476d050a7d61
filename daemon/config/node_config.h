// metad's node configuration (YAML), read once at start. Every key is documented in
// docs/node-config.md and deploy/node.example.yaml:
//
//   node: node-a                  # REQUIRED: unique name in the cluster
//   listen: 127.0.0.1:7070        # default 127.0.0.1:7070; port 0 picks a free port
//   advertise: node-a:7070        # what others dial; default: `listen`, a wildcard host
//                                 # (0.0.0.0, [::]) replaced by this host's name
//   coordinator: 127.0.0.1:7070   # default: this daemon is the coordinator
//   metrics_listen: 127.0.0.1:9464  # Prometheus /metrics (plain HTTP); `off` disables it; off
//                                 # loopback only with allow_insecure, and then a scrape needs a
//                                 # token when the daemon has tokens (docs/operations.md)
//   gpus: 8                       # default 0 (then only a file server / CPU ranks)
//   gpu_memory: 80GiB             # per GPU; default 80GiB
//   roots: [/models, /mnt/shared] # checkpoint folders this daemon may read and serve
//   same_device: false            # true: refuse files on another mount than their root's,
//                                 # or with more than one hard link (shared hosts)
//   chunk_size: 1MiB              # stream chunk size, default 1MiB (max 3MiB)
//   member_timeout: 10s           # coordinator: a member not heard from for this long has
//                                 # expired (agents re-join every 2 s); 1s..1h
//   shutdown_grace: 30s           # on SIGTERM: streams in flight get this long to finish
//                                 # (new ones are refused at once); 0s..1h, default 30s
//   state_dir: /var/lib/metaload  # coordinator: registered models persist here (0700,
//                                 # created if missing); default none (memory only)
//   registry: etcd://10.0.0.5:2379,10.0.0.6:2379
//                                 # members and models live in etcd; every daemon is a peer
//                                 # that answers itself. Excludes coordinator and state_dir.
//   registry_prefix: /metaload/   # the keys' prefix in etcd (one cluster per prefix)
//   tls:                          # TLS on the port (docs/security.md)
//     cert: /etc/metaload/node.pem      # this daemon's certificate and key (PEM)
//     key: /etc/metaload/node-key.pem
//     client_ca: /etc/metaload/ca.pem   # optional: mutual TLS, callers need a cert it signed
//     ca: /etc/metaload/ca.pem          # optional: verifies daemons this one dials (default client_ca)
//     roles: {admin: [alice], member: ["node-*"], reader: ["*"]}
//                                       # optional, with client_ca: the roles of certificates, by
//                                       # name (CN); default every certificate holds every role
//     node_certificate: "{node}"        # with client_ca: the certificate name a member joining
//                                       # as node N must have ({node} is N); default "{node}"
//   auth_token_file: /etc/metaload/token  # every call must carry `authorization: Bearer <token>`;
//                                         # this one token holds every role
//   auth_tokens:                  # instead: a token per role (security/roles.h), FILE or [FILE, ...]
//     reader: /etc/metaload/reader.token  # GetPlan, GetLayout, ReadRange, GetStatus
//     member: /etc/metaload/node-a.token  # + Join, PublishModel; the first is this daemon's own
//     admin: /etc/metaload/admin.token    # + RegisterModel, UnregisterModel, --replace
//   allow_insecure: false         # plaintext on a non-loopback address (logged loudly)
//   require_digests: false        # the hostile-cluster switch: every model record needs every
//                                 # tensor's digest, and every rank fails a load whose content
//                                 # is not proven (docs/security.md)
//   log_format: text              # or json: one object per line, for log shippers
//                                 # (docs/running-a-cluster.md, "Logs")
// Limits on what clients can make the daemon hold (docs/node-config.md, "Limits and memory"):
//   max_streams: 256              # ReadRange streams in flight at once; 1..65536
//   max_streams_per_client: 64    # ... from one client host; 1..max_streams (unset: at
//                                 # most max_streams)
//   max_connections: 1024         # connections open at once; 1..65536
//   max_connections_per_client: 256  # ... from one client host; 1..max_connections (unset: at
//                                 # most max_connections)
//   preauth_timeout: 10s          # a connection whose first call has not passed authentication
//                                 # (its TLS handshake included) this long is closed; 1s..1h
//   max_preauth_connections: 256  # connections not yet authenticated, apart from max_connections;
//                                 # 1..65536
//   max_preauth_connections_per_client: 64  # ... from one client host; 1..max_preauth_connections
//   max_preauth_bytes: 8MiB       # a connection whose client sends more before a call of its
//                                 # reaches the service is closed; 1MiB..1GiB
//   max_request_size: 64MiB       # largest request message; 1MiB..1GiB
//   plan_cache_size: 1GiB         # coordinator: plans kept for ranks to be answered from; 16MiB..64GiB
//   idle_stream_timeout: 60s      # a stream whose reader takes no chunk this long is
//                                 # cancelled; 1s..1h
//   max_models: 256               # registered models; 1..1024
//   max_registry_size: 256MiB     # their records together, as sent and stored; 16MiB..1TiB
//   max_tensors_per_model: 1000000  # tensors of one registered model (checkpoint, skeleton); 1..4000000
//   max_names_per_identity: 4     # coordinator: node names one member token or certificate may
//                                 # hold, up or down, until released; 1..4096
#ifndef METALOAD_DAEMON_CONFIG_NODE_CONFIG_H_
#define METALOAD_DAEMON_CONFIG_NODE_CONFIG_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/requests/request_limits.h"
#include "util/log.h"

namespace metaload {

struct NodeConfig {
  std::string source;  // the file it was read from, for messages
  std::string node;
  std::string listen = "127.0.0.1:7070";
  std::string advertise;    // empty: derived from `listen` (AdvertisedAddress)
  std::string coordinator;  // empty or == listen: this daemon coordinates
  // host:port of the metrics listener (daemon/metrics/scrape_server.h); empty: off. Unset, the
  // default is tried and a port in use only warns (several daemons on one host); set, a port
  // that cannot be bound stops metad.
  std::string metrics_listen = "127.0.0.1:9464";
  bool metrics_listen_set = false;
  int gpus = 0;
  uint64_t gpu_memory_bytes = 80ull << 30;
  std::vector<std::string> roots;  // canonical absolute paths (symlinks resolved)
  // Registration and ReadRange open only files on their root's own mount, with one link
  // (util/fs/confined_open.h): for hosts where others may place hard links or bind mounts.
  bool same_device = false;
  uint32_t chunk_bytes = 1u << 20;
  absl::Duration member_timeout = absl::Seconds(10);
  absl::Duration shutdown_grace = absl::Seconds(30);
  // Absolute; empty: registered models live in memory only. A node agent ignores it (only
  // the coordinator holds the registry), with a warning: which daemon coordinates is known
  // only once it listens (daemon/config/self_address.h), so it cannot be refused here.
  std::string state_dir;
  // The AWS credentials file s3:// roots are read with (s3_credentials_file); empty: the
  // environment's chain (util/fs/s3/s3_credentials.h). Its keys are never logged.
  std::string s3_credentials_file;
  // host:port of etcd's client URLs (`registry: etcd://a:2379,b:2379`); empty: the registry
  // is the coordinator's (embedded). Non-empty: no coordinator and no state_dir.
  std::vector<std::string> registry_endpoints;
  std::string registry_prefix = "/metaload/";  // starts and ends with '/'
  // The largest model record written to or read from etcd: one above it is refused unread.
  // Stays under etcd's --max-request-bytes (1.5 MiB by default).
  uint64_t registry_max_record_bytes = 1 << 20;
  // `registry_tls`: paths (absolute) of the CA of etcd's certificate and this daemon's client
  // certificate and key (both or neither); ca empty: plaintext to etcd.
  std::string registry_tls_ca, registry_tls_cert, registry_tls_key;
  // `registry_auth`: an etcd user and the file (absolute path) holding its password; empty: none.
  std::string registry_auth_user, registry_auth_password_file;
  // Paths (absolute), read at start (security/server_security.h); empty: not set.
  std::string tls_cert, tls_key, tls_client_ca, tls_ca;
  std::string auth_token_file;
  // `auth_tokens`: (role, path) pairs in the file's order; role is reader, member or admin.
  std::vector<std::pair<std::string, std::string>> auth_tokens;
  // `tls.roles`: (role, certificate name pattern) pairs; tls_roles_set even when empty.
  std::vector<std::pair<std::string, std::string>> tls_roles;
  bool tls_roles_set = false;
  std::string tls_node_certificate = "{node}";  // contains "{node}" once
  // Plaintext was asked for where others could listen in: `listen`, `coordinator` or an etcd
  // endpoint is not a loopback address and there is no `tls`.
  bool allow_insecure = false;
  // Every record this daemon holds (registered, published, restored, read from etcd) carries
  // every checkpoint tensor's digest, and its plans and layouts tell ranks to require proof of
  // content (issue 35: a member that stripped the digests made zeros "verified").
  bool require_digests = false;
  // Limits. A stream past max_streams or max_streams_per_client (keyed by the peer's host) is
  // refused with RESOURCE_EXHAUSTED naming the key; so is a model past max_models or
  // max_tensors_per_model. REQUIRES: max_streams_per_client <= max_streams.
  uint32_t max_streams = 256;
  uint32_t max_streams_per_client = 64;
  // Authenticated connections. When a host's or all are held, a new connection is closed as
  // soon as it is accepted. REQUIRES: max_connections_per_client <= max_connections.
  uint32_t max_connections = 1024;
  uint32_t max_connections_per_client = 256;
  // Connections not yet authenticated (daemon/net/preauth_connections.h): apart from those above,
  // and closed unless a call of theirs passes authentication within preauth_timeout.
  // REQUIRES: max_preauth_connections_per_client <= max_preauth_connections.
  uint32_t max_preauth_connections = 256;
  uint32_t max_preauth_connections_per_client = 64;
  absl::Duration preauth_timeout = absl::Seconds(10);
  uint64_t max_preauth_bytes = 8 << 20;
  uint64_t max_request_bytes = 64 << 20;   // gRPC's receive limit for every call
  uint64_t plan_cache_bytes = 1ull << 30;  // plans/plan_cache.h max_bytes
  absl::Duration idle_stream_timeout = absl::Seconds(60);
  int max_models = 256;
  // The registered models' records together, by their wire size (what a registration, a
  // publication, a state_dir file or an etcd value carries): the models held cost about ten
  // times this in memory, parsed (issue 35: 256 models of 100k tensors were ~23 GiB; measured by
  // tests/integration/robustness/test_registry_memory.py), so the default keeps that near 2.5 GiB.
  uint64_t max_registry_bytes = 256ull << 20;
  int64_t max_tensors_per_model = 1'000'000;
  // A coordinator's node names per identity of one holder (a member token file, a certificate);
  // the shared identities ("token", "anonymous") are bounded by kMaxMembers only.
  int max_names_per_identity = kDefaultNamesPerIdentity;
  // How metad writes its log lines (`log_format: text` or `json`; util/log.h; docs/running-a-cluster.md,
  // "Logs").
  LogFormat log_format = LogFormat::kText;
};

// Whether `address` (host:port) is on this machine's loopback: 127.0.0.0/8, ::1, localhost.
bool IsLoopbackAddress(const std::string& address);

// Errors are InvalidArgument naming the file and the key ("node.yaml: gpu_memory: bad size
// \"80 gigs\" ..."); an unknown key is an error (a typo must not be silently ignored); a root
// that does not exist is NotFound.
absl::StatusOr<NodeConfig> ParseNodeConfig(const std::string& yaml_text, const std::string& source_name);
absl::StatusOr<NodeConfig> LoadNodeConfig(const std::string& path);

// The address other daemons and ranks dial, once the server is bound to `bound_port`:
// `advertise` when set; else `listen`'s host with the bound port, where a wildcard host
// (0.0.0.0, [::], empty) becomes `hostname` — a wildcard is not an address anyone can dial.
std::string AdvertisedAddress(const NodeConfig& config, int bound_port, const std::string& hostname);

}  // namespace metaload

#endif  // METALOAD_DAEMON_CONFIG_NODE_CONFIG_H_
