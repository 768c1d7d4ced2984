// The pipelined offload: the host part of the hybrid optimizer's step in chunks through two
// pinned staging buffers per direction, the next chunk's D2H copy in flight during each fused
// AdamW pass, 16-bit grads and 16-bit copy-backs crossing the link as 16 bits (cast on the host,
// rounding as the device would). Bit-identical to the port's own flow; no full-size host grads.
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "sim/engines/fused_host_adamw.h"
#include "sim/port/hybrid_optimizer.h"

namespace sc::engines {

// Host sub-optimizers are FusedHostAdamW; with `chunk` > 0 the engine takes the host part of
// every step whose host sub-optimizers all accept the fused pass (FusedHostAdamW::
// external_step_applies), in chunks of at most `chunk` elements of each offloaded tensor.
class PipelinedOffload : public sut::HostOffloadEngine {
 public:
  explicit PipelinedOffload(int64_t chunk) : chunk_(chunk) {}
  std::unique_ptr<sut::HostOffloadEngine> fresh() const override;
  std::unique_ptr<torch::optim::Optimizer> make_host_optimizer(
      std::vector<torch::optim::OptimizerParamGroup> groups) const override;
  bool takes_host_step(const sut::HybridDeviceOptimizer& hdo) const override;
  void host_step(sut::HybridDeviceOptimizer& hdo) override;
  int64_t transfer_buffer_bytes() const override;

 private:
  // The flat views of one stepped tensor, taken once per step.
  struct Tensors {
    const FusedHostAdamW::Span* span;
    torch::Tensor gpu_original;                 // the accelerator's parameter
    torch::Tensor grad, gpu_param;              // flat: its grad and it
    torch::Tensor master, exp_avg, exp_avg_sq;  // flat: the host copy and its moments
  };
  // Elements [lo, hi) of one tensor.
  struct Piece {
    const Tensors* tensors;
    int64_t lo, hi;
  };
  // Every host sub-optimizer's step bookkeeping (state made, counts advanced): one span per
  // stepped tensor, fresh state marked as host memory.
  static std::vector<FusedHostAdamW::Span> begin_step(sut::HybridDeviceOptimizer& hdo);
  // The flat views of each span's tensors, their places checked.
  static std::vector<Tensors> flat_views(const sut::HybridDeviceOptimizer& hdo,
                                         const std::vector<FusedHostAdamW::Span>& spans);
  // Piece k's D2H grad copy into its staging buffer; returns the event recorded after it.
  int copy_grad_chunk(sut::HybridDeviceOptimizer& hdo, const Piece& piece, size_t k);
  // Piece k's fused AdamW pass and H2D copy back; returns the event recorded after the copy.
  int step_chunk(sut::HybridDeviceOptimizer& hdo, const Piece& piece, size_t k,
                 const std::vector<int>& h2d_done);
  // Staging buffer `slot` of `pool` (0: grads, slot 2 there the buffer a 16-bit grad is widened
  // into; 1: 16-bit parameters) in `dtype`, at least chunk_ elements, on the host (pinned with
  // CUDA); kept across steps.
  torch::Tensor staging(const sut::HybridDeviceOptimizer& hdo, int pool, int slot,
                        torch::ScalarType dtype);

  int64_t chunk_;
  std::map<std::tuple<int, int, int>, torch::Tensor> staging_;  // (pool, slot, dtype)
};

}  // namespace sc::engines
