// One command-line convention for every shardcheck binary: `--help` (or `-h`) prints the usage
// and exits 0; an option that takes a value accepts `--name=value` and `--name value` alike; a
// flag stands alone; anything not starting with '-' is positional. Exit status: 0 success, 1 a
// check failed, 2 bad input, a message naming the option. Each binary has one option table
// (`Option`), from which the splitter's names and the `--help` lines come. Standard C++ only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace sc::input {

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

// One option as given, for its handler: the name without dashes, the value (empty for a flag or
// the argument itself for a positional one).
struct OptionArg {
  const std::string& name;
  const std::string& value;
  // The message for a bad value: "--name=value: why".
  std::string bad(const std::string& why) const { return "--" + name + "=" + value + ": " + why; }
};

// One entry of a binary's option table. The splitter's value options and flags, the `--help`
// lines and the parsing all come from the one table, so that they cannot drift apart.
template <typename Target>
struct Option {
  const char* name;         // without the dashes; "" takes the positional arguments
  const char* placeholder;  // the value's name in `--help` ("N", "FILE"); nullptr: a flag
  // The `--help` text, '\n' between its lines; nullptr: on the `--help` line of the entry above.
  const char* help;
  // Applies the option to `target`: the message when its value is bad, else nothing.
  std::optional<std::string> (*apply)(const OptionArg& arg, Target& target);
  const char* heading = nullptr;  // a line `--help` prints above this entry
};

// What `--help` and the splitter read of a table entry.
struct OptionText {
  const char* name;
  const char* placeholder;
  const char* help;
  const char* heading;
};

// How `--help` lays out a table: each option with `separator` before its placeholder
// (`--dp=N` or `--tree DIR`), its text from column `width` past the two-space indent (three
// spaces after a longer one), continuation lines there too.
struct HelpLayout {
  size_t width;
  char separator;
};

// The texts of `table`'s entries.
template <typename Table>
std::vector<OptionText> texts_of(const Table& table) {
  std::vector<OptionText> out;
  for (const auto& o : table) out.push_back({o.name, o.placeholder, o.help, o.heading});
  return out;
}

// split_args with the value options and flags of `options`.
std::variant<std::vector<Arg>, std::string> split_args(const std::vector<std::string>& args,
                                                       const std::vector<OptionText>& options);

// The `--help` lines of `options`, one per option (or per run of options sharing a line).
std::string option_help(const std::vector<OptionText>& options, HelpLayout layout);

// Splits `args` by `table` and applies each argument in order to `target` with its entry's
// handler (a positional one with the entry named "", unexpected without one). Stops at `--help`,
// setting `help`. The message naming the first bad argument, else nothing.
template <typename Table, typename Target>
std::optional<std::string> apply_args(const std::vector<std::string>& args, const Table& table,
                                      Target& target, bool& help) {
  auto split = split_args(args, texts_of(table));
  if (auto* why = std::get_if<std::string>(&split)) return *why;
  for (const Arg& a : std::get<std::vector<Arg>>(split)) {
    if (a.name == "help") {
      help = true;
      return std::nullopt;
    }
    const auto entry = std::find_if(std::begin(table), std::end(table),
                                    [&](const auto& o) { return a.name == o.name; });
    if (entry == std::end(table)) return "unexpected argument '" + a.value + "'";
    if (auto why = entry->apply(OptionArg{a.name, a.value}, target)) return why;
  }
  return std::nullopt;
}

// A flag's handler: sets `Target::*field`.
template <typename Target, bool Target::*field>
std::optional<std::string> set_flag(const OptionArg&, Target& target) {
  target.*field = true;
  return std::nullopt;
}

// A text option's handler: stores the value in `Target::*field`.
template <typename Target, std::string Target::*field>
std::optional<std::string> set_text(const OptionArg& arg, Target& target) {
  target.*field = arg.value;
  return std::nullopt;
}

// The decimal integer `text` when it lies in [min, max], else nothing.
std::optional<int64_t> parse_integer(const std::string& text, int64_t min, int64_t max);
// The decimal integer `text` from 0 to 2^64 - 1 (a seed), else nothing.
std::optional<uint64_t> parse_unsigned(const std::string& text);

// `args` with each of `value_flags` given as `--name value` joined into `--name=value`, for
// binaries whose option parser (GoogleTest's, Google Benchmark's) reads only the joined form.
std::vector<std::string> joined_value_flags(const std::vector<std::string>& args,
                                            const std::set<std::string>& value_flags);

// The option tables of the binaries whose options GoogleTest and Google Benchmark parse: the
// flags of theirs that take a value, which joined_value_flags joins.
extern const std::set<std::string> kGoogleTestValueFlags;
extern const std::set<std::string> kGoogleBenchmarkValueFlags;

// `parts` joined with `separator` between them, for messages ("a, b, c").
std::string join(const std::vector<std::string>& parts, const char* separator);

}  // namespace sc::input
