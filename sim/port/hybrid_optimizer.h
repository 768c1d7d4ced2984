// Port of Megatron's HybridDeviceOptimizer (cpu_offloading/hybrid_optimizer.py at d8b71082):
// construction through torch::optim's add_param_group (the leaf check), the greedy whole-tensor
// offload split, host and fp32 copies, the sub-optimizers (host: one torch::optim::AdamW per
// tensor with overlap, else one; accelerator: FusedAdam reading `.grad`), and the step flow.
// Our own offload engines (sim/engines/) are not Megatron code: they plug in through
// HostOffloadEngine below, chosen by the behaviour's engine flags.
//
// The accelerator side runs on `accelerator` (CUDA, or the CPU standing in for it); host copies
// are pinned only when the accelerator is CUDA. Every copy, cast and sub-optimizer step of the
// step flow goes through a sut::Streams with the streams and events Megatron uses: `_d2h_stream`
// and `_h2d_stream` (new streams with overlap, the current stream without), one D2H event per
// host optimizer, the H2D event the current stream waits on.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <memory>
#include <vector>

#include "sim/port/behaviour.h"
#include "sim/port/placement.h"
#include "sim/port/streams.h"
#include "sim/port/tensor_attrs.h"
#include "sim/port/torch_pch.h"

namespace sc::sut {

// The factory's `gpu_optimizer_cls`: Transformer Engine's FusedAdam, or torch.optim.AdamW when
// neither Transformer Engine nor Apex is installed (then it is `cpu_optimizer_cls` too).
enum class AcceleratorAdam { kFusedAdam, kTorchAdamW };

// The HDO's defaults: AdamW hyper-parameters plus the HDO's own arguments.
struct HdoOptions : public torch::optim::OptimizerCloneableOptions<HdoOptions> {
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.999;
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 1e-2;
  TORCH_ARG(double, offload_fraction) = 0.5;
  TORCH_ARG(bool, param_update_in_fp32) = false;
  TORCH_ARG(bool, pin_cpu_grads) = true;
  TORCH_ARG(bool, pin_cpu_params) = true;
  TORCH_ARG(bool, overlap_cpu_optimizer_d2h_h2d) = true;
  TORCH_ARG(AcceleratorAdam, gpu_optimizer_cls) = AcceleratorAdam::kFusedAdam;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// What hdo.state holds for one original parameter after a step.
struct HdoParamState {
  torch::Tensor exp_avg, exp_avg_sq, master_param;
  int64_t step = 0;
  bool step_is_group_step = false;  // FusedAdam: the count of the group, not of the tensor
  bool step_key = false;  // the Python dict has a "step" entry (torch AdamW's, or one set later)
};

// `hdo.state_dict()`: the HDO groups' hyper-parameters and each parameter's state, in the
// flattened order of the HDO's groups (torch's integer keys); tensors are copies.
struct HdoStateDict {
  struct Group {
    double lr, beta1, beta2, eps, weight_decay;
  };
  std::vector<Group> groups;
  std::vector<std::optional<HdoParamState>> state;
};

class HybridDeviceOptimizer;

// An offload engine of ours (sim/engines/), not Megatron's: it builds the host sub-optimizers in
// place of torch.optim.AdamW and may take over the host part of a step. The port holds a fresh
// one per HybridDeviceOptimizer and calls only these functions.
class HostOffloadEngine {
 public:
  virtual ~HostOffloadEngine() = default;
  // A new engine like this one, with none of its buffers (for a rebuilt optimizer).
  virtual std::unique_ptr<HostOffloadEngine> fresh() const = 0;
  // The host sub-optimizer over `groups`.
  virtual std::unique_ptr<torch::optim::Optimizer> make_host_optimizer(
      std::vector<torch::optim::OptimizerParamGroup> groups) const = 0;
  // Whether the engine takes the host part of this step of `hdo` (grads D2H, host steps, copies
  // back); otherwise the port's own flow runs.
  virtual bool takes_host_step(const HybridDeviceOptimizer& hdo) const = 0;
  // That host part, through hdo's streams.
  virtual void host_step(HybridDeviceOptimizer& hdo) = 0;
  // Bytes of the host transfer buffers the engine keeps.
  virtual int64_t transfer_buffer_bytes() const = 0;
};

// HybridDeviceOptimizer; construction throws c10::Error("can't optimize a non-leaf Tensor")
// for a non-leaf parameter, exactly where torch.optim raises ValueError.
class HybridDeviceOptimizer : public torch::optim::Optimizer {
 public:
  // `streams` runs every copy and step (nullptr: everything at once, in program order).
  // `engine`: the offload engine the behaviour's engine flags ask for (sim/engines/engines.h),
  // of which this optimizer makes a fresh copy; nullptr for Megatron's own flow. Throws
  // std::invalid_argument when the flags ask for an engine and none is given.
  HybridDeviceOptimizer(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                        const HdoOptions& defaults, torch::Device accelerator,
                        const TensorAttrs* attrs, const Behaviour& behaviour,
                        Streams* streams = nullptr, const HostOffloadEngine* engine = nullptr);

