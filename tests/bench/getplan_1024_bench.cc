// Benchmark, not a test (issue 9): 1,024 simulated ranks ask for their part of a
// Llama-3.1-405B-shaped plan at once, through two node agents, as the ranks of a 128-node job
// do at start. Real metad processes on loopback: a coordinator and two agents; 125 more
// members join by RPC (128 nodes x 8 GPUs), and the model is published with a synthetic
// layout (no bytes on disk). For each strategy (tp 8 x pp 16, and fsdp) it prints the
// latency percentiles, the time from the first request to the last rank holding its part,
// the coordinator's CPU seconds, and, at the end, the coordinator's peak RSS, as one JSON
// object on the last line (bench/run_bench.py reads it).
//
//   build/tests/bench_getplan_1024 [--metad build/daemon/metad]
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "planner/skeleton/skeleton.h"
#include "proto/convert.h"
#include "proto/metaload.grpc.pb.h"
#include "proto/upload.h"
#include "tests/bench/llama_405b.h"

namespace metaload {
namespace {

constexpr int kRanks = 1024;
constexpr int kGpusPerNode = 8;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_getplan_1024: %s\n", what.c_str());
  std::exit(1);
}

// A metad started on a config file; stopped by SIGTERM when destroyed.
class Daemon {
 public:
  Daemon(const std::string& metad, const std::string& config, const std::string& log) {
    int out[2];
    if (::pipe(out) != 0) Die("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(log_fd, STDERR_FILENO);
      ::execl(metad.c_str(), "metad", "--node-config", config.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(out[1]);
    FILE* stream = ::fdopen(out[0], "r");
    char line[512] = {0};
    if (std::fgets(line, sizeof(line), stream) == nullptr) Die("metad did not start: see " + log);
    std::fclose(stream);
    std::string text(line);
    const size_t at = text.find("listening on ");
    if (at == std::string::npos) Die("metad did not start: " + text);
    address_ = text.substr(at + 13);
    address_.erase(address_.find_last_not_of("\n") + 1);
  }
  ~Daemon() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::string address_;
};

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) Die("cannot write " + path);
}

// utime + stime of `pid`, in seconds.
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double PeakRssMib(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

struct Result {
  double first_to_last_s = 0;
  double p50_ms = 0, p99_ms = 0;
  double coordinator_cpu_s = 0;
  double mean_response_kib = 0;
};

// 1,024 GetPlan calls in flight at once, ranks 0..511 through agent 1 and the rest through
// agent 2; every response must be that rank's part, all with one digest.
Result AskEveryRank(v1::Metad::Stub* agent1, v1::Metad::Stub* agent2, const v1::GetPlanRequest& base,
                    pid_t coordinator) {
  struct Call {
    grpc::ClientContext ctx;
    v1::GetPlanRequest request;
    v1::GetPlanResponse response;
    std::chrono::steady_clock::time_point sent;
    double latency_ms = 0;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Call>> calls(kRanks);
  absl::Mutex mu;
  int done = 0;
  const double cpu_before = CpuSeconds(coordinator);
  const auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < kRanks; ++rank) {
    auto call = std::make_unique<Call>();
    call->request = base;
    call->request.set_rank(rank);
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    call->sent = std::chrono::steady_clock::now();
    Call* c = call.get();
    calls[rank] = std::move(call);
    (rank < kRanks / 2 ? agent1 : agent2)
        ->async()
        ->GetPlan(&c->ctx, &c->request, &c->response, [c, &mu, &done](grpc::Status status) {
          c->latency_ms =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c->sent).count();
          c->status = std::move(status);
          absl::MutexLock lock(&mu);
          ++done;
        });
  }
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](int* d) { return *d == kRanks; }, &done));
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Result result;
  result.coordinator_cpu_s = CpuSeconds(coordinator) - cpu_before;
  result.first_to_last_s = elapsed;
  std::vector<double> latencies;
  uint64_t bytes = 0;
  const std::string digest = calls[0]->response.plan_digest();
  for (int rank = 0; rank < kRanks; ++rank) {
    const Call& c = *calls[rank];
    if (!c.status.ok()) Die(absl::StrCat("rank ", rank, ": ", c.status.error_message()));
    if (c.response.plan().ranks_size() != 1 || c.response.plan().ranks(0).rank() != rank ||
        c.response.plan().ranks(0).items_size() == 0 || c.response.plan_digest() != digest ||
        digest.empty()) {
      Die(absl::StrCat("rank ", rank, " got a response that is not its part of one plan"));
    }
    latencies.push_back(c.latency_ms);
    bytes += c.response.ByteSizeLong();
  }
  std::sort(latencies.begin(), latencies.end());
  result.p50_ms = latencies[latencies.size() / 2];
  result.p99_ms = latencies[latencies.size() * 99 / 100];
  result.mean_response_kib = static_cast<double>(bytes) / kRanks / 1024.0;
  return result;
}

