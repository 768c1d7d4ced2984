// The bodies of the model-versus-port properties, shared by the RC_GTEST_PROPs and by the
// tests that run them against known-bad variants and check what RapidCheck shrinks to.
#pragma once

#include "model/spec.h"
#include "sim/port/behaviour.h"

namespace sc::props {

// Which claim a diff property makes.
enum class DiffClaim {
  kRanges,                // port ranges == model ranges, every checked rank
  kInstalled,             // installed tensors match the shard plan (leaf, dtype, aliasing)
  kConstructs,            // construction succeeds on every checked rank
  kUpstreamFailingRanks,  // failing ranks == model::upstream_failing_ranks
};

// Runs the port for the checked ranks of both instances of `spec` under `behaviour`, classifies
// the case and RC_ASSERTs `claim`, logging the first violation.
void run_diff_property(const model::CaseSpec& spec, const sut::Behaviour& behaviour,
                       DiffClaim claim);

}  // namespace sc::props
