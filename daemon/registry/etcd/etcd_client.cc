#include "daemon/registry/etcd/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/convert.h"
#include "util/identifiers.h"
#include "util/status_macros.h"

namespace metaload {
namespace {

bool TryAnotherEndpoint(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

std::string PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, absl::Duration call_timeout, int max_receive_bytes,
                       const ClientCredentials& credentials, Login login)
    : call_timeout_(call_timeout), login_(std::move(login)) {
  for (std::string& address : endpoints) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(max_receive_bytes);
    // gRPC's default reconnect backoff grows to 120 s: an etcd that restarted would stay
    // "unavailable" to us for minutes, and members would expire. Retry within a second. (The
    // minimum is also each connection attempt's timeout: 100 ms failed on a loaded machine.)
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // metaload's own token is not etcd's: etcd knows this daemon by its client certificate.
    ClientCredentials tls = credentials;
    tls.token.clear();
    auto channel = DialDaemon(address, args, tls);
    endpoints_.push_back(Endpoint{std::move(address), etcdserverpb::KV::NewStub(channel),
                                  etcdserverpb::Lease::NewStub(channel),
                                  etcdserverpb::Auth::NewStub(channel)});
  }
}

std::string EtcdClient::Describe() const {
  std::vector<std::string> addresses;
  for (const Endpoint& e : endpoints_) addresses.push_back(e.address);
  return absl::StrCat("etcd://", absl::StrJoin(addresses, ","));
}

absl::Status EtcdClient::Call(const std::string& what,
                              const std::function<grpc::Status(Endpoint&, grpc::ClientContext&)>& call) {
  const size_t first = current_.load();
  absl::Status last;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t index = (first + i) % endpoints_.size();
    Endpoint& endpoint = endpoints_[index];
    grpc::Status status;
    absl::Status login;
    // A second try only when etcd no longer knows the token (its TTL ran out, etcd restarted).
    for (bool renew : {false, true}) {
      absl::StatusOr<std::string> token = Token(endpoint, renew);
      if (!token.ok()) {
        login = token.status();
        break;
      }
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + call_timeout_));
      if (!token->empty()) ctx.AddMetadata("token", *token);
      status = call(endpoint, ctx);
      if (login_.user.empty() || status.error_code() != grpc::StatusCode::UNAUTHENTICATED) break;
    }
    if (!login.ok()) {
      last = login;
      if (absl::IsUnavailable(login) || absl::IsDeadlineExceeded(login)) continue;
      return last;
    }
    if (status.ok()) {
      current_.store(index);
      return absl::OkStatus();
    }
    last = FromGrpcStatus(status, absl::StrCat("etcd ", endpoint.address, ": ", what));
    if (!TryAnotherEndpoint(status.error_code())) return last;
  }
  return last;
}

absl::StatusOr<std::string> EtcdClient::Token(Endpoint& endpoint, bool renew) {
  if (login_.user.empty()) return std::string();
  absl::MutexLock lock(&token_mu_);
  if (!token_.empty() && !renew) return token_;
  etcdserverpb::AuthenticateRequest request;
  request.set_name(login_.user);
  request.set_password(login_.password);
  etcdserverpb::AuthenticateResponse response;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + call_timeout_));
  grpc::Status status = endpoint.auth->Authenticate(&ctx, request, &response);
  if (!status.ok()) {
    return FromGrpcStatus(status, absl::StrCat("etcd ", endpoint.address, ": Authenticate as ", login_.user));
  }
  token_ = response.token();
  return token_;
}

absl::StatusOr<std::optional<mvccpb::KeyValue>> EtcdClient::Get(const std::string& key) {
  etcdserverpb::RangeRequest request;
  request.set_key(key);
  etcdserverpb::RangeResponse response;
  absl::Status status = Call(absl::StrCat("Range ", key), [&](Endpoint& e, grpc::ClientContext& ctx) {
    return e.kv->Range(&ctx, request, &response);
  });
  if (!status.ok()) return status;
  if (response.kvs_size() == 0) return std::nullopt;
  return std::move(*response.mutable_kvs(0));
}

absl::StatusOr<std::vector<mvccpb::KeyValue>> EtcdClient::ListKeys(const std::string& prefix) {
  etcdserverpb::RangeRequest request;
  request.set_key(prefix);
  request.set_range_end(PrefixRangeEnd(prefix));
  request.set_keys_only(true);
  std::vector<mvccpb::KeyValue> keys;
  int64_t page_keys = kListPageKeys;
  while (true) {
    request.set_limit(page_keys);
    etcdserverpb::RangeResponse response;
    absl::Status status = Call(
        absl::StrCat("Range ", QuoteForMessage(request.key()), "... (keys only, ", page_keys, " at most)"),
        [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->Range(&ctx, request, &response); });
    if (absl::IsResourceExhausted(status) && page_keys > 1) {
      page_keys /= 2;  // keys of megabytes: fewer of them
      continue;
    }
    if (!status.ok()) return status;
    // Every later page as of the first one's revision: a member put meanwhile between two
    // pages is not missed while the one after it is listed (peers would see it come and go).
    if (request.revision() == 0) request.set_revision(response.header().revision());
    for (mvccpb::KeyValue& kv : *response.mutable_kvs()) keys.push_back(std::move(kv));
    if (!response.more() || response.kvs_size() == 0) return keys;
    request.set_key(keys.back().key() + std::string(1, '\0'));  // the next key after the last
    page_keys = kListPageKeys;
  }
}