  // Syncs hyper-parameters, moves grads to the host copies, steps the accelerator then the host
  // sub-optimizers, copies results back and rebuilds the state view.
  torch::Tensor step(LossClosure closure = nullptr) override;

  // torch's zero_grad over the HDO groups, plus `decoupled_grad` set to None or zeroed.
  void zero_grad(bool set_to_none, TensorAttrs* attrs);
  // Random grads for every parameter, a real step, then zero_grad (materialises state).
  void dummy_step(uint64_t seed, TensorAttrs* attrs);
  // `state_dict()`.
  HdoStateDict state_dict() const;
  // `load_state_dict()` with the pre- and post-load hooks: the state is cast (to fp32 under
  // param_update_in_fp32), then the sub-optimizers are rebuilt from the current parameters and
  // given the loaded state, fp32 copies take the loaded master_param, and state moves to the
  // device of its sub-optimizer.
  void load_state_dict(const HdoStateDict& sd);
  // `sd` as torch.load(map_location="cpu") reads it: every tensor a copy on the host.
  HdoStateDict mapped_to_host(const HdoStateDict& sd) const;
  // Whether `tensor` lives on the host (sut/placement.h).
  bool on_host(const torch::Tensor& tensor) const {
    return place_of(tensor, accelerator_) == Place::kHost;
  }
  // `update_fp32_param_by_new_param()`: each original copied into its fp32 copy.
  void update_fp32_param_by_new_param();

  // The step DistributedOptimizer.state_dict() reads: that of the first host torch AdamW with
  // state (all its entries must agree), or none.
  std::optional<int64_t> first_host_adamw_step() const;
  // The accelerator FusedAdam's step count (its first non-empty group's), if it has stepped.
  std::optional<int64_t> accelerator_group_step() const;
  // `_sync_hdo_state_to_sub_optimizers()`: each sub-optimizer takes hdo.state, fp32 copies take
  // master_param.
  void sync_state_to_sub_optimizers() { sync_hdo_state_to_sub_optimizers(); }
  // `len(hdo.state) == 0`.
  bool state_empty() const { return state_view_.empty(); }
  // `for v in hdo.state.values(): v["step"] = step`. A host AdamW shares the entry's dict, so its
  // step changes too; FusedAdam's entries gain a "step" it does not read.
  void set_state_steps(int64_t step);
  // The tensor-valued items of `hdo.state[original]` by name, live (not copies); "step" is a 0-d
  // fp32 tensor holding the count.
  std::map<std::string, torch::Tensor> state_tensors(const torch::Tensor& original) const;
  // `hdo.state[original][name] = value`: the sub-optimizer's dict is the same object, so
  // exp_avg, exp_avg_sq and step reach it; master_param only rebinds the entry.
  void assign_state(const torch::Tensor& original, const std::string& name,
                    const torch::Tensor& value);
  // `hdo.state[original][name].copy_(value)` ("step": the count takes the value).
  void copy_state(const torch::Tensor& original, const std::string& name,
                  const torch::Tensor& value);

