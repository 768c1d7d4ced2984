// One command-line convention for every shardcheck binary: `--help` (or `-h`) prints the usage
// and exits 0; an option that takes a value accepts `--name=value` and `--name value` alike; a
// flag stands alone; anything not starting with '-' is positional. Exit status: 0 success, 1 a
// check failed, 2 bad input. Standard C++ only.
#pragma once

#include <set>
#include <string>
#include <variant>
#include <vector>

namespace sc::sim {

// The exit statuses of every binary.
constexpr int kExitOk = 0;
constexpr int kExitCheckFailed = 1;
constexpr int kExitBadInput = 2;

// One argument: an option (`name` without its dashes, `value` empty for a flag) or a positional
// one (`name` empty, `value` the argument).
struct Arg {
  std::string name;
  std::string value;
  bool positional() const { return name.empty(); }
};

// `args` in order, each option joined with its value; "help" is always a known flag. Or the
// message naming the first bad argument: an unknown option, a value given to a flag, an option
// without its value.
std::variant<std::vector<Arg>, std::string> split_args(const std::vector<std::string>& args,
                                                       const std::set<std::string>& value_options,
                                                       const std::set<std::string>& flags);

// `args` with each of `value_flags` given as `--name value` joined into `--name=value`, for
// binaries whose option parser (GoogleTest's, Google Benchmark's) reads only the joined form.
std::vector<std::string> joined_value_flags(const std::vector<std::string>& args,
                                            const std::set<std::string>& value_flags);

// `parts` joined with `separator` between them, for messages ("a, b, c").
std::string join(const std::vector<std::string>& parts, const char* separator);

}  // namespace sc::sim
