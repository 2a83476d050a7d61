#include "security/server_identity.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "util/identifiers.h"

namespace metaload {
namespace {

constexpr absl::string_view kNodePlaceholder = "{node}";

// Checks the server's certificate against a ServerNameCheck, synchronously: the name is in the
// request, nothing to wait for.
class ServerNameVerifier final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit ServerNameVerifier(std::shared_ptr<ServerNameCheck> check) : check_(std::move(check)) {}

  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> /*callback*/, grpc::Status* sync_status) override {
    auto strings = [](const std::vector<grpc::string_ref>& refs) {
      std::vector<std::string> out;
      out.reserve(refs.size());
      for (const grpc::string_ref& r : refs) out.emplace_back(r.data(), r.size());
      return out;
    };
    const grpc::string_ref cn = request->common_name();
    const std::string presented = PresentedCertificateName(
        {std::string(cn.data(), cn.size())}, {strings(request->dns_names()), strings(request->uri_names()),
                                              strings(request->email_names()), strings(request->ip_names())});
    const absl::Status checked = check_->Check(presented);
    *sync_status = checked.ok()
                       ? grpc::Status::OK
                       : grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(checked.message()));
    return true;  // done synchronously: the callback is never called
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest*) override {}

 private:
  const std::shared_ptr<ServerNameCheck> check_;
};

}  // namespace

std::string NodeCertificateNameFor(absl::string_view pattern, absl::string_view node) {
  return absl::StrReplaceAll(pattern, {{kNodePlaceholder, node}});
}

absl::Status CheckServerCertificatePattern(absl::string_view pattern) {
  if (pattern.empty()) return absl::OkStatus();
  const size_t at = pattern.find(kNodePlaceholder);
  absl::Status usable = CheckIdentityName("server_certificate", pattern);
  if (usable.ok() && at != absl::string_view::npos &&
      pattern.find(kNodePlaceholder, at + 1) == absl::string_view::npos) {
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat("the daemon names servers' certificates by ",
                                          QuoteForMessage(pattern),
                                          ", which is not a tls.node_certificate pattern (printable ASCII "
                                          "holding {node} once)"));
}

std::string PresentedCertificateName(const std::vector<std::string>& common_names,
                                     const std::vector<std::vector<std::string>>& alternative_names) {
  for (const std::string& name : common_names) {
    if (!name.empty()) return name;
  }
  for (const std::vector<std::string>& names : alternative_names) {
    for (const std::string& name : names) {
      if (!name.empty()) return name;
    }
  }
  return "";
}

absl::Status ServerNameCheck::Check(const std::string& presented) {
  absl::MutexLock lock(&mu_);
  if (presented == certificate_name_) {
    refused_.reset();  // the address is served by the node now (it was restarted, moved)
    return absl::OkStatus();
  }
  refused_ = presented;
  return absl::UnauthenticatedError(Explain("", presented));
}

std::optional<std::string> ServerNameCheck::Refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

std::string ServerNameCheck::Explain(absl::string_view address, const std::string& presented) const {
  return absl::StrCat("the server", address.empty() ? "" : absl::StrCat(" at ", address), " is not node ",
                      QuoteForMessage(node_), ": its certificate ",
                      presented.empty() ? std::string("names no one")
                                        : absl::StrCat("is named ", QuoteForMessage(presented, 256)),
                      ", and node ", QuoteForMessage(node_), "'s must be named ",
                      QuoteForMessage(certificate_name_, 256),
                      " (the coordinator's tls.node_certificate); nothing was sent to it, no token included");
}

std::shared_ptr<grpc::experimental::CertificateVerifier> MakeServerNameVerifier(
    std::shared_ptr<ServerNameCheck> check) {
  return grpc::experimental::ExternalCertificateVerifier::Create<ServerNameVerifier>(std::move(check));
}

}  // namespace metaload
