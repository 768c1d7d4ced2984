// shardcheck-sim: the simulator's command line (see sim/cli.h).
#include <iostream>

#include "sim/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return sc::sim::cli_main(args, std::cout, std::cerr);
}
