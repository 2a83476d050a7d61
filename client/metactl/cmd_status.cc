// metactl status: what a daemon knows — itself, the cluster (from the coordinator) and models.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/metactl/commands.h"
#include "proto/convert.h"
#include "proto/metaload.grpc.pb.h"
#include "security/client_credentials.h"
#include "util/cli_args.h"
#include "util/units.h"

namespace metaload {

int RunStatus(int argc, char** argv) {
  CliArgs args("metactl status", "[--daemon ADDR] [--format table|json]",
               "Shows a daemon's node (GPUs, roots, memory in use, bytes served, streams in flight)\n"
               "and, on the coordinator, the cluster's members with their state (up; down: not heard\n"
               "from for member_timeout, left out of new plans; left: stopped cleanly) and how long\n"
               "ago each was last heard from, and the registered models.");
  args.Flag("daemon", "ADDR", "default $METAD_ADDRESS, else 127.0.0.1:7070");
  args.Flag("format", "FMT", "table (default) or json (the GetStatus response, proto3 JSON)");
  args.Flag("timeout", "SECONDS", "default 10");
  AddCredentialFlags(args);
  if (std::optional<int> exit_code = ParseArgsOrExitCode("status", args, argc, argv)) return *exit_code;
  if (absl::Status s = args.ExpectPositionals(0, 0, "no positional arguments"); !s.ok()) {
    return ReportAndExitCode("status", s);
  }
  std::string format = args.GetOr("format", "table");
  if (format != "table" && format != "json") {
    return ReportAndExitCode(
        "status", absl::InvalidArgumentError(absl::StrCat("--format \"", format, "\": use table or json")));
  }
  auto timeout_s = args.GetInt("timeout", 10, 1, 3600);
  if (!timeout_s.ok()) return ReportAndExitCode("status", timeout_s.status());
  std::string address = DaemonAddress(args);

  absl::StatusOr<std::shared_ptr<grpc::Channel>> dialed = DialDaemon(address);
  if (!dialed.ok()) return ReportAndExitCode("status", dialed.status());
  std::shared_ptr<grpc::Channel> channel = *std::move(dialed);
  auto stub = v1::Metad::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(*timeout_s)));
  v1::GetStatusResponse response;
  absl::Status status = FromDaemonCallStatus(stub->GetStatus(&ctx, v1::GetStatusRequest(), &response),
                                             *channel, address, absl::StrCat("daemon ", address));
  if (!status.ok()) return ReportAndExitCode("status", status);

  if (format == "json") {
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.preserve_proto_field_names = true;
    // Scripts read counters that are still 0 ("bytes_served": "0"), not absent keys.
    options.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(response, &json, options);
    std::cout << json;
    return kExitOk;
  }
  const v1::NodeInfo& self = response.self();
  std::cout << absl::StrFormat(
      "node %s at %s: %s, %d GPUs x %s, roots [%s]\n", self.name(), self.address(),
      !response.registry().empty() ? "peer"
      : response.is_coordinator()  ? "coordinator"
                                   : absl::StrCat("coordinator is ", response.coordinator()),
      self.gpu_count(), FormatBytes(self.gpu_memory_bytes()), absl::StrJoin(self.roots(), ", "));
  std::cout << absl::StrFormat("  up %.1f s, resident memory %s, served %s, %d streams in flight%s\n",
                               response.uptime_ms() / 1000.0, FormatBytes(response.resident_bytes()),
                               FormatBytes(response.bytes_served()), response.streams_in_flight(),
                               response.stopping() ? " (stopping)" : "");
  if (!response.registry().empty()) {
    std::cout << "  registry " << response.registry() << ": every daemon is a peer\n";
  }
  if (response.is_coordinator() && response.registry().empty()) {
    std::cout << absl::StrFormat("  %d plans cached, %s\n", response.plans_cached(),
                                 FormatBytes(response.plan_cache_bytes()));
  }
  if (response.is_coordinator()) {
    // The coordinator lists a bounded number of members (proto/metaload.proto) and counts all
    // (one from before issue 35 listed all, and counted none).
    const v1::MemberCounts& counts = response.member_counts();
    const bool counted = response.has_member_counts();
    const uint64_t up = counted ? counts.up() : response.members_size();
    const uint64_t known =
        counted ? uint64_t{counts.up()} + counts.down() + counts.left() : response.member_states_size();
    std::cout << "members (" << up << " up of " << known << "):\n";
    std::cout << absl::StrFormat("  %-16s %-5s %9s  %-22s %s\n", "NODE", "STATE", "LAST SEEN", "ADDRESS",
                                 "GPUS / ROOTS");
    for (const v1::MemberState& state : response.member_states()) {
      const v1::NodeInfo& m = state.node();
      const std::string seen =
          m.name() == self.name() ? "self" : absl::StrFormat("%.1f s", state.last_seen_ms() / 1000.0);
      std::cout << absl::StrFormat("  %-16s %-5s %9s  %-22s %d x %s  [%s]\n", m.name(), state.state(), seen,
                                   m.address(), m.gpu_count(), FormatBytes(m.gpu_memory_bytes()),
                                   absl::StrJoin(m.roots(), ", "));
    }
    if (known > static_cast<uint64_t>(response.member_states_size())) {
      std::cout << "  ... " << known - response.member_states_size()
                << " more not listed (a status lists the first members by name, up to 1 MiB; "
                << counts.down() << " down and " << counts.left() << " left in all)\n";
    }
    std::cout << "models (" << response.models_size() << "):\n";
    for (const v1::ModelSummary& m : response.models()) {
      std::cout << absl::StrFormat("  %-16s %6d tensors (%d held as meta tensors)  %s  from %s on %s\n",
                                   m.name(), m.tensor_count(), m.meta_tensor_count(),
                                   FormatBytes(m.total_bytes()), m.checkpoint_dir(), m.registered_on());
    }
  }
  return kExitOk;
}

}  // namespace metaload
