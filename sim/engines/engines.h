// Our own offload engines for the port's HybridDeviceOptimizer: faster host paths that are not
// Megatron code and so live beside the port, plugged in through sut::HostOffloadEngine. A
// variant asks for one with its engine flags (sut::Behaviour::fused_host_adamw and
// pipeline_chunk); whoever builds a HybridDeviceOptimizer passes engine_for(its behaviour).
#pragma once

#include <memory>

#include "sim/port/behaviour.h"
#include "sim/port/hybrid_optimizer.h"

namespace sc::engines {

// The engine `behaviour` asks for: the pipelined offload over the fused host AdamW when
// pipeline_chunk > 0, the fused host AdamW alone when fused_host_adamw, else nullptr
// (Megatron's own flow, torch::optim::AdamW on the host).
std::unique_ptr<sut::HostOffloadEngine> engine_for(const sut::Behaviour& behaviour);

}  // namespace sc::engines