std::unique_ptr<v1::Metad::Stub> Stub(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  return v1::Metad::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

// 125 more members joined by RPC, so that the cluster has 1,024 GPU slots; then waits until
// the two agents have joined on their own.
void JoinTheRest(v1::Metad::Stub* coordinator, const std::string& models) {
  for (int i = 3; i < kRanks / kGpusPerNode; ++i) {
    grpc::ClientContext ctx;
    v1::JoinRequest join;
    join.mutable_node()->set_name(absl::StrFormat("n%03d", i));
    join.mutable_node()->set_address(absl::StrCat("127.0.0.1:", 20000 + i));
    join.mutable_node()->set_gpu_count(kGpusPerNode);
    join.mutable_node()->set_gpu_memory_bytes(80ull << 30);
    join.mutable_node()->add_roots(models);
    v1::JoinResponse joined;
    grpc::Status s = coordinator->Join(&ctx, join, &joined);
    if (!s.ok()) Die("join: " + s.error_message());
  }
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext ctx;
    v1::GetStatusResponse status;
    if (coordinator->GetStatus(&ctx, v1::GetStatusRequest(), &status).ok() &&
        status.members_size() == kRanks / kGpusPerNode) {
      return;
    }
    if (attempt > 100) Die("the agents did not join");
    ::usleep(100'000);
  }
}

// The 405B-shaped model, published as a node agent would after reading its headers.
void PublishLlama405B(v1::Metad::Stub* coordinator, const std::string& models) {
  const Skeleton skeleton = bench::Llama405BSkeleton();
  const Checkpoint checkpoint = bench::Llama405BCheckpoint(skeleton, models + "/llama-405b");
  v1::PublishModelRequest publish;
  v1::ModelRecord* record = publish.mutable_model();
  record->set_name("llama-405b");
  record->set_checkpoint_dir(checkpoint.dir);
  record->set_skeleton_json(SkeletonToJson(skeleton));
  record->set_registered_on("n000");
  for (const TensorLayout& t : checkpoint.tensors) LayoutToProto(t, record->add_tensors());
  grpc::ClientContext ctx;
  v1::PublishModelResponse published;
  grpc::Status s = PublishModel(*coordinator, &ctx, publish, &published);
  if (!s.ok()) Die("publish: " + s.error_message());
}

int Run(int argc, char** argv) {
  std::string metad = METALOAD_METAD_PATH;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--metad") metad = argv[i + 1];
  }
  char dir_template[] = "/tmp/metaload-getplan-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) Die("mkdtemp");
  const std::string dir = dir_template;
  const std::string models = dir + "/models";
  ::mkdir(models.c_str(), 0755);
  auto config = [&](const std::string& node, const std::string& coordinator) {
    const std::string path = absl::StrCat(dir, "/", node, ".yaml");
    WriteFile(path,
              absl::StrCat("node: ", node, "\nlisten: 127.0.0.1:0\ngpus: ", kGpusPerNode,
                           "\ngpu_memory: 80GiB\nmember_timeout: 10m\nroots: [", models, "]\n",
                           coordinator.empty() ? "" : absl::StrCat("coordinator: ", coordinator, "\n")));
    return path;
  };
  // Node names sort in rank order: n000 (the coordinator), n001, n002 (the agents), ...
  Daemon coordinator(metad, config("n000", ""), dir + "/n000.log");
  Daemon agent1(metad, config("n001", coordinator.address()), dir + "/n001.log");
  Daemon agent2(metad, config("n002", coordinator.address()), dir + "/n002.log");
  auto coord = Stub(coordinator.address());
  JoinTheRest(coord.get(), models);
  PublishLlama405B(coord.get(), models);

  auto a1 = Stub(agent1.address());
  auto a2 = Stub(agent2.address());
  std::string json = "{";
  double slowest = 0;
  for (const char* strategy : {"tp", "fsdp"}) {
    v1::GetPlanRequest request;
    request.set_model("llama-405b");
    request.set_world_size(kRanks);
    request.set_strategy(strategy);
    if (std::string(strategy) == "tp") {
      request.set_tp(8);
      request.set_pp(16);
    }
    const Result r = AskEveryRank(a1.get(), a2.get(), request, coordinator.pid());
    slowest = std::max(slowest, r.first_to_last_s);
    std::printf(
        "%-4s 1024 ranks via 2 agents: first request -> last rank %.3f s, p50 %.0f ms, p99 %.0f ms, "
        "coordinator %.2f CPU s, %.0f KiB per response\n",
        strategy, r.first_to_last_s, r.p50_ms, r.p99_ms, r.coordinator_cpu_s, r.mean_response_kib);
    absl::StrAppend(&json, "\"", strategy, "\": {\"first_to_last_s\": ", r.first_to_last_s,
                    ", \"p50_ms\": ", r.p50_ms, ", \"p99_ms\": ", r.p99_ms,
                    ", \"coordinator_cpu_s\": ", r.coordinator_cpu_s,
                    ", \"response_kib\": ", r.mean_response_kib, "}, ");
  }
  const double rss = PeakRssMib(coordinator.pid());
  std::printf("coordinator peak RSS %.0f MiB\n", rss);
  absl::StrAppend(&json, "\"getplan_1024_ranks_s\": ", slowest, ", \"coordinator_peak_rss_mib_1024\": ", rss,
                  "}");
  std::printf("%s\n", json.c_str());
  std::system(absl::StrCat("rm -rf ", dir).c_str());
  return 0;
}

}  // namespace
}  // namespace metaload

int main(int argc, char** argv) { return metaload::Run(argc, argv); }
