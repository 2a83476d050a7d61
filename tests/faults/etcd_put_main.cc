// A client of etcd holding one peer's credentials, for the tests of per-peer etcd roles
// (tests/integration/cluster/test_etcd_peer_roles.py): what a hostile peer could send with its
// own certificate. Puts or deletes one key through metad's own EtcdClient; prints "OK", or
// etcd's error on stderr and exits 1. (etcd's JSON gateway is no help there: under
// --client-cert-auth it refuses every request once auth is on.)
//
//   etcd_put ENDPOINT CA CERT KEY put KEY VALUE
//   etcd_put ENDPOINT CA CERT KEY delete KEY
#include <iostream>
#include <string>

#include "daemon/registry/etcd/etcd_client.h"
#include "security/client_credentials.h"

int main(int argc, char** argv) {
  const std::string verb = argc > 5 ? argv[5] : "";
  if (!((argc == 8 && verb == "put") || (argc == 7 && verb == "delete"))) {
    std::cerr << "usage: etcd_put ENDPOINT CA CERT KEY put KEY VALUE | delete KEY\n";
    return 2;
  }
  absl::StatusOr<metaload::ClientCredentials> credentials =
      metaload::LoadClientCredentials(metaload::CredentialFiles{argv[2], argv[3], argv[4], ""});
  if (!credentials.ok()) {
    std::cerr << credentials.status().message() << "\n";
    return 2;
  }
  metaload::EtcdClient etcd({argv[1]}, absl::Seconds(5), 1 << 20, *credentials);
  const absl::Status status = verb == "put" ? etcd.Put(argv[6], argv[7]) : etcd.Delete(argv[6]);
  if (!status.ok()) {
    std::cerr << status.message() << "\n";
    return 1;
  }
  std::cout << "OK\n";
  return 0;
}
