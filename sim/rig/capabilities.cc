#include "sim/rig/capabilities.h"

#include <sstream>

namespace sc::rig {

const std::vector<CapabilityInfo>& all_capabilities() {
  static const std::vector<CapabilityInfo> kAll = {
      {Capability::kTrainingLoop, "the training loop",
       "the rank built under DDP's grad hooks; gradients from a forward and backward pass", true,
       ""},
      {Capability::kStreamRaces, "recorded stream races",
       "every op of a step recorded with its stream; the accesses CUDA's order leaves unordered",
       true, ""},
      {Capability::kChosenStreamOrder, "a chosen stream order",
       "the step's work run in an order the streams allow, chosen by a policy", false,
       "the worker's device layer runs streams in program order; its stream-order checker "
       "records only what orders them"},
      {Capability::kPinnedCopyRecords, "pinned-copy records",
       "whether each non-blocking copy had pinned host memory", false,
       "the worker's device layer pins nothing, so no copy's pinned memory exists there"},
      {Capability::kDistributedCheckpoints, "distributed checkpoints",
       "Megatron's resume from a distributed checkpoint: sharded_state_dict, in-place fill, "
       "load_state_dict (the port in fully_sharded_model_space, the real code in "
       "dp_reshardable, Megatron's default)",
       true, ""},
      {Capability::kNonTensorState, "non-tensor optimizer state",
       "non-tensor entries (`found_inf: bool`) put in the inner optimizer's per-param state", true,
       ""},
      {Capability::kGatheredCheckpoints, "gathered checkpoints",
       "a DP group saved and loaded in dp_zero_gather_scatter or fully_reshardable; the formats "
       "gather over the DP group, so against real code they run on real ranks (one worker "
       "process per DP rank over Gloo, dp 2 or 4), not on one worker emulating the ranks",
       true, ""},
  };
  return kAll;
}

const CapabilityInfo& capability(Capability id) {
  return all_capabilities().at(static_cast<size_t>(id));
}

std::string not_on_real_code_reason(Capability id) {
  const CapabilityInfo& c = capability(id);
  return std::string("needs ") + c.name + ": " + c.why_not;
}

void not_served_by_real_code(Capability id) {
  throw NotRunAgainstRealCode(not_on_real_code_reason(id));
}

void gathered_checkpoints_need_real_ranks() {
  throw NotRunAgainstRealCode(
      "a gathered checkpoint of ranks that one worker emulates: the formats gather over the DP "
      "group, which runs on real ranks only (one worker per DP rank)");
}

std::string capability_table_markdown() {
  std::ostringstream out;
  out << "| capability | what it serves | port | real Megatron |\n| --- | --- | --- | --- |\n";
  for (const CapabilityInfo& c : all_capabilities()) {
    out << "| " << c.name << " | " << c.what << " | yes | "
        << (c.on_real_code ? std::string("yes") : std::string("no: ") + c.why_not) << " |\n";
  }
  return out.str();
}

}  // namespace sc::rig
