// SC_REQUIRE_CUDA(): the first statement of every `_CUDA` test. Skips the test, naming the
// failed condition, unless this build has CUDA and LibTorch sees a device.
#pragma once

#include <gtest/gtest.h>

#include "sim/port/device.h"

#define SC_REQUIRE_CUDA()                                               \
  do {                                                                  \
    const std::string sc_reason = ::sc::sut::cpu_fallback_reason();     \
    if (!sc_reason.empty()) GTEST_SKIP() << "needs a GPU: " << sc_reason; \
  } while (0)
