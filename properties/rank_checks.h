// What the properties that step ranks of a system under test alongside model::RankReference
// share: the claims, entry names, the check that logs the variant, the FMA mode of LibTorch's
// CPU kernels, the ranks to check, and one installed entry's claim against the reference.
#pragma once

#include <string>
#include <vector>

#include "model/layout.h"
#include "model/reference.h"
#include "model/shard.h"
#include "model/spec.h"
#include "properties/checks.h"
#include "sim/port/behaviour.h"
#include "sim/rig/rank_under_test.h"

namespace sc::props {

// What a numerical property claims.
enum class NumericClaim {
  kModelParams,  // after every step every owned piece equals the reference, bit for bit
  kState,        // exp_avg, exp_avg_sq, step and the fp32 master equal the reference
  kPlacement,    // the hybrid optimizer's placement equals model::plan_offload
  kUnchanged,    // every owned piece still holds its initial value (zero-lr schedules)
};

// Bit-for-bit equality (NaNs equal), or the first difference, naming the sides `got_name` (the
// system under test when empty) and `want_name` ("reference" when empty).
Violation compare_exact(const std::vector<float>& got, const std::vector<float>& want,
                        const std::string& what, const std::string& got_name = "",
                        const std::string& want_name = "");

// Every element of every param's exp_avg, exp_avg_sq and fp32 master of `instance`, gathered
// from the pieces of `loaded` (every DP rank of `loaded_case`, by rank), against the same from
// `saved` (every DP rank of `saved_case`), bit for bit, and every piece's step count: the first
// difference, named "<prefix><param> after a <format> round trip: ...".
Violation round_trip_difference(const model::CaseSpec& saved_case,
                                const model::CaseSpec& loaded_case, model::Instance instance,
                                const std::vector<const rig::RankUnderTest*>& saved,
                                const std::vector<const rig::RankUnderTest*>& loaded,
                                const std::string& prefix, const std::string& format);

// "dense rank 1 step 2 w piece [0, 8)".
std::string entry_name(const model::CaseSpec& c, const model::RankPlan& plan, size_t g, size_t i,
                       int step);

// RC_ASSERTs that `v` is empty, logging it with the variant's name.
void check(const Violation& v, const sut::Behaviour& b);

// How torch's CPU AdamW kernels round here (fails the property if no emulation reproduces them).
model::TorchCpuKernels torch_kernels();

// Calls f(instance, rank, layouts) for every checked rank of both instances.
template <typename F>
void for_checked_ranks(const model::CaseSpec& c, F f) {
  const auto layouts = model::full_param_layout(c);
  for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
    if (!model::instance_present(c, inst)) continue;
    for (int64_t r : ranks_to_check(c, layouts, inst)) f(inst, r, layouts);
  }
}

// Installed entry (g, i) after step `k` (1-based) under `claim`: the model piece, the unchanged
// piece or the optimizer state, against the reference.
void check_entry(const model::CaseSpec& c, const model::RankPlan& plan,
                 const model::RankReference& ref, const rig::RankUnderTest& rig, size_t g, size_t i,
                 int k, NumericClaim claim, const sut::Behaviour& b);

}  // namespace sc::props
