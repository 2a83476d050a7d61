// metactl unregister: forgets a registered model on the coordinator (and the daemon asked).
// metactl release: forgets a node name on the coordinator, so that another daemon may join
// under it (a host replaced for good, with new credentials): a member's name is otherwise its
// first identity's, even after it went down (issue 23). Both are an admin's.
#include <grpcpp/grpcpp.h>

#include <functional>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/metactl/commands.h"
#include "proto/convert.h"
#include "proto/metaload.grpc.pb.h"
#include "security/client_credentials.h"
#include "util/cli_args.h"

namespace metaload {
namespace {

// One call naming one thing (args' only positional) to the daemon --daemon names: `method`
// with the request `name_it` fills; prints "`done` NAME" when it succeeded.
template <typename Request, typename Response>
int RunForget(const char* command, CliArgs& args, int argc, char** argv, const char* positional,
              const char* done,
              grpc::Status (v1::Metad::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
              const std::function<void(const std::string& name, Request&)>& name_it) {
  args.Flag("timeout", "SECONDS", "default 30");
  AddCredentialFlags(args);
  if (std::optional<int> exit_code = ParseArgsOrExitCode(command, args, argc, argv)) return *exit_code;
  if (absl::Status s = args.ExpectPositionals(1, 1, positional); !s.ok())
    return ReportAndExitCode(command, s);
  auto timeout_s = args.GetInt("timeout", 30, 1, 3600);
  if (!timeout_s.ok()) return ReportAndExitCode(command, timeout_s.status());
  const std::string address = DaemonAddress(args);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = DialDaemon(address);
  if (!channel.ok()) return ReportAndExitCode(command, channel.status());
  auto stub = v1::Metad::NewStub(*channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(*timeout_s)));
  const std::string& name = args.positionals()[0];
  Request request;
  name_it(name, request);
  Response response;
  absl::Status status = FromDaemonCallStatus(((*stub).*method)(&ctx, request, &response), **channel, address,
                                             absl::StrCat("daemon ", address));
  if (!status.ok()) return ReportAndExitCode(command, status);
  std::cout << done << " " << name << "\n";
  return kExitOk;
}

}  // namespace

int RunUnregister(int argc, char** argv) {
  CliArgs args("metactl unregister", "NAME [--daemon ADDR]",
               "Forgets model NAME: the coordinator plans it no more, and daemons drop its meta\n"
               "tensors. Ranks already loading it from a plan they hold are not interrupted; the\n"
               "checkpoint files are not touched. Register it again (metactl register) to use it.\n"
               "Needs the admin role (docs/security.md).");
  args.Flag("daemon", "ADDR", "any metad of the cluster (default $METAD_ADDRESS, else 127.0.0.1:7070)");
  args.Epilog(
      "example:\n  metactl unregister llama-8b --daemon node-a:7070\n\n"
      "exit codes: 0 forgotten; 2 no such model (the message lists the registered ones), bad input;\n"
      "1 daemon unreachable or other failure.");
  return RunForget<v1::UnregisterModelRequest, v1::UnregisterModelResponse>(
      "unregister", args, argc, argv, "one model NAME", "unregistered", &v1::Metad::Stub::UnregisterModel,
      [](const std::string& name, v1::UnregisterModelRequest& request) { request.set_name(name); });
}

int RunRelease(int argc, char** argv) {
  CliArgs args("metactl release", "NODE [--daemon ADDR]",
               "Forgets member NODE and whose it was, on the coordinator: until then only the\n"
               "daemon that first joined as NODE (its certificate, or its token) may join under\n"
               "that name, even after it went down. Needs the admin role. A daemon still running\n"
               "as NODE joins again within seconds, as a new member.");
  args.Flag("daemon", "ADDR", "the coordinator (default $METAD_ADDRESS, else 127.0.0.1:7070)");
  args.Epilog(
      "example:\n  metactl release node-b --daemon node-a:7070 --token-file /etc/metaload/admin.token\n\n"
      "exit codes: 0 released; 2 no such member, not the admin role, bad input;\n"
      "1 daemon unreachable or other failure.");
  return RunForget<v1::JoinRequest, v1::JoinResponse>("release", args, argc, argv, "one NODE name",
                                                      "released", &v1::Metad::Stub::Join,
                                                      [](const std::string& name, v1::JoinRequest& request) {
                                                        request.mutable_node()->set_name(name);
                                                        request.set_release(true);
                                                      });
}

}  // namespace metaload
