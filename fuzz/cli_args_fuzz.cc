// Fuzz target: shardcheck-sim's command line. The input is the argument list, one argument per
// line. Parsing must give options or a message naming the argument, never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>
#include <vector>

#include "sim/app/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      args.emplace_back();
    } else {
      args.back() += static_cast<char>(data[i]);
    }
  }
  if (args.size() > 64) return 0;  // a command line, not a file
  auto parsed = sc::app::parse_cli(args);
  if (auto* o = std::get_if<sc::app::CliOptions>(&parsed)) {
    if (o->world.pp < 1 || o->world.dp < 1 || o->world.ep < 1 || o->world.vpp < 1 ||
        o->world.tp < 1 || o->offload_fraction < 0 || o->offload_fraction > 1 ||
        o->variants.empty() || o->args != args) {
      std::abort();
    }
  } else if (std::get<std::string>(parsed).empty()) {
    std::abort();
  }
  return 0;
}