absl::Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease_id) {
  etcdserverpb::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_lease(lease_id);
  etcdserverpb::PutResponse response;
  return Call(absl::StrCat("Put ", key),
              [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->Put(&ctx, request, &response); });
}

absl::Status EtcdClient::Delete(const std::string& key) {
  etcdserverpb::DeleteRangeRequest request;
  request.set_key(key);
  etcdserverpb::DeleteRangeResponse response;
  return Call(absl::StrCat("DeleteRange ", key), [&](Endpoint& e, grpc::ClientContext& ctx) {
    return e.kv->DeleteRange(&ctx, request, &response);
  });
}

absl::StatusOr<int64_t> EtcdClient::TxnIfUnchanged(const std::string& what, const std::string& key,
                                                   int64_t expected_mod_revision,
                                                   std::vector<etcdserverpb::RequestOp> ops) {
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* compare = request.add_compare();
  compare->set_key(key);
  compare->set_target(etcdserverpb::Compare::MOD);
  compare->set_result(etcdserverpb::Compare::EQUAL);
  compare->set_mod_revision(expected_mod_revision);
  for (etcdserverpb::RequestOp& op : ops) *request.add_success() = std::move(op);
  etcdserverpb::TxnResponse response;
  ML_RETURN_IF_ERROR(
      Call(absl::StrCat(what, " ", key, " if unchanged since revision ", expected_mod_revision),
           [&](Endpoint& e, grpc::ClientContext& ctx) { return e.kv->Txn(&ctx, request, &response); }));
  if (!response.succeeded()) {
    return absl::AbortedError(absl::StrCat(
        Describe(), ": ", key, " was written by another client since revision ", expected_mod_revision));
  }
  return response.header().revision();
}

absl::StatusOr<int64_t> EtcdClient::PutIfUnchanged(const std::string& key, const std::string& value,
                                                   int64_t expected_mod_revision) {
  etcdserverpb::RequestOp op;
  op.mutable_request_put()->set_key(key);
  op.mutable_request_put()->set_value(value);
  return TxnIfUnchanged("Put", key, expected_mod_revision, {std::move(op)});
}

absl::StatusOr<int64_t> EtcdClient::MoveIfUnchanged(const std::string& from_key,
                                                    int64_t expected_mod_revision, const std::string& key,
                                                    const std::string& value) {
  std::vector<etcdserverpb::RequestOp> ops(2);
  ops[0].mutable_request_delete_range()->set_key(from_key);
  ops[1].mutable_request_put()->set_key(key);
  ops[1].mutable_request_put()->set_value(value);
  return TxnIfUnchanged(absl::StrCat("Put ", key, " deleting"), from_key, expected_mod_revision,
                        std::move(ops));
}

absl::Status EtcdClient::DeleteIfUnchanged(const std::string& key, int64_t expected_mod_revision) {
  etcdserverpb::RequestOp op;
  op.mutable_request_delete_range()->set_key(key);
  return TxnIfUnchanged("DeleteRange", key, expected_mod_revision, {std::move(op)}).status();
}

absl::StatusOr<int64_t> EtcdClient::GrantLease(int64_t ttl_seconds) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  etcdserverpb::LeaseGrantResponse response;
  absl::Status status = Call(
      absl::StrCat("LeaseGrant ttl=", ttl_seconds),
      [&](Endpoint& e, grpc::ClientContext& ctx) { return e.lease->LeaseGrant(&ctx, request, &response); });
  if (!status.ok()) return status;
  if (!response.error().empty()) {
    return absl::UnavailableError(absl::StrCat(Describe(), ": LeaseGrant: ", response.error()));
  }
  return response.id();
}

absl::Status EtcdClient::KeepAlive(int64_t lease_id) {
  etcdserverpb::LeaseKeepAliveResponse response;
  // The API is a stream; one request and its answer per renewal keeps this client synchronous
  // (a renewal every few seconds makes the stream's set-up cost irrelevant).
  absl::Status status =
      Call(absl::StrCat("LeaseKeepAlive ", lease_id), [&](Endpoint& e, grpc::ClientContext& ctx) {
        auto stream = e.lease->LeaseKeepAlive(&ctx);
        etcdserverpb::LeaseKeepAliveRequest request;
        request.set_id(lease_id);
        const bool answered = stream->Write(request) && stream->Read(&response);
        stream->WritesDone();
        grpc::Status finished = stream->Finish();
        if (answered) return grpc::Status::OK;
        return finished.ok()
                   ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "the stream closed before an answer")
                   : finished;
      });
  if (!status.ok()) return status;
  if (response.ttl() <= 0) return absl::NotFoundError(absl::StrCat("etcd lease ", lease_id, " has expired"));
  return absl::OkStatus();
}

absl::Status EtcdClient::RevokeLease(int64_t lease_id) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseRevokeResponse response;
  absl::Status status = Call(
      absl::StrCat("LeaseRevoke ", lease_id),
      [&](Endpoint& e, grpc::ClientContext& ctx) { return e.lease->LeaseRevoke(&ctx, request, &response); });
  return absl::IsNotFound(status) ? absl::OkStatus() : status;
}

}  // namespace metaload
