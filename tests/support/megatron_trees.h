// The Megatron trees the real-code tests make beside those scripts/megatron-trees unpacks.
// Needs SC_MEGATRON_TREES and SC_SOURCE_DIR defined by the test's build.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tests/support/command.h"

namespace sc::testing {

// The name, under SC_MEGATRON_TREES, of d8b71082 with the seed fix and every finding's patch but
// `finding`'s ("F13"): the tree with every patch, copied, that patch reversed.
inline std::string every_patch_but(const std::string& finding) {
  const std::string name = "d8b71082-pr6982-all-but-" + finding;
  const std::string trees = SC_MEGATRON_TREES;
  const auto r =
      run_command("cd " + trees + " && rm -rf " + name + " && cp -r d8b71082-pr6982-all " + name +
                  " && cd " + name + " && GIT_CEILING_DIRECTORIES=" + trees + " git apply -R " +
                  SC_SOURCE_DIR + "/patches/" + finding + "-*.patch 2>&1");
  EXPECT_EQ(r.status, 0) << r.output;
  return name;
}

}  // namespace sc::testing
