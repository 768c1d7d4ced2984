// Every tensor shape an optimizer can be handed, not only the distributed optimizer's flat 1-D
// shards: multi-dimensional contiguous tensors, strided views, channels-last tensors, zero-size
// tensors and sizes around the kernels' vector widths, chunks and parallel tasks, element by
// element against a reference.
#pragma once

#include "sim/port/behaviour.h"

namespace sc::props {

// The port's FusedAdam (Transformer Engine's) on drawn shapes against the model's FusedAdam
// order, bit for bit; a strided parameter or grad raises multi-tensor apply's error and changes
// no parameter.
void run_fused_adam_shapes_property(const sut::Behaviour& behaviour);

// The fused host AdamW of our offload engines against LibTorch's torch::optim::AdamW on drawn
// shapes, strided views included (they take LibTorch's own step), bit for bit: parameters and
// both moments.
void run_fused_host_adamw_shapes_property(const sut::Behaviour& behaviour);

// The hybrid optimizer as a library user calls it, on whole parameters of drawn shapes (no
// distributed optimizer): the offload split equals the model's plan and after every step every
// parameter equals the model's AdamW in the order of the sub-optimizer that steps it.
void run_hdo_whole_params_property(const sut::Behaviour& behaviour);

}  // namespace sc::props
