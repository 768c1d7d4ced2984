// The state of one port rank (sim/rig/rank_rig.h), shared by the files that implement RankRig:
// rank_rig.cc (construction, steps, observation, checkpoints) and rank_rig_training.cc (the
// training loop's backward pass).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/spec.h"
#include "sim/port/ddp_hooks.h"
#include "sim/port/distrib_optimizer.h"
#include "sim/port/fused_adam.h"
#include "sim/port/hybrid_optimizer.h"
#include "sim/port/param_buffer.h"
#include "sim/port/streams.h"
#include "sim/port/tensor_attrs.h"
#include "sim/rig/grad_stats_group.h"
#include "sim/rig/rank_under_test.h"
#include "sim/rig/stream_sim.h"

namespace sc::rig {

struct RankRigImpl {
  const model::CaseSpec c;  // a copy: the rig outlives temporaries
  model::Instance instance;
  int64_t rank;
  sut::Behaviour behaviour;
  torch::Device device;
  std::vector<sut::ModelParam> params;
  std::vector<int> case_index;  // port param -> case param
  std::vector<std::vector<float>> initial;
  std::vector<std::unique_ptr<sut::ParamAndGradBuffer>> buffers;
  sut::TensorAttrs attrs;
  std::unique_ptr<sut::DistributedOptimizer> dist;
  std::vector<std::vector<torch::Tensor>> installed;  // per group, installed order
  std::vector<std::vector<int>> installed_param;      // port param of each installed tensor
  RankObservation obs;
  // Every copy and step of the optimizers: torch's CUDA streams on a CUDA device, else the
  // simulation (`simulated`, which also reports races).
  std::unique_ptr<sut::Streams> streams;
  SimulatedStreams* simulated = nullptr;
  // Whether the grads of the current step hold inf/NaN in any rank's shards (every DP rank holds
  // the same reduced grads): the MAX all-reduce of the found-inf flag that the rig simulates.
  bool group_found_inf = false;
  // The grad-stats group's SUM all-reduce, once use_grad_stats set it up.
  std::unique_ptr<GradStatsGroupSim> grad_stats;
  StepReport last;
  // In the training loop (Target::training_loop): DDP's grad hooks, registered before the
  // optimizer is built, as DistributedDataParallel.__init__ does.
  bool training_loop = false;
  std::unique_ptr<sut::DdpGradHooks> ddp_hooks;

  RankRigImpl(const model::CaseSpec& c_, model::Instance inst, int64_t r, const sut::Behaviour& b,
              torch::Device d, const StreamSchedule& schedule, bool training)
      : c(c_),
        instance(inst),
        rank(r),
        behaviour(b),
        device(d),
        training_loop(training) {
    if (d.is_cuda()) streams = sut::make_cuda_streams();
    if (!streams && !schedule.simulate) streams = std::make_unique<sut::ImmediateStreams>();
    if (!streams) {
      auto sim = std::make_unique<SimulatedStreams>(schedule.policy, schedule.seed);
      simulated = sim.get();
      streams = std::move(sim);
    }
  }
  // The host waits for the device before it reads or changes tensors itself.
  void drain() const { streams->synchronize(); }
  // Builds the rank: parameters, buffers, the inner optimizer, the DistributedOptimizer, and
  // what construction installed (or raised).
  void build(const ParamValues& values);
  // The case's parameters; this instance's become the port's model params.
  void make_params(const ParamValues& values);
  // The grad and param buffers, one DDP instance per model chunk, named for the streams.
  std::vector<const sut::ParamAndGradBuffer*> make_buffers();
  // The distinct optimizer group indices of this instance's parameters, ascending.
  std::vector<int> group_ids() const;
  // The inner optimizer Megatron's factory makes for the case, one group per id of `ids`.
  std::unique_ptr<torch::optim::Optimizer> make_inner_optimizer(const std::vector<int>& ids);
  // The DistributedOptimizer over `inner`; records its error instead of throwing.
  void construct(std::unique_ptr<torch::optim::Optimizer> inner,
                 const std::vector<const sut::ParamAndGradBuffer*>& buffer_ptrs);
  // The gbuf ranges and the installed groups, as construction hands them over.
  void observe_ranges(const sut::DistributedOptimizer& d);
  // A bucket's `param_to_index` in case params, in order of start.
  std::vector<std::pair<int, model::Range>> param_index_of(const sut::Bucket& bucket) const;
  void observe_groups(const sut::DistributedOptimizer& d);
  // RankRig::step outside the training loop: `in.grads` written into the main grads (the
  // forward and backward pass on the current stream), the group hyper-parameters set, one step.
  void write_grads_and_step(const model::StepInputs& in);
  // The identifier keys load_state_dict matches groups by.
  void set_group_keys(const std::vector<int>& ids);
  // After construction: whether the optimizer holds the installed tensors, and the bytes.
  void observe_constructed();
  const sut::HybridDeviceOptimizer* hdo() const {
    return dist ? dynamic_cast<const sut::HybridDeviceOptimizer*>(&dist->optimizer()) : nullptr;
  }
  // TE's FusedAdam without offload (precision-aware or not), if that is the inner optimizer.
  const sut::FusedAdam* fused() const {
    return dist ? dynamic_cast<const sut::FusedAdam*>(&dist->optimizer()) : nullptr;
  }
};

// `t`'s values as fp32, on the host.
std::vector<float> to_floats(const torch::Tensor& t);

}  // namespace sc::rig
