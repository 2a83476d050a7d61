#include "security/auth_processor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "security/token.h"

namespace metaload {
namespace {

class HeaderAuthProcessor final : public grpc::AuthMetadataProcessor {
 public:
  HeaderAuthProcessor(std::string node, HeaderAuthenticates authenticates)
      : node_(std::move(node)), authenticates_(std::move(authenticates)) {}

  // Inline on the transport thread: a digest and a constant-time compare cost less than a
  // hop to another thread, and the call must not proceed meanwhile.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* /*context*/,
                       OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) override {
    std::optional<absl::string_view> authorization;
    // The header stays on the call: the handler checks it again, for what this caller may do.
    if (auto it = metadata.find(kAuthorizationHeader); it != metadata.end()) {
      authorization = absl::string_view(it->second.data(), it->second.size());
    }
    absl::Status checked = CheckAuthorizationHeader(authorization, node_, authenticates_);
    if (checked.ok()) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(checked.message()));
  }

 private:
  const std::string node_;
  const HeaderAuthenticates authenticates_;
};

}  // namespace

absl::Status CheckAuthorizationHeader(std::optional<absl::string_view> authorization, absl::string_view node,
                                      const HeaderAuthenticates& authenticates) {
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError(absl::StrCat(
        node, ": no token: this metad requires `authorization: Bearer <token>` on every call (metactl ",
        "--token-file, or METALOAD_TOKEN_FILE)"));
  }
  if (!authenticates(*authorization)) {
    return absl::UnauthenticatedError(
        absl::StrCat(node, ": token refused: it is not this metad's auth_token_file"));
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::ServerCredentials> WithHeaderAuthentication(
    std::shared_ptr<grpc::ServerCredentials> credentials, bool tls, std::string node,
    HeaderAuthenticates authenticates) {
  if (!tls) credentials = grpc::XdsServerCredentials(grpc::InsecureServerCredentials());
  credentials->SetAuthMetadataProcessor(
      std::make_shared<HeaderAuthProcessor>(std::move(node), std::move(authenticates)));
  return credentials;
}

}  // namespace metaload
