#include "sim/input/args.h"

namespace sc::sim {

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

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? separator : "") + parts[i];
  return out;
}

}  // namespace sc::sim
