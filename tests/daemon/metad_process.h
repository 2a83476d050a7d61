// A real `metad` process for tests that speak gRPC to it: started with a node config (and
// optionally under a wrapper such as `prlimit`), its "listening on" address read from stdout,
// stopped with SIGTERM by the destructor, which expects a clean exit.
#ifndef METALOAD_TESTS_DAEMON_METAD_PROCESS_H_
#define METALOAD_TESTS_DAEMON_METAD_PROCESS_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace metaload::testing {

class MetadProcess {
 public:
  // `wrapper` runs before metad ("prlimit", "--nofile=100:100"); stderr goes to `log_path`
  // (or /dev/null).
  explicit MetadProcess(const std::string& config_path, std::vector<std::string> wrapper = {},
                        const std::string& log_path = "/dev/null") {
    int out[2];
    if (::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(log_fd, STDERR_FILENO);
      std::vector<std::string> args = wrapper;
      args.insert(args.end(), {METALOAD_METAD_PATH, "--node-config", config_path});
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    FILE* stream = ::fdopen(out[0], "r");
    char line[256] = {0};
    if (std::fgets(line, sizeof(line), stream) != nullptr) {
      std::string text(line);
      size_t at = text.find("listening on ");
      if (at != std::string::npos) address_ = text.substr(at + 13, text.find_last_not_of("\n") - at - 12);
    }
    std::fclose(stream);
  }
  ~MetadProcess() {
    if (pid_ <= 0 || exited_) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "metad did not stop cleanly";
  }
  MetadProcess(const MetadProcess&) = delete;
  MetadProcess& operator=(const MetadProcess&) = delete;

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // Its resident memory now (VmRSS), in bytes.
  uint64_t ResidentBytes() const {
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
    }
    ADD_FAILURE() << "no VmRSS for metad";
    return 0;
  }
  // The exit code once the process has ended by itself within `seconds`; -1 if it is still
  // running then (it is then stopped by the destructor).
  int ExitCodeWithin(int seconds) {
    for (int i = 0; i < seconds * 10; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      ::usleep(100'000);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string address_;
};

}  // namespace metaload::testing

#endif  // METALOAD_TESTS_DAEMON_METAD_PROCESS_H_
