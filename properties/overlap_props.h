// DDP's param all-gather overlapped with the forward pass, on real code only (the port has no
// forward pre-hooks): the same training steps with overlap_param_gather and without
// (sim/rig/overlap_call.h).
#pragma once

#include <rapidcheck.h>

#include "properties/property.h"
#include "sim/port/behaviour.h"
#include "sim/rig/overlap_call.h"

namespace sc::props {

// A drawn run: 2 to 4 parameters (bf16, or fp32 in one of three), registered in draw order and
// called by the forward in a drawn order; a bucket per parameter, or buckets of a drawn size; 2 or
// 3 steps (a bucket group's stale dispatch shows at the next forward).
rc::Gen<rig::OverlapCall> overlap_training_call();

// Whether the forward calls the modules in another order than they were registered in.
bool forward_order_differs(const rig::OverlapCall& call);

// The claim on `call`, against the tree of SC_MEGATRON_TREE: neither run raises, and after every
// step the overlapped run's parameters equal the synchronous run's bit for bit.
void run_overlap_property(const rig::OverlapCall& call, const sut::Behaviour& b);

// DdpOverlap.ParamGatherOverlappedWithTheForwardEqualsSynchronous, as the registry lists it.
Property overlap_property();

}  // namespace sc::props
