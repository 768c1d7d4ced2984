// Port of the training-loop half of Megatron's DistributedDataParallel
// (distributed_data_parallel.py): the backward post-hook registered on each parameter's
// gradient accumulator (`_make_backward_post_hook`) and `zero_grad_buffer`. The buffer creation
// half is sim/port/param_buffer.h. No grad reduce-scatter is dispatched: one process holds one
// rank, whose gradient is taken as the reduced one (Megatron's `no_sync`).
#pragma once

#include <memory>
#include <vector>

#include "sim/port/behaviour.h"
#include "sim/port/param_buffer.h"
#include "sim/port/torch_pch.h"

namespace sc::sut {

// The grad accumulators DDP keeps alive (`self.grad_accs`) with the hook on each.
class DdpGradHooks {
 public:
  // Registers, on the gradient accumulator of every parameter of `params` that requires grad,
  // the hook that adds `.grad` into `main_grad` (unless `grad_added_to_main_grad`) and sets
  // `.grad` to None. `params` must outlive the hooks; their `main_grad` is set by then.
  explicit DdpGradHooks(std::vector<ModelParam>& params);
  ~DdpGradHooks();
  DdpGradHooks(const DdpGradHooks&) = delete;
  DdpGradHooks& operator=(const DdpGradHooks&) = delete;

 private:
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accs_;
};

// `DistributedDataParallel.zero_grad_buffer` of one model chunk's buffers: every parameter's
// `grad_added_to_main_grad` back to false, then each buffer's grad data zeroed.
void zero_grad_buffer(std::vector<ModelParam>& params,
                      const std::vector<const ParamAndGradBuffer*>& buffers,
                      const Behaviour& behaviour);

}  // namespace sc::sut
