#include "sim/input/args.h"

#include <charconv>

namespace sc::input {

std::variant<std::vector<Arg>, std::string> split_args(const std::vector<std::string>& args,
                                                       const std::set<std::string>& value_options,
                                                       const std::set<std::string>& flags) {
  std::vector<Arg> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      out.push_back({"help", ""});
      continue;
    }
    if (arg.empty() || arg[0] != '-') {
      out.push_back({"", arg});
      continue;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) return "unknown argument '" + arg + "'";
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (flags.count(name)) {
      if (eq != std::string::npos) return "--" + name + " takes no value";
      out.push_back({name, ""});
    } else if (!value_options.count(name)) {
      return "unknown option '--" + name + "'";
    } else if (eq != std::string::npos) {
      out.push_back({name, arg.substr(eq + 1)});
    } else if (i + 1 < args.size()) {
      out.push_back({name, args[++i]});
    } else {
      return "--" + name + " needs a value (--" + name + "=VALUE or --" + name + " VALUE)";
    }
  }
  return out;
}

std::variant<std::vector<Arg>, std::string> split_args(const std::vector<std::string>& args,
                                                       const std::vector<OptionText>& options) {
  std::set<std::string> value_options, flags;
  for (const OptionText& o : options) {
    if (*o.name) (o.placeholder ? value_options : flags).insert(o.name);
  }
  return split_args(args, value_options, flags);
}

namespace {

// Whether `option` is shown on the `--help` line of the one above it.
bool shares_line(const OptionText& option) { return *option.name && !option.help; }

}  // namespace

std::string option_help(const std::vector<OptionText>& options, HelpLayout layout) {
  const std::string indent(2 + layout.width, ' ');
  std::string out;
  for (size_t first = 0; first < options.size(); ++first) {
    if (!*options[first].name) continue;
    if (options[first].heading) out += std::string(options[first].heading) + "\n";
    std::string left;
    for (size_t i = first; i < options.size() && (i == first || shares_line(options[i])); ++i) {
      left += (i == first ? "--" : " --") + std::string(options[i].name);
      if (options[i].placeholder) left += layout.separator + std::string(options[i].placeholder);
    }
    const std::string help = options[first].help ? options[first].help : "";
    while (first + 1 < options.size() && shares_line(options[first + 1])) ++first;
    left.resize(left.size() < layout.width ? layout.width : left.size() + 3, ' ');
    out += "  " + left;
    for (const char ch : help) out += ch == '\n' ? "\n" + indent : std::string(1, ch);
    out += "\n";
  }
  return out;
}

namespace {

// `text` as a whole decimal number of type T, else nothing.
template <typename T>
std::optional<T> parse_whole(const std::string& text) {
  T value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<int64_t> parse_integer(const std::string& text, int64_t min, int64_t max) {
  const auto value = parse_whole<int64_t>(text);
  if (!value || *value < min || *value > max) return std::nullopt;
  return value;
}

std::optional<uint64_t> parse_unsigned(const std::string& text) {
  return parse_whole<uint64_t>(text);
}

std::vector<std::string> joined_value_flags(const std::vector<std::string>& args,
                                            const std::set<std::string>& value_flags) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (value_flags.count(arg) && i + 1 < args.size()) arg += "=" + args[++i];
    out.push_back(arg);
  }
  return out;
}

const std::set<std::string> kGoogleTestValueFlags{
    "--gtest_filter",      "--gtest_repeat",           "--gtest_output",  "--gtest_random_seed",
    "--gtest_color",       "--gtest_stack_trace_depth", "--gtest_flagfile"};

const std::set<std::string> kGoogleBenchmarkValueFlags{
    "--benchmark_filter",      "--benchmark_min_time",   "--benchmark_repetitions",
    "--benchmark_format",      "--benchmark_out",        "--benchmark_out_format",
    "--benchmark_color",       "--benchmark_time_unit",  "--benchmark_context",
    "--benchmark_perf_counters", "--v"};

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? separator : "") + parts[i];
  return out;
}

}  // namespace sc::input
