// A gRPC server option that shows every socket the server accepts to a callback, before gRPC
// reads from it (metad's daemon/net/connection_cap.h decides there whether it may stay).
//
// gRPC 1.51 has no public hook for this: the option installs a socket mutator, whose type is
// internal to gRPC (src/core/lib/iomgr/socket_mutator.h). socket_accept_hook.cc mirrors that
// layout and refuses to compile against any other gRPC version.
#ifndef METALOAD_DAEMON_SERVING_SOCKET_ACCEPT_HOOK_H_
#define METALOAD_DAEMON_SERVING_SOCKET_ACCEPT_HOOK_H_

#include <grpcpp/impl/server_builder_option.h>

#include <functional>
#include <memory>

namespace metaload {

// Called on a gRPC poller thread with each accepted socket: must not block. Returns whether
// the connection may stay; a refused socket is shut down (gRPC then closes it as a connection
// its peer closed).
using AcceptHook = std::function<bool(int fd)>;

// For grpc::ServerBuilder::SetOption. `hook` lives as long as the server built with it.
std::unique_ptr<grpc::ServerBuilderOption> SocketAcceptHookOption(AcceptHook hook);

}  // namespace metaload

#endif  // METALOAD_DAEMON_SERVING_SOCKET_ACCEPT_HOOK_H_
