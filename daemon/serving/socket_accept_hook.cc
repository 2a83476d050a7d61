#include "daemon/serving/socket_accept_hook.h"

#include <grpc/support/sync.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/version_info.h>
#include <sys/socket.h>

#include <cstddef>
#include <type_traits>
#include <utility>

#if GRPC_CPP_VERSION_MAJOR != 1 || GRPC_CPP_VERSION_MINOR != 51
#error \
    "socket_accept_hook.cc mirrors gRPC 1.51's grpc_socket_mutator; check \
src/core/lib/iomgr/socket_mutator.h of this gRPC (newer ones cap connections themselves: \
GRPC_ARG_MAX_ALLOWED_INCOMING_CONNECTIONS)"
#endif

// gRPC 1.51, src/core/lib/iomgr/socket_mutator.h (global namespace, C++ linkage, as there).
typedef enum {
  GRPC_FD_CLIENT_CONNECTION_USAGE,
  GRPC_FD_SERVER_LISTENER_USAGE,
  GRPC_FD_SERVER_CONNECTION_USAGE,
} grpc_fd_usage;
typedef struct {
  int fd;
  grpc_fd_usage usage;
} grpc_mutate_socket_info;
struct grpc_socket_mutator_vtable {
  bool (*mutate_fd)(int fd, grpc_socket_mutator* mutator);
  int (*compare)(grpc_socket_mutator* a, grpc_socket_mutator* b);
  void (*destroy)(grpc_socket_mutator* mutator);
  bool (*mutate_fd_2)(const grpc_mutate_socket_info* info, grpc_socket_mutator* mutator);
};
struct grpc_socket_mutator {
  const grpc_socket_mutator_vtable* vtable;
  gpr_refcount refcount;
};
void grpc_socket_mutator_init(grpc_socket_mutator* mutator, const grpc_socket_mutator_vtable* vtable);

namespace metaload {
namespace {

// First member: gRPC hands back the grpc_socket_mutator*, which is this object's address
// (standard layout, hence the hook behind a pointer).
struct HookMutator {
  grpc_socket_mutator base;
  AcceptHook* hook;
};
static_assert(std::is_standard_layout_v<HookMutator> && offsetof(HookMutator, base) == 0);

bool MutateOld(int, grpc_socket_mutator*) { return true; }  // unused: mutate_fd_2 is set

// An error here would make gRPC 1.51 stop listening on the port for good (tcp_server_posix.cc
// treats it as a failed accept), so a refused socket is shut down and reported fine.
bool Mutate(const grpc_mutate_socket_info* info, grpc_socket_mutator* mutator) {
  if (info->usage != GRPC_FD_SERVER_CONNECTION_USAGE) return true;
  auto* self = reinterpret_cast<HookMutator*>(mutator);
  if (!(*self->hook)(info->fd)) ::shutdown(info->fd, SHUT_RDWR);
  return true;
}

// Servers built with different hooks must not share a listener or channel.
int Compare(grpc_socket_mutator* a, grpc_socket_mutator* b) { return a < b ? -1 : (a > b ? 1 : 0); }

void Destroy(grpc_socket_mutator* mutator) {
  auto* self = reinterpret_cast<HookMutator*>(mutator);
  delete self->hook;
  delete self;
}

constexpr grpc_socket_mutator_vtable kVtable = {MutateOld, Compare, Destroy, Mutate};

class HookOption : public grpc::ServerBuilderOption {
 public:
  explicit HookOption(AcceptHook hook) : hook_(std::move(hook)) {}

  // The arguments take the mutator's one reference; gRPC calls Destroy when the last goes.
  void UpdateArguments(grpc::ChannelArguments* args) override {
    auto* mutator = new HookMutator{{}, new AcceptHook(hook_)};
    grpc_socket_mutator_init(&mutator->base, &kVtable);
    args->SetSocketMutator(&mutator->base);
  }
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*) override {}

 private:
  AcceptHook hook_;
};

}  // namespace

std::unique_ptr<grpc::ServerBuilderOption> SocketAcceptHookOption(AcceptHook hook) {
  return std::make_unique<HookOption>(std::move(hook));
}

}  // namespace metaload
