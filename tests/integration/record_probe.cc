// Forges model records, as a hostile token holder or a writer of etcd or a state_dir might
// (issue 23), for the integration tests (test_forged_records.py), which have no protobuf of
// their own in Python. Records travel as protobuf JSON (metaload.v1.ModelRecord, field names as
// in proto/metaload.proto).
//
//   build/tests/record_probe layout ADDRESS MODEL           the model's record as GetLayout
//                                                           gives it, as JSON on stdout
//   build/tests/record_probe publish ADDRESS RECORD.json [replace]
//                                                           PublishModel: "OK" or "<code> <message>"
//   build/tests/record_probe encode RECORD.json OUT         OUT: the record as a state_dir file
//                                                           (and an etcd value) holds it
// With METALOAD_TOKEN_FILE set, every call carries its token (a member's, to forge as one).
// Exit 0 when the call was made (whatever it answered), 2 for bad usage or input.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "daemon/registry/embedded_record_store.h"
#include "proto/metaload.grpc.pb.h"
#include "proto/upload.h"

namespace {

std::unique_ptr<metaload::v1::Metad::Stub> Dial(const char* address) {
  return metaload::v1::Metad::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

// The bearer token of METALOAD_TOKEN_FILE on `ctx`, when it is set.
void Authorize(grpc::ClientContext* ctx) {
  const char* path = std::getenv("METALOAD_TOKEN_FILE");
  if (path == nullptr || *path == '\0') return;
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  ctx->AddMetadata("authorization", "Bearer " + token);
}

bool ReadRecord(const char* path, metaload::v1::ModelRecord* record) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || !google::protobuf::util::JsonStringToMessage(text.str(), record).ok()) {
    std::fprintf(stderr, "%s: not a ModelRecord in JSON\n", path);
    return false;
  }
  return true;
}

int PrintStatus(const grpc::Status& status) {
  if (status.ok()) {
    std::printf("OK\n");
  } else {
    const std::string code = absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
    std::printf("%s %s\n", code.c_str(), status.error_message().c_str());
  }
  return 0;
}

int Layout(const char* address, const char* model) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  metaload::v1::GetLayoutRequest request;
  request.set_model(model);
  Authorize(&ctx);
  metaload::v1::GetLayoutResponse layout;
  grpc::Status status = Dial(address)->GetLayout(&ctx, request, &layout);
  if (!status.ok()) return PrintStatus(status);
  metaload::v1::ModelRecord record;
  record.set_name(model);
  record.set_checkpoint_dir(layout.checkpoint_dir());
  record.set_skeleton_json(layout.skeleton_json());
  *record.mutable_tensors() = layout.tensors();
  record.set_init_missing(layout.init_missing());
  record.set_allow_unexpected(layout.allow_unexpected());
  record.set_registered_on(layout.answered_by());
  record.set_hf_config_json(layout.hf_config_json());
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(record, &json, options).ok()) return 2;
  std::printf("%s\n", json.c_str());
  return 0;
}

int Publish(const char* address, const char* path, bool replace) {
  metaload::v1::PublishModelRequest request;
  if (!ReadRecord(path, request.mutable_model())) return 2;
  request.set_replace(replace);
  grpc::ClientContext ctx;
  Authorize(&ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  metaload::v1::PublishModelResponse response;
  return PrintStatus(metaload::PublishModel(*Dial(address), &ctx, request, &response));
}

int Encode(const char* path, const char* out_path) {
  metaload::v1::ModelRecord record;
  if (!ReadRecord(path, &record)) return 2;
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  out << metaload::EncodeModelFile(record);
  return out ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "layout" && argc == 4) return Layout(argv[2], argv[3]);
  if (command == "publish" && (argc == 4 || (argc == 5 && std::string(argv[4]) == "replace")))
    return Publish(argv[2], argv[3], argc == 5);
  if (command == "encode" && argc == 4) return Encode(argv[2], argv[3]);
  std::fprintf(
      stderr,
      "usage: %s layout ADDRESS MODEL | publish ADDRESS RECORD.json [replace] | encode RECORD.json OUT\n",
      argv[0]);
  return 2;
}
