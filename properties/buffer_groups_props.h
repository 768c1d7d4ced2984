// Where DDP's buffers take their process groups from, on real code only: handed a
// ProcessGroupCollection (as DistributedDataParallel hands its own) or, built by a direct caller
// without one, read from parallel_state. The port builds no buffer from process groups.
#pragma once

#include "properties/gen/case_inputs.h"
#include "sim/port/behaviour.h"

namespace sc::props {

// Builds every checked rank of the case's instances twice, with the buffers handed their groups
// and with them read from parallel_state (initialized with the same groups), and asserts that the
// two constructions observe the same: ranges, installed tensors, index map and outcome.
void run_buffer_groups_property(const CaseInputs& in, const sut::Behaviour& b);

// A case (gen::case_only) as a direct caller builds it: buffers_from_parallel_state set.
CaseInputs direct_caller_case();

inline constexpr const char* kBufferGroupsName =
    "DdpBuffers.GroupsFromParallelStateBuildWhatHandedGroupsBuild";
inline constexpr const char* kBufferGroupsClaim =
    "buffers built by a direct caller without a pg_collection, their data-parallel and "
    "tensor-parallel groups read from parallel_state (Megatron's own module, initialized with "
    "the case's groups), give every checked rank the construction that buffers handed the same "
    "groups give (as DistributedDataParallel hands its own): the same outcome, ranges, "
    "installed tensors and index map";
inline constexpr const char* kBufferGroupsNotOnPort =
    "the port builds no buffer from process groups: it has no parallel_state to read them from";

}  // namespace sc::props
