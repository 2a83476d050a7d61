#include "tests/daemon/service/checkpoint_daemon.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "planner/format/safetensors_writer.h"
#include "proto/convert.h"
#include "proto/upload.h"
#include "tests/daemon/service/in_process_daemon.h"

namespace metaload::testing {

CheckpointDaemon::CheckpointDaemon(const std::string& node, const std::string& root, FileSystem* file_system,
                                   ServingHooks* hooks)
    : node_(node) {
  ServiceSeams seams;
  seams.file_system = file_system;
  seams.serving_hooks = hooks;
  daemon_ = std::make_unique<InProcessDaemon>(
      absl::StrCat("node: ", node, "\ngpus: 1\nroots: [", root, "]\n"), seams);
  absl::StatusOr<::metaload::Node::Role> role = daemon_->Start();
  EXPECT_TRUE(role.ok()) << role.status();
}

CheckpointDaemon::~CheckpointDaemon() = default;

absl::Status CheckpointDaemon::Register(const std::string& name, const std::string& checkpoint_dir,
                                        bool digest) {
  grpc::ClientContext ctx;
  v1::RegisterModelRequest request;
  request.set_name(name);
  request.set_checkpoint_dir(checkpoint_dir);
  request.set_digest(digest);
  v1::RegisterModelResponse response;
  return FromGrpcStatus(RegisterModel(daemon_->stub(), &ctx, request, &response), "RegisterModel");
}

std::string CheckpointDaemon::address() const { return daemon_->address(); }

absl::Status WriteTestCheckpoint(const std::string& dir, const std::vector<std::string>& names,
                                 int64_t bytes_each) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", dir, ": ", ec.message()));
  std::vector<TensorToWrite> tensors;
  for (size_t t = 0; t < names.size(); ++t) {
    tensors.push_back(TensorToWrite{names[t], DType::kU8, {bytes_each}, [t](absl::Span<uint8_t> out) {
                                      for (size_t i = 0; i < out.size(); ++i)
                                        out[i] = (131 * i + 7 * t) % 251;
                                    }});
  }
  return WriteSafetensors(dir + "/model.safetensors", tensors);
}

}  // namespace metaload::testing