  // True when `original` (an HDO parameter) was offloaded to a host copy.
  bool is_offloaded(const torch::Tensor& original) const;
  // True when `original` has an fp32 copy (`param_to_fp32_param`).
  bool has_fp32_copy(const torch::Tensor& original) const;
  // The host copy, fp32 copy or the original itself that a sub-optimizer steps.
  torch::Tensor inner_param(const torch::Tensor& original) const;
  // Index of the host sub-optimizer stepping `original`, -1 for the accelerator one.
  int cpu_optimizer_index(const torch::Tensor& original) const;
  // `hdo.state[original]` after the last step (nullptr before the first).
  const HdoParamState* state_of(const torch::Tensor& original) const;
  size_t num_cpu_optimizers() const { return cpu_optimizers_.size(); }
  // Bytes of the host buffers the step flow keeps for grads and copies: the full-size host grads
  // of the port's flow plus the offload engine's buffers.
  int64_t host_transfer_buffer_bytes() const;
  // Steps whose host part the offload engine took.
  int64_t engine_host_steps() const { return engine_host_steps_; }
  bool has_gpu_optimizer() const { return gpu_optimizer_ != nullptr; }
  const HdoOptions& hdo_defaults() const;
  // The offload engine (nullptr: Megatron's own flow).
  const HostOffloadEngine* engine() const { return engine_.get(); }

  // For the offload engines, which run the host part of a step through these:
  // the host sub-optimizers, in order;
  const std::vector<std::unique_ptr<torch::optim::Optimizer>>& host_optimizers() const {
    return cpu_optimizers_;
  }
  // the streams and the D2H and H2D stream ids of the last init;
  Streams& streams() const { return *streams_; }
  int d2h_stream() const { return d2h_stream_; }
  int h2d_stream() const { return h2d_stream_; }
  torch::Device accelerator() const { return accelerator_; }
  const Behaviour& behaviour() const { return behaviour_; }
  // the accelerator parameter whose host copy is `host_copy`;
  const torch::Tensor& accelerator_param_of(const torch::Tensor& host_copy) const;
  // the grad the host copy `inner` steps with (`decoupled_grad`, else `.grad`, of its original);
  torch::Tensor host_grad_source(const torch::Tensor& inner) const;
  // whether the host copy `src` of `gpu_param` is pageable, as a non-blocking H2D copy sees it;
  bool pageable_host_copy(const torch::Tensor& src, const torch::Tensor& gpu_param) const;
  // "HDO param k" (k in the flattened order of the groups), for stream reports.
  std::string label(const torch::Tensor& original) const;

 private:
  void init_sub_optimizers();
  // `sub_optimizers`: the host ones, then the accelerator one if any.
  std::vector<torch::optim::Optimizer*> sub_optimizers() const;
  void sync_hdo_param_groups_to_sub_optimizers();
  // `host_grads`: also the host copies' grads, copied D2H whole (not when the engine takes the
  // host part).
  void set_sub_optimizer_grads(bool host_grads);
  void sync_sub_optimizers_state_to_hdo();
  void sync_hdo_state_to_sub_optimizers();
  const torch::optim::OptimizerParamGroup& hdo_group_of(const torch::Tensor& original) const;
  // Raises as `kernel` would when a parameter, grad or moment of `sub` is not on `required`.
  void check_operands(torch::optim::Optimizer& sub, const std::string& kernel,
                      Place required) const;
  // `_move_new_state_to_right_device`.
  void move_new_state_to_right_device();

  torch::Device accelerator_;
  const TensorAttrs* attrs_;
  std::unique_ptr<Streams> own_streams_;
  Streams* streams_;
  int d2h_stream_ = Streams::kCurrent;  // `_d2h_stream` / `_h2d_stream` of the last init
  int h2d_stream_ = Streams::kCurrent;
  std::vector<int> cpu_optimizer_events_;  // `_cpu_optimizer_map_data_event`, per host optimizer
  Behaviour behaviour_;
  bool fp32_update_ = false;  // param_update_in_fp32 as it takes effect
  std::map<const void*, torch::Tensor> param_to_fp32_param_;
  std::map<const void*, torch::Tensor> gpu_params_map_cpu_copy_;
  std::map<const void*, torch::Tensor> cpu_copys_map_gpu_param_;
  std::map<const void*, torch::Tensor> param_to_inner_param_;
  std::map<const void*, torch::Tensor> inner_param_to_orig_param_;
  std::map<const void*, torch::Tensor> cpu_copy_map_grad_;
  std::map<const void*, HdoParamState> state_view_;
  std::unique_ptr<HostOffloadEngine> engine_;
  int64_t engine_host_steps_ = 0;
  std::vector<std::unique_ptr<torch::optim::Optimizer>> cpu_optimizers_;
  std::unique_ptr<torch::optim::Optimizer> gpu_optimizer_;
};

}  // namespace sc::sut
