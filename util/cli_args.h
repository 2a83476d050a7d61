// A small command-line parser for metad and each metactl subcommand: flags with values
// (`--gpus 16`, `--gpus=16`), switches (`--json`), one-letter aliases (`-o`), positionals,
// and a generated --help. Strict: an unknown flag or a missing value is an error, so a
// typo never silently changes what a command does.
//
//   CliArgs args("metactl plan", "MODEL --gpus N [flags]", "Plans a model offline.");
//   args.Flag("gpus", "N", "number of GPUs (ranks)");
//   ML_RETURN_IF_ERROR(args.Parse(argc, argv, 2));
//   if (args.help()) { std::cout << args.Help(); return 0; }
#ifndef METALOAD_UTIL_CLI_ARGS_H_
#define METALOAD_UTIL_CLI_ARGS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace metaload {

class CliArgs {
 public:
  CliArgs(std::string command, std::string usage, std::string summary);

  // A flag that takes a value. `alias` is an optional one-letter short form ('o' -> -o).
  void Flag(const std::string& name, const std::string& value_name, const std::string& help, char alias = 0);
  void Switch(const std::string& name, const std::string& help);
  // Free text printed after the flags in --help (examples, environment variables).
  void Epilog(const std::string& text) { epilog_ = text; }

  // Parses argv[first..argc). InvalidArgument naming the flag and pointing to --help.
  absl::Status Parse(int argc, char** argv, int first);

  bool help() const { return help_; }
  std::string Help() const;

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> Get(const std::string& name) const;
  std::string GetOr(const std::string& name, const std::string& fallback) const;
  // InvalidArgument naming the flag if absent or not an integer in [min, max].
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  const std::vector<std::string>& positionals() const { return positionals_; }
  // InvalidArgument unless there are between min and max positionals.
  absl::Status ExpectPositionals(size_t min, size_t max, const std::string& what) const;

 private:
  struct Spec {
    std::string name, value_name, help;
    char alias = 0;
    bool takes_value = true;
  };
  const Spec* FindSpec(const std::string& name) const;

  std::string command_, usage_, summary_, epilog_;
  std::vector<Spec> specs_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positionals_;
  bool help_ = false;
};

// `text` with each space that would let a line pass `width` characters made a line break, for
// help generated from lists (the strategies, the architectures) to read as if written by hand.
std::string WrapWords(absl::string_view text, size_t width);

}  // namespace metaload

#endif  // METALOAD_UTIL_CLI_ARGS_H_
