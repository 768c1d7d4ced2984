// The differential property between the two systems under test: the port under the variant
// under test and real Megatron-Core code from a tree (SC_MEGATRON_TREE), on the same case, from
// the same initial values, through the same steps.
#pragma once

#include <optional>
#include <string>

#include "model/spec.h"
#include "properties/gen/step_gen.h"
#include "sim/port/behaviour.h"
#include "sim/rig/rank_under_test.h"

namespace sc::props {

// The first difference between two constructions (every field of rig::RankObservation), or
// nothing; `first` and `second` name the two in it.
std::optional<std::string> construction_difference(const rig::RankObservation& port,
                                                   const rig::RankObservation& real,
                                                   const char* first = "port",
                                                   const char* second = "real code");
// The first difference between what two constructed ranks hold now: every installed entry's
// model piece, optimizer piece, state and placement, the group hyper-parameters, the
// sub-optimizer counts and (`with_model_values`) every model parameter, bit for bit; or nothing.
std::optional<std::string> holding_difference(const rig::RankUnderTest& port,
                                              const rig::RankUnderTest& real,
                                              bool with_model_values = true);

// Builds every checked rank of both instances of `spec` (no Transformer Engine) on the port
// under `behaviour` and on `tree`, from the same initial values, steps both through `schedule`
// and RC_ASSERTs that the constructions agree and, after every step, what they hold agrees.
void run_port_vs_real_code(const model::CaseSpec& spec, const gen::Schedule& schedule,
                           const sut::Behaviour& behaviour, const rig::MegatronTarget& tree);

}  // namespace sc::props
