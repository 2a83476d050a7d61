// Whose each member name is, kept where a coordinator keeps its registry (the embedded store
// under state_dir, daemon/registry/embedded_record_store.h), so that a name stays the first
// identity's that joined under it across a restart of the coordinator: a member killed with -9
// while the coordinator restarts must not find a stranger in its place (issue 23). Peers of an
// etcd registry have none: etcd's auth decides who writes a member's key.
//
// What Load returns is untrusted input (anyone who can write state_dir wrote it): names and
// identities are checked as a Join's are before use.
//
// Thread-safety: one caller at a time.
#ifndef METALOAD_DAEMON_MEMBERSHIP_BINDING_STORE_H_
#define METALOAD_DAEMON_MEMBERSHIP_BINDING_STORE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace metaload {

struct MemberBinding {
  std::string name;      // the node name
  std::string identity;  // who joined under it: "token:member:node-b.token", "cert:node-b"
};

struct StoredBindings {
  std::vector<MemberBinding> bindings;  // sorted by name
  std::vector<absl::Status> skipped;    // each entry that could not be read, naming it
};

class BindingStore {
 public:
  virtual ~BindingStore() = default;
  // Every binding held; an error only when the store itself cannot be read.
  virtual absl::StatusOr<StoredBindings> LoadBindings() = 0;
  // Durably, as RecordStore::Put and Remove (daemon/registry/record_store.h).
  virtual absl::Status PutBinding(const MemberBinding& binding) = 0;
  virtual absl::Status RemoveBinding(const std::string& name) = 0;
};

}  // namespace metaload

#endif  // METALOAD_DAEMON_MEMBERSHIP_BINDING_STORE_H_
