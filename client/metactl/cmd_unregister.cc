// metactl unregister: forgets a registered model on the coordinator (and the daemon asked).
#include <grpcpp/grpcpp.h>

#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/metactl/commands.h"
#include "proto/convert.h"
#include "proto/metaload.grpc.pb.h"
#include "security/client_credentials.h"
#include "util/cli_args.h"

namespace metaload {

int RunUnregister(int argc, char** argv) {
  CliArgs args("metactl unregister", "NAME [--daemon ADDR]",
               "Forgets model NAME: the coordinator plans it no more, and daemons drop its meta\n"
               "tensors. Ranks already loading it from a plan they hold are not interrupted; the\n"
               "checkpoint files are not touched. Register it again (metactl register) to use it.");
  args.Flag("daemon", "ADDR", "any metad of the cluster (default $METAD_ADDRESS, else 127.0.0.1:7070)");
  args.Flag("timeout", "SECONDS", "default 30");
  AddCredentialFlags(args);
  args.Epilog(
      "example:\n  metactl unregister llama-8b --daemon node-a:7070\n\n"
      "exit codes: 0 forgotten; 2 no such model (the message lists the registered ones), bad input;\n"
      "1 daemon unreachable or other failure.");
  if (std::optional<int> exit_code = ParseArgsOrExitCode("unregister", args, argc, argv)) return *exit_code;
  if (absl::Status s = args.ExpectPositionals(1, 1, "one model NAME"); !s.ok()) {
    return ReportAndExitCode("unregister", s);
  }
  auto timeout_s = args.GetInt("timeout", 30, 1, 3600);
  if (!timeout_s.ok()) return ReportAndExitCode("unregister", timeout_s.status());
  const std::string address = DaemonAddress(args);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = DialDaemon(address);
  if (!channel.ok()) return ReportAndExitCode("unregister", channel.status());
  auto stub = v1::Metad::NewStub(*channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(*timeout_s)));
  v1::UnregisterModelRequest request;
  request.set_name(args.positionals()[0]);
  v1::UnregisterModelResponse response;
  absl::Status status = FromDaemonCallStatus(stub->UnregisterModel(&ctx, request, &response), **channel,
                                             address, absl::StrCat("daemon ", address));
  if (!status.ok()) return ReportAndExitCode("unregister", status);
  std::cout << "unregistered " << request.name() << "\n";
  return kExitOk;
}

}  // namespace metaload
