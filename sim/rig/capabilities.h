// What a system under test serves beyond the seam's core (sim/rig/rank_under_test.h: build,
// step, observe, and save and load of the optimizer's own state dict), as data: one row per named
// capability, the targets that serve it, and why the real-code target does not where it does not.
// Properties name the capabilities they need (properties/registry.h); whether a property runs
// against a target, the NOT RUN reasons and the docs' "against real Megatron" column follow from
// this table and those needs, and a target that is asked for what it does not serve throws
// NotRunAgainstRealCode with the same words.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace sc::rig {

enum class Capability {
  kTrainingLoop,            // Target::training_loop and RankUnderTest::backward
  kStreamRaces,             // RankUnderTest::stream_races of a recorded schedule
  kChosenStreamOrder,       // a schedule run in a chosen stream order (StreamSchedule::policy)
  kPinnedCopyRecords,       // RankUnderTest::pageable_copies
  kDistributedCheckpoints,  // RankUnderTest::load_distributed
  kNonTensorState,          // RankUnderTest::add_non_tensor_state
  kGatheredCheckpoints,     // rig::save_gathered and RankUnderTest::load_gathered
};

// One row of the table.
struct CapabilityInfo {
  Capability id;
  const char* name;         // "distributed checkpoints"
  const char* what;         // what serving it means, in one line
  bool on_real_code;        // whether the megatron target serves it (the port serves every one)
  const char* why_not;      // when it does not: why, in one line
};

// Every capability, in enum order.
const std::vector<CapabilityInfo>& all_capabilities();
const CapabilityInfo& capability(Capability id);
// "needs distributed checkpoints: the Megatron worker does not serve ...".
std::string not_on_real_code_reason(Capability id);

// Thrown where a case needs what the real-code worker does not serve: the case cannot run against
// real Megatron code.
struct NotRunAgainstRealCode : std::logic_error {
  using std::logic_error::logic_error;
};

// Throws NotRunAgainstRealCode with capability(id)'s reason.
[[noreturn]] void not_served_by_real_code(Capability id);

// Throws NotRunAgainstRealCode: a gathered checkpoint asked of one worker's emulated ranks.
[[noreturn]] void gathered_checkpoints_need_real_ranks();

// The table as markdown (capability, what, port, real Megatron), for docs/real-megatron.md.
std::string capability_table_markdown();

}  // namespace sc::rig
