// A real metad service in this test process that serves the checkpoints under one root: an
// InProcessDaemon (in_process_daemon.h), a coordinator of its own, behind a header with neither
// protobuf nor gRPC, so that tests compiled against LibTorch — whose include folder carries
// protobuf headers of its own — can start daemons beside a rank's fill
// (tests/client/read/fill_faults_test.cc). Its files are read through `file_system`: hand it a
// FaultFileSystem (tests/faults/) and the daemon's disk fails where the test says; what it
// serves is told to `hooks` (daemon/serving/read_range/serving_hooks.h).
//
//   FaultFileSystem disk;
//   CheckpointDaemon a("node-a", dir.path(), &disk);
//   ASSERT_TRUE(a.Register("m", dir.File("m")).ok());
//   ... stream from a.address() ...
//
// Thread-safety: Register from one thread at a time; the daemon serves from its own threads.
#ifndef METALOAD_TESTS_DAEMON_SERVICE_CHECKPOINT_DAEMON_H_
#define METALOAD_TESTS_DAEMON_SERVICE_CHECKPOINT_DAEMON_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/serving/read_range/serving_hooks.h"
#include "util/fs/file_system.h"

namespace metaload::testing {

class InProcessDaemon;  // in_process_daemon.h

class CheckpointDaemon {
 public:
  // Node `node`, serving the folder `root`; started, or failed the test. `file_system` and
  // `hooks` must outlive this.
  CheckpointDaemon(const std::string& node, const std::string& root,
                   FileSystem* file_system = FileSystem::Default(),
                   ServingHooks* hooks = ServingHooks::None());
  ~CheckpointDaemon();

  // RegisterModel `name` from `checkpoint_dir` (with `--digest` when `digest`), as metactl
  // register sends it; the daemon's error as a status.
  absl::Status Register(const std::string& name, const std::string& checkpoint_dir, bool digest = false);

  const std::string& node() const { return node_; }
  std::string address() const;

 private:
  const std::string node_;
  std::unique_ptr<InProcessDaemon> daemon_;
};

// Writes `dir`/model.safetensors (creating `dir`) with one U8 tensor of `bytes_each` bytes per
// name, in that order; byte i of the t-th is (131 * i + 7 * t) mod 251, so that no two tensors
// and no two nearby bytes are alike.
absl::Status WriteTestCheckpoint(const std::string& dir, const std::vector<std::string>& names,
                                 int64_t bytes_each);

}  // namespace metaload::testing

#endif  // METALOAD_TESTS_DAEMON_SERVICE_CHECKPOINT_DAEMON_H_
