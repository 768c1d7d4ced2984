// The benchmarks' peers' environment for the tests that need it (its DeepSpeed, its psutil).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>

// Declares `const std::string var`, the interpreter of the peers' environment (SC_PEERS_PYTHON,
// which scripts/test and scripts/bench set), or ends the test: skipped where it is not set,
// failed where SC_REQUIRE_PEERS says it must be (scripts/test sets both).
#define SC_PEERS_PYTHON_OR_SKIP(var)                                                            \
  const char* var##_env = std::getenv("SC_PEERS_PYTHON");                                       \
  if (var##_env == nullptr || *var##_env == '\0') {                                             \
    if (std::getenv("SC_REQUIRE_PEERS") != nullptr) {                                           \
      FAIL() << "SC_PEERS_PYTHON is not set: scripts/python-env --peers makes the environment"; \
    }                                                                                           \
    GTEST_SKIP() << "no peers' environment (SC_PEERS_PYTHON): scripts/test sets it";            \
  }                                                                                             \
  const std::string var = var##_env
