#include "daemon/serving/load_log.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/identifiers.h"
#include "util/log.h"
#include "util/units.h"

namespace metaload {
namespace {

// Hosts counted per load: enough to say "to 3 hosts", bounded whoever connects.
constexpr size_t kMaxHosts = 4096;

std::string Plural(uint64_t n, absl::string_view one, absl::string_view many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

}  // namespace

LoadLog::LoadLog(Options options, std::function<absl::Time()> clock)
    : options_(options), clock_(std::move(clock)) {}

LoadLog::Load* LoadLog::FindOrBegin(const std::string& model, absl::Time now, bool* begun) {
  auto it = loads_.find(model);
  if (it != loads_.end()) return &it->second;
  if (loads_.size() >= options_.max_loads) return nullptr;
  *begun = true;
  Load& load = loads_[model];
  load.begun = now;
  return &load;
}

void LoadLog::PlanAnswered(const PlanAsked& asked) {
  const absl::Time now = clock_();
  bool begun = false;
  uint64_t planned_bytes = 0;
  {
    absl::MutexLock lock(&mu_);
    Load* load = FindOrBegin(asked.model, now, &begun);
    if (load == nullptr) return;
    load->last_active = now;
    if (asked.world_size != load->world_size || asked.strategy != load->strategy) {
      // Another world or strategy of the same model: the ranks counted are the newest plan's.
      load->world_size = asked.world_size;
      load->strategy = asked.strategy;
      load->ranks_asked.assign(static_cast<size_t>(std::max(asked.world_size, 0)), false);
      load->ranks_asked_count = 0;
      load->planned_bytes = asked.planned_bytes ? asked.planned_bytes() : 0;
    }
    planned_bytes = load->planned_bytes;
    if (asked.rank >= 0 && asked.rank < asked.world_size && !load->ranks_asked[asked.rank]) {
      load->ranks_asked[asked.rank] = true;
      ++load->ranks_asked_count;
    }
  }
  if (!begun) return;
  Log(LogLevel::kInfo,
      absl::StrCat("load begun: model ", asked.model, ", ", Plural(asked.world_size, "rank", "ranks"), " (",
                   asked.strategy, "), ", FormatBytes(planned_bytes), " planned; rank ", asked.rank,
                   " asked first, from ", asked.host),
      {{"event", "load_begin"},
       {"model", asked.model},
       {"ranks", asked.world_size},
       {"strategy", asked.strategy},
       {"planned_bytes", planned_bytes},
       {"rank", asked.rank},
       {"host", asked.host}});
}

void LoadLog::StreamOpened(const std::string& model, const std::string& host) {
  const absl::Time now = clock_();
  bool begun = false;
  {
    absl::MutexLock lock(&mu_);
    Load* load = FindOrBegin(model, now, &begun);
    if (load == nullptr) return;
    load->last_active = now;
    ++load->streams_in_flight;
    ++load->streams;
    if (load->hosts.size() < kMaxHosts) load->hosts.insert(host);
  }
  if (!begun) return;
  Log(LogLevel::kInfo, absl::StrCat("load begun: model ", model, ", a stream to ", host),
      {{"event", "load_begin"}, {"model", model}, {"host", host}});
}

void LoadLog::StreamEnded(const StreamEnding& ended) {
  const absl::Time now = clock_();
  uint64_t lines_due = 0;  // the events the stream's own line stands for; 0: none due
  {
    absl::MutexLock lock(&mu_);
    if (ended.how == StreamEnd::kCancelled) lines_due = cut_lines_.Count(now);
    if (ended.how == StreamEnd::kFailed) lines_due = failed_lines_.Count(now);
    auto it = loads_.find(ended.model);
    if (it != loads_.end()) {  // else not followed (past max_loads when it opened)
      Load& load = it->second;
      load.last_active = now;
      if (load.streams_in_flight > 0) --load.streams_in_flight;
      load.served_bytes += ended.sent_bytes;
      if (ended.how == StreamEnd::kCancelled) ++load.streams_cut;
      if (ended.how == StreamEnd::kFailed) ++load.streams_failed;
    }
  }
  if (lines_due == 0) return;
  const bool cut = ended.how == StreamEnd::kCancelled;
  std::string line =
      absl::StrCat("stream ", cut ? "cut short" : "failed", ": model ", ended.model, ", ",
                   FormatBytes(ended.sent_bytes), " of ", FormatBytes(ended.length_bytes), " of ",
                   QuoteForMessage(ended.path, 512), " sent to ", ended.host, ": ",
                   cut ? "the reader went away (it fails over to another server, or stopped)" : ended.reason);
  if (lines_due > 1) {
    absl::StrAppend(&line, " (and ", lines_due - 1, " more streams ", cut ? "cut short" : "failed",
                    " since the last such line)");
  }
  Log(LogLevel::kWarning, line,
      {{"event", cut ? "stream_cut" : "stream_failed"},
       {"model", ended.model},
       {"host", ended.host},
       {"path", ended.path},
       {"bytes", ended.sent_bytes},
       {"length_bytes", ended.length_bytes},
       {"reason", cut ? std::string("the reader went away") : ended.reason},
       {"count", lines_due}});
}

void LoadLog::EndQuiet() { End(options_.quiet, false); }
void LoadLog::EndAll() { End(absl::ZeroDuration(), true); }

void LoadLog::End(absl::Duration quiet, bool all) {
  const absl::Time now = clock_();
  std::vector<std::pair<std::string, Load>> ended;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = loads_.begin(); it != loads_.end();) {
      if (all || (it->second.streams_in_flight == 0 && now - it->second.last_active >= quiet)) {
        ended.emplace_back(it->first, std::move(it->second));
        loads_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (const auto& [model, load] : ended) {
    std::string plans = "no plan asked here";
    if (load.world_size > 0) {
      plans = absl::StrCat(load.ranks_asked_count, " of ", Plural(load.world_size, "rank", "ranks"),
                           " asked their plans (", load.strategy, ", ", FormatBytes(load.planned_bytes),
                           " planned)");
    }
    std::string streams = "nothing streamed from here";
    if (load.streams > 0) {
      streams =
          absl::StrCat(FormatBytes(load.served_bytes), " sent in ", Plural(load.streams, "stream", "streams"),
                       " to ", Plural(load.hosts.size(), "host", "hosts"));
      if (load.streams_cut + load.streams_failed > 0) {
        absl::StrAppend(&streams, " (", load.streams_cut, " cut short, ", load.streams_failed, " failed)");
      }
    }
    const double seconds = absl::ToDoubleSeconds(load.last_active - load.begun);
    Log(LogLevel::kInfo,
        absl::StrFormat("load ended: model %s, %s; %s; %.2f s", model, plans, streams, seconds),
        {{"event", "load_end"},
         {"model", model},
         {"ranks", load.world_size},
         {"ranks_asked", load.ranks_asked_count},
         {"planned_bytes", load.planned_bytes},
         {"bytes", load.served_bytes},
         {"streams", load.streams},
         {"streams_cut", load.streams_cut},
         {"streams_failed", load.streams_failed},
         {"hosts", load.hosts.size()},
         {"seconds", seconds}});
  }
}

}  // namespace metaload
