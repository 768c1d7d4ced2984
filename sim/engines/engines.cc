#include "sim/engines/engines.h"

#include "sim/engines/fused_host_adamw.h"
#include "sim/engines/pipelined_offload.h"

namespace sc::engines {

namespace {

// The fused host AdamW alone: the host sub-optimizers are FusedHostAdamW, and the port's own
// flow runs every step.
class FusedHostEngine : public sut::HostOffloadEngine {
 public:
  std::unique_ptr<sut::HostOffloadEngine> fresh() const override {
    return std::make_unique<FusedHostEngine>();
  }
  std::unique_ptr<torch::optim::Optimizer> make_host_optimizer(
      std::vector<torch::optim::OptimizerParamGroup> groups) const override {
    return std::make_unique<FusedHostAdamW>(std::move(groups));
  }
  bool takes_host_step(const sut::HybridDeviceOptimizer&) const override { return false; }
  void host_step(sut::HybridDeviceOptimizer&) override {}
  int64_t transfer_buffer_bytes() const override { return 0; }
};

}  // namespace

std::unique_ptr<sut::HostOffloadEngine> engine_for(const sut::Behaviour& behaviour) {
  if (behaviour.pipeline_chunk > 0) {
    return std::make_unique<PipelinedOffload>(behaviour.pipeline_chunk);
  }
  if (behaviour.has(sut::Deviation::kFusedHostAdamw)) return std::make_unique<FusedHostEngine>();
  return nullptr;
}

}  // namespace sc::engines
