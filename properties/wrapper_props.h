// The optimizers Megatron's factory builds besides the distributed optimizer, on real code only
// (the port has none of them): Float16OptimizerWithFloat16Params, FP32Optimizer, and the stubs
// of a frozen rank, driven as the trainer drives them (sim/rig/wrapper_call.h).
#pragma once

#include <rapidcheck.h>

#include <string>
#include <vector>

#include "properties/property.h"
#include "sim/port/behaviour.h"
#include "sim/rig/wrapper_call.h"

namespace sc::props {

// A drawn lifecycle: the wrapper the options ask for, frozen or not, 1 to 3 parameters, 1 to 3
// steps, the checkpoint saved after 0 to all of them, resumed with the optimizer state (after at
// least one step: a checkpoint saved before the first holds none) or the weights only.
rc::Gen<rig::WrapperCall> wrapper_lifecycle_call();

// One parameter: bf16 (fp16 under the fp16 wrapper) in two of three draws where `may_be_half`,
// else fp32; an expert in half the draws where `may_be_expert`; one or two dimensions; values
// k / 64, exact in 16 bits.
rc::Gen<rig::WrapperParam> wrapper_param(bool may_be_half, bool may_be_expert);
// The grads of `steps` steps, one list per parameter of its size: k / 1024 in [-4, 4].
rc::Gen<std::vector<std::vector<std::vector<float>>>> wrapper_grads(
    const std::vector<rig::WrapperParam>& params, size_t steps);
// The first element where `got` and `want` differ in their bits, named ("p1[0] is x, not y");
// "" when none does.
std::string first_difference(const std::vector<std::vector<float>>& got,
                             const std::vector<std::vector<float>>& want);

// Whether the chain `call` builds has the experts' optimizer beside the dense one; and whether
// that dense one is then a stub.
bool has_expert_optimizer(const rig::WrapperCall& call);
bool has_dense_stub_beside_experts(const rig::WrapperCall& call);
// The dense and the experts' DistributedOptimizer chained over one DDP chunk.
bool has_distributed_chain_with_experts(const rig::WrapperCall& call);

// The claim of OptimizerWrappers.TrainerLifecycleResumesAsNoInterruption on `call`, against the
// tree of SC_MEGATRON_TREE: no call raises; the factory builds the class the options ask for, a
// stub exactly when every parameter is frozen; the resumed run equals its reference bit for bit;
// a stub leaves every parameter as it was.
void run_wrapper_lifecycle_property(const rig::WrapperCall& call, const sut::Behaviour& b);

// OptimizerWrappers.TrainerLifecycleResumesAsNoInterruption, as the registry lists it.
Property wrapper_lifecycle_property();

}  // namespace sc::props
