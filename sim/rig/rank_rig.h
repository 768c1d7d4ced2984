// The port's implementation of the system-under-test seam (sim/rig/rank_under_test.h): one rank
// of one distributed-optimizer instance of a model::CaseSpec, built by the port and reported in
// the model's vocabulary, so that properties can compare the two.
//
// Construction creates the rank's parameters (values from the seed), its buffers, the inner
// optimizer (AdamW, FusedAdam, or a HybridDeviceOptimizer when the case offloads, with the
// offload engine its behaviour asks for) and the DistributedOptimizer, and records the
// construction outcome instead of throwing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/spec.h"
#include "sim/port/behaviour.h"
#include "sim/port/torch_pch.h"
#include "sim/rig/dtypes.h"
#include "sim/rig/rank_under_test.h"

namespace sc::sut {
class ParamAndGradBuffer;
}  // namespace sc::sut

namespace sc::rig {

struct RankRigImpl;

// One rank of one instance of a case, built by the port and kept alive for stepping. The seam's
// functions are documented in sim/rig/rank_under_test.h.
class RankRig final : public RankUnderTest {
 public:
  // `training_loop`: as Target::training_loop (DDP's grad hooks on the parameters).
  RankRig(const model::CaseSpec& spec, model::Instance instance, int64_t rank,
          const sut::Behaviour& behaviour, torch::Device device, uint64_t seed,
          const StreamSchedule& schedule = StreamSchedule{}, bool training_loop = false);
  // The same, from given initial values (sim/rig/initial_values.h; std::invalid_argument when
  // they do not fit the case).
  RankRig(const model::CaseSpec& spec, model::Instance instance, int64_t rank,
          const sut::Behaviour& behaviour, torch::Device device,
          const std::vector<std::vector<float>>& initial,
          const StreamSchedule& schedule = StreamSchedule{}, bool training_loop = false);
  ~RankRig() override;
  RankRig(const RankRig&) = delete;
  RankRig& operator=(const RankRig&) = delete;

  const RankObservation& construction() const override;
  const std::vector<std::vector<float>>& initial_values() const override;
  void step(const model::StepInputs& in) override;
  void use_grad_scaler(const model::GradScalerConfig& config) override;
  std::optional<model::GradScalerState> grad_scaler_state() const override;
  void use_grad_stats(double clip_grad, bool log_num_zeros_in_grad) override;
  StepReport last_step() const override;
  void set_model_values(const std::vector<std::vector<float>>& values) override;
  std::vector<ObservedGrad> backward(const std::vector<std::vector<float>>& grads) override;
  void zero_grad(bool set_to_none) override;
  void reload_model_params() override;
  std::vector<float> model_piece(size_t g, size_t i) const override;
  std::vector<float> optimizer_piece(size_t g, size_t i) const override;
  ObservedState state(size_t g, size_t i) const override;
  ObservedPlacement placement(size_t g, size_t i) const override;
  int num_cpu_optimizers() const override;
  bool has_accelerator_optimizer() const override;
  std::vector<model::AdamWHyper> group_hyper_parameters() const override;
  uint64_t digest() const override;
  std::vector<std::vector<float>> model_values() const override;
  Checkpoint save() const override;
  // The state dict goes to `hdo.load_state_dict` directly; sharded_state_dict(is_loading=True)
  // runs load_state_dict(state_dict()), with the dummy step of an empty hybrid optimizer.
  void load(const Checkpoint& ck, bool map_to_host = false) override;
  // The port keeps the distributed part in every save(), each rank its own.
  Checkpoint save_distributed(const Checkpoint*) const override { return save(); }
  void load_distributed(const Checkpoint& ck) override;
  void load_gathered(const GatheredCheckpoint& ck) override;
  void add_non_tensor_state(std::vector<std::string> keys) override;
  // Empty on a CUDA device, where real streams run the port.
  std::vector<std::string> stream_races() const override;
  std::vector<std::string> pageable_copies() const override;

  // Saves the DP group `group` in `format` through get_parameter_state_dp_zero and, for
  // "fully_reshardable", sharded_param_state_fully_reshardable (rig::save_gathered).
  static GatheredCheckpoint save_gathered(const std::vector<const RankRig*>& group,
                                          GatheredFormat format);

  // For the multi-process mode (sim/app/multiprocess.h), which runs the real collectives:
  // this rank's grad and param buffers, in the order the DistributedOptimizer walks them.
  std::vector<const sut::ParamAndGradBuffer*> buffers() const;
  // Writes `grads` (per case parameter; parameters of the other instance are skipped) into the
  // main grads, as the backward pass leaves them before the reduce-scatter.
  void write_main_grads(const std::vector<std::vector<float>>& grads);
  // step() with the grads the main grads hold now (after the caller's reduce-scatter) and the
  // group hyper-parameters of `in` (its grads are ignored). Requires successful construction.
  void step_with_main_grads(const model::StepInputs& in);

 private:
  std::unique_ptr<RankRigImpl> impl_;
};

// Builds `rank` of `instance` of case `spec` under `behaviour` on `device` and reports it.
RankObservation run_rank(const model::CaseSpec& spec, model::Instance instance, int64_t rank,
                         const sut::Behaviour& behaviour, torch::Device device, uint64_t seed);

}  // namespace sc::rig
