#include "security/auth_processor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "security/token.h"

namespace metaload {
namespace {

class HeaderAuthProcessor final : public grpc::AuthMetadataProcessor {
 public:
  HeaderAuthProcessor(std::string node, HeaderCheck check)
      : node_(std::move(node)), check_(std::move(check)) {}

  // Inline on the transport thread: a digest and a constant-time compare cost less than a
  // hop to another thread, and the call must not proceed meanwhile.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* /*context*/,
                       OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) override {
    // gRPC hands the processor the call's pseudo-headers too; :path is the method called.
    if (auto path = metadata.find(":path");
        path != metadata.end() &&
        IsHealthCheckPath(absl::string_view(path->second.data(), path->second.size()))) {
      return grpc::Status::OK;
    }
    std::optional<absl::string_view> authorization;
    // The header stays on the call: the handler checks it again, for what this caller may do.
    if (auto it = metadata.find(kAuthorizationHeader); it != metadata.end()) {
      authorization = absl::string_view(it->second.data(), it->second.size());
    }
    absl::Status checked = check_(authorization);
    if (checked.ok()) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, absl::StrCat(node_, ": ", checked.message()));
  }

 private:
  const std::string node_;
  const HeaderCheck check_;
};

}  // namespace

bool IsHealthCheckPath(absl::string_view path) {
  return path == "/grpc.health.v1.Health/Check" || path == "/grpc.health.v1.Health/Watch";
}

std::shared_ptr<grpc::ServerCredentials> WithHeaderAuthentication(
    std::shared_ptr<grpc::ServerCredentials> credentials, bool tls, std::string node, HeaderCheck check) {
  if (!tls) credentials = grpc::XdsServerCredentials(grpc::InsecureServerCredentials());
  credentials->SetAuthMetadataProcessor(
      std::make_shared<HeaderAuthProcessor>(std::move(node), std::move(check)));
  return credentials;
}

}  // namespace metaload
