// shardcheck-sim: the simulator's command line (see sim/app/cli.h). `shardcheck-sim replay FILE ...`
// hands over to shardcheck-replay, built next to it from the property suite (cases/README.md).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "sim/app/cli.h"

namespace {

int replay(int argc, char** argv) {
  const std::string self = argv[0];
  const auto slash = self.rfind('/');
  const std::string tool =
      (slash == std::string::npos ? std::string() : self.substr(0, slash + 1)) +
      "shardcheck-replay";
  std::vector<char*> args{const_cast<char*>(tool.c_str())};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  if (slash == std::string::npos) {
    execvp(tool.c_str(), args.data());
  } else {
    execv(tool.c_str(), args.data());
  }
  std::cerr << "shardcheck-sim replay: cannot run " << tool << ": " << std::strerror(errno)
            << " (it is built with the tests: SC_BUILD_TESTS=ON)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "replay") return replay(argc, argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  return sc::app::cli_main(args, std::cout, std::cerr);
}
