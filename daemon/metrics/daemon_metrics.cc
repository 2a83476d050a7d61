#include "daemon/metrics/daemon_metrics.h"

#include <dirent.h>

#include "daemon/metrics/metrics_text.h"

namespace metaload {
namespace {

void Counter(MetricsText& text, const char* name, const char* help, uint64_t value) {
  text.Family(name, MetricType::kCounter, help);
  text.Sample(name, {}, value);
}

void Gauge(MetricsText& text, const char* name, const char* help, uint64_t value) {
  text.Family(name, MetricType::kGauge, help);
  text.Sample(name, {}, value);
}

void WriteServing(const ServiceStats& stats, const NodeConfig& config, MetricsText& text) {
  text.Family("metaload_served_bytes_total", MetricType::kCounter,
              "Checkpoint bytes this daemon sent to ranks, by source (stream: ReadRange; ranks' direct "
              "reads and fan-out never pass through a daemon)");
  text.Sample("metaload_served_bytes_total", {{"source", "stream"}}, stats.bytes_served);
  Gauge(text, "metaload_streams_in_flight", "ReadRange streams being served", stats.streams_in_flight);
  Gauge(text, "metaload_streams_max", "max_streams of the node config", config.max_streams);
  Gauge(text, "metaload_uploads_in_flight", "RegisterModel and PublishModel uploads being received",
        stats.uploads_in_flight);
  for (const auto& [kind, refusals] :
       {std::pair{"streams", stats.streams_refused}, std::pair{"uploads", stats.uploads_refused}}) {
    const std::string refused = std::string("metaload_") + kind + "_refused_total";
    const std::string cancelled = std::string("metaload_") + kind + "_cancelled_total";
    const bool streams = std::string(kind) == "streams";
    text.Family(refused, MetricType::kCounter,
                streams ? "ReadRange streams refused (RESOURCE_EXHAUSTED), by the node config limit they met"
                        : "Uploads refused (RESOURCE_EXHAUSTED), by the limit they met");
    text.Sample(refused, {{"reason", streams ? "max_streams" : "max_uploads"}}, refusals.max_streams);
    text.Sample(refused, {{"reason", streams ? "max_streams_per_client" : "max_uploads_per_client"}},
                refusals.max_streams_per_client);
    text.Family(
        cancelled, MetricType::kCounter,
        "Cancelled by the daemon, by reason: idle (idle_stream_timeout waiting on the peer) or deadline "
        "(an upload not whole in the time its size allows)");
    text.Sample(cancelled, {{"reason", "idle"}}, refusals.idle);
    text.Sample(cancelled, {{"reason", "deadline"}}, refusals.deadline);
  }
  Counter(text, "metaload_read_errors_total",
          "Reads of a checkpoint file that failed while serving a ReadRange (the rank fails over)",
          stats.read_errors);
}

void WriteRole(const ServiceStats& stats, const NodeConfig& config, MetricsText& text) {
  const RoleStatus& role = stats.role;
  const bool holds_registry = role.is_coordinator || !role.registry.empty();
  text.Family("metaload_node_info", MetricType::kGauge,
              "1, with this daemon's node name and role (coordinator, peer, agent; starting)");
  text.Sample("metaload_node_info",
              {{"node", config.node},
               {"role", !stats.started           ? "starting"
                        : role.is_coordinator    ? "coordinator"
                        : !role.registry.empty() ? "peer"
                                                 : "agent"}},
              uint64_t{1});
  if (!holds_registry) return;  // an agent's members and models are its coordinator's
  text.Family("metaload_members", MetricType::kGauge,
              "Members of the cluster by state (a coordinator's or a peer's view)");
  text.Sample("metaload_members", {{"state", "up"}}, uint64_t{role.members_up});
  text.Sample("metaload_members", {{"state", "down"}}, uint64_t{role.members_down});
  text.Sample("metaload_members", {{"state", "left"}}, uint64_t{role.members_left});
  Gauge(text, "metaload_registered_models", "Models registered (a coordinator's or a peer's registry)",
        role.models.size());
  Gauge(text, "metaload_plans_cached", "Plans held in the plan cache", role.plans_cached);
  Gauge(text, "metaload_plan_cache_bytes", "Bytes the plan cache holds (at most plan_cache_size)",
        role.plan_cache_bytes);
  Gauge(text, "metaload_plan_cache_max_bytes", "plan_cache_size of the node config", config.plan_cache_bytes);
}

void WriteConnections(const DaemonMetricsSources& sources, MetricsText& text) {
  if (sources.connections != nullptr) {
    Gauge(text, "metaload_connections", "Authenticated connections open on the main port",
          sources.connections->open());
    Gauge(text, "metaload_connections_max", "max_connections of the node config",
          sources.connections->max_total());
  }
  Gauge(text, "metaload_preauth_connections_max", "max_preauth_connections of the node config",
        sources.max_preauth_connections);
  if (sources.preauth == nullptr) return;
  Gauge(text, "metaload_preauth_connections", "Connections on the main port not yet authenticated",
        sources.preauth->open());
  const PreauthConnections::Counts counts = sources.preauth->counts();
  text.CounterByLabel("metaload_preauth_connections_total",
                      "Connections to the main port by what happened to them before they authenticated "
                      "(daemon/net/preauth_connections.h)",
                      "event",
                      {{"admitted", counts.admitted},
                       {"refused", counts.refused},
                       {"evicted", counts.evicted},
                       {"authenticated", counts.authenticated},
                       {"over_cap", counts.over_cap},
                       {"timed_out", counts.timed_out},
                       {"oversized", counts.oversized},
                       {"hung_up", counts.hung_up},
                       {"reset_flood", counts.reset_floods}});
}

}  // namespace

uint64_t OpenFileDescriptors() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  uint64_t count = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count > 0 ? count - 1 : 0;  // less the one opendir holds
}

std::string WriteDaemonMetrics(const DaemonMetricsSources& sources) {
  MetricsText text;
  const ServiceStats stats = sources.service->Stats();
  const NodeConfig& config = sources.service->config();
  WriteRole(stats, config, text);
  Gauge(text, "metaload_health_serving",
        "1 when the gRPC health service says SERVING (the registry loaded; an agent's coordinator "
        "reachable), 0 when NOT_SERVING",
        sources.serving != nullptr && sources.serving->load() ? 1 : 0);
  Gauge(text, "metaload_stopping",
        "1 once SIGTERM was received (streams in flight finish, new calls are refused)",
        stats.stopping ? 1 : 0);
  WriteServing(stats, config, text);
  if (sources.rpcs != nullptr) sources.rpcs->Write(text);
  WriteConnections(sources, text);
  Gauge(text, "metaload_process_resident_memory_bytes", "Resident memory (VmRSS), sampled once a second",
        stats.resident_bytes);
  Gauge(text, "metaload_process_open_fds", "File descriptors this process holds", OpenFileDescriptors());
  Gauge(text, "metaload_process_max_fds", "The soft limit on file descriptors in force", sources.max_fds);
  return text.Take();
}

}  // namespace metaload
