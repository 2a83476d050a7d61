#include "util/cli_args.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace metaload {

CliArgs::CliArgs(std::string command, std::string usage, std::string summary)
    : command_(std::move(command)), usage_(std::move(usage)), summary_(std::move(summary)) {}

void CliArgs::Flag(const std::string& name, const std::string& value_name, const std::string& help,
                   char alias) {
  specs_.push_back(Spec{name, value_name, help, alias, true});
}

void CliArgs::Switch(const std::string& name, const std::string& help) {
  specs_.push_back(Spec{name, "", help, 0, false});
}

const CliArgs::Spec* CliArgs::FindSpec(const std::string& name) const {
  for (const Spec& spec : specs_) {
    if (spec.name == name || (name.size() == 1 && spec.alias == name[0])) return &spec;
  }
  return nullptr;
}

absl::Status CliArgs::Parse(int argc, char** argv, int first) {
  auto error = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(command_, ": ", why, " (see ", command_, " --help)"));
  };
  bool only_positionals = false;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (only_positionals || arg == "-" || arg.empty() || arg[0] != '-') {
      positionals_.push_back(arg);
      continue;
    }
    if (arg == "--") {
      only_positionals = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    std::string name = arg.substr(absl::StartsWith(arg, "--") ? 2 : 1);
    std::optional<std::string> inline_value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const Spec* spec = FindSpec(name);
    if (spec == nullptr || (!absl::StartsWith(arg, "--") && name.size() != 1)) {
      return error(absl::StrCat("unknown flag ", arg));
    }
    if (!spec->takes_value) {
      if (inline_value) return error(absl::StrCat("--", spec->name, " takes no value"));
      values_[spec->name] = "true";
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc)
        return error(absl::StrCat("--", spec->name, " needs a value (", spec->value_name, ")"));
      inline_value = argv[++i];
    }
    if (values_.count(spec->name) > 0) return error(absl::StrCat("--", spec->name, " given twice"));
    values_[spec->name] = *inline_value;
  }
  return absl::OkStatus();
}

std::string CliArgs::Help() const {
  std::string out = absl::StrCat("usage: ", command_, " ", usage_, "\n\n", summary_, "\n");
  if (!specs_.empty()) absl::StrAppend(&out, "\nflags:\n");
  for (const Spec& spec : specs_) {
    std::string left =
        absl::StrCat("  ", spec.alias != 0 ? absl::StrCat("-", std::string(1, spec.alias), ", ") : "", "--",
                     spec.name, spec.takes_value ? absl::StrCat(" ", spec.value_name) : "");
    if (left.size() < 30)
      left.resize(30, ' ');
    else
      left += "\n" + std::string(30, ' ');
    // Continuation lines of a long help text line up under its first line.
    absl::StrAppend(&out, left, absl::StrReplaceAll(spec.help, {{"\n", "\n" + std::string(30, ' ')}}), "\n");
  }
  absl::StrAppend(&out, "  -h, --help                  this text\n");
  if (!epilog_.empty()) absl::StrAppend(&out, "\n", epilog_, epilog_.back() == '\n' ? "" : "\n");
  return out;
}

std::optional<std::string> CliArgs::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string CliArgs::GetOr(const std::string& name, const std::string& fallback) const {
  return Get(name).value_or(fallback);
}

absl::StatusOr<int64_t> CliArgs::GetInt(const std::string& name, int64_t fallback, int64_t min,
                                        int64_t max) const {
  auto text = Get(name);
  if (!text) return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value) || value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(command_, ": --", name, " \"", *text, "\" must be an integer from ", min, " to ", max));
  }
  return value;
}

absl::Status CliArgs::ExpectPositionals(size_t min, size_t max, const std::string& what) const {
  if (positionals_.size() < min || positionals_.size() > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(command_, ": expected ", what, " (see ", command_, " --help)"));
  }
  return absl::OkStatus();
}

std::string WrapWords(absl::string_view text, size_t width) {
  std::string out;
  size_t line = 0;
  for (absl::string_view word : absl::StrSplit(text, ' ')) {
    if (line > 0 && line + 1 + word.size() > width) {
      out.push_back('\n');
      line = 0;
    } else if (line > 0) {
      out.push_back(' ');
      ++line;
    }
    absl::StrAppend(&out, word);
    line += word.size();
  }
  return out;
}

}  // namespace metaload
