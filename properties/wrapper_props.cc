#include "properties/wrapper_props.h"

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "properties/gen/choice.h"
#include "properties/rank_checks.h"
#include "properties/support.h"

namespace sc::props {

namespace {

using Values = std::vector<std::vector<float>>;

// k / 64 for k in [-128, 128]: exact in bf16 and fp16.
rc::Gen<float> small_value() {
  return rc::gen::map(rc::gen::inRange<int>(-128, 129),
                      [](int k) { return std::ldexp(static_cast<float>(k), -6); });
}

rc::Gen<std::vector<int64_t>> wrapper_shape() {
  return gen::weighted_one_of<std::vector<int64_t>>(
      {{2, rc::gen::map(rc::gen::inRange<int64_t>(1, 7),
                        [](int64_t n) { return std::vector<int64_t>{n}; })},
       {1, rc::gen::apply(
               [](int64_t a, int64_t b) {
                 return std::vector<int64_t>{a, b};
               },
               rc::gen::inRange<int64_t>(1, 4), rc::gen::inRange<int64_t>(1, 4))}});
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// At every size: RapidCheck's ranges favour the first entry at small sizes.
rc::Gen<bool> one_in(size_t n) {
  return rc::gen::resize(rc::kNominalSize, gen::weighted_choice<bool>({{n - 1, false}, {1, true}}));
}

const char* class_of(rig::Wrapper w) {
  switch (w) {
    case rig::Wrapper::kFloat16:
    case rig::Wrapper::kFp16:
      return "Float16OptimizerWithFloat16Params";
    case rig::Wrapper::kFp32:
      return "FP32Optimizer";
    case rig::Wrapper::kDistributed:
      return "DistributedOptimizer";
  }
  return "?";
}

}  // namespace

rc::Gen<rig::WrapperParam> wrapper_param(bool may_be_half, bool may_be_expert) {
  return rc::gen::exec([may_be_half, may_be_expert] {
    rig::WrapperParam p;
    p.half = may_be_half && !*one_in(3);
    p.expert = may_be_expert && *one_in(2);
    p.shape = *wrapper_shape();
    p.initial =
        *rc::gen::container<std::vector<float>>(static_cast<size_t>(numel(p.shape)), small_value());
    return p;
  });
}

// The steps' grads, one list per parameter of its size.
rc::Gen<std::vector<std::vector<std::vector<float>>>> wrapper_grads(
    const std::vector<rig::WrapperParam>& params, size_t steps) {
  std::vector<rc::Gen<std::vector<float>>> per_param;
  const auto element = rc::gen::map(rc::gen::inRange<int>(-4096, 4097),
                                    [](int k) { return std::ldexp(static_cast<float>(k), -10); });
  for (const auto& p : params) {
    per_param.push_back(
        rc::gen::container<std::vector<float>>(static_cast<size_t>(numel(p.shape)), element));
  }
  const auto one_step = rc::gen::exec([per_param] {
    std::vector<std::vector<float>> step;
    for (const auto& g : per_param) step.push_back(*g);
    return step;
  });
  return rc::gen::container<std::vector<std::vector<std::vector<float>>>>(steps, one_step);
}

// The first element where `got` and `want` differ in their bits, named; "" when none does.
std::string first_difference(const Values& got, const Values& want) {
  if (got.size() != want.size()) return "different parameter counts";
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].size() != want[i].size()) return "p" + std::to_string(i) + ": different sizes";
    for (size_t e = 0; e < got[i].size(); ++e) {
      if (std::memcmp(&got[i][e], &want[i][e], sizeof(float)) == 0) continue;
      std::ostringstream os;
      os.precision(9);
      os << "p" << i << "[" << e << "] is " << got[i][e] << ", not " << want[i][e];
      return os.str();
    }
  }
  return "";
}

namespace {

// How the trainer resumes, and after how many steps the checkpoint was saved: the optimizer
// state only after a step (a checkpoint saved before the first holds none, and Megatron's strict
// load refuses it); the main params from the checkpoint with the distributed optimizer only (the
// other wrappers refuse reload_model_params(state_dict): "Initialize main params from state dict
// is not supported"), the fp32 checkpoint saved after a step (before one it holds the drawn
// initial values, which 16 bits hold exactly, and the main params could not tell).
void draw_resume(rig::WrapperCall& call, size_t steps) {
  const bool from_checkpoint =
      call.wrapper == rig::Wrapper::kDistributed && !call.frozen && *one_in(2);
  call.save_after = *rc::gen::inRange<int>(from_checkpoint ? 1 : 0, static_cast<int>(steps) + 1);
  if (from_checkpoint) {
    call.resume = rig::Resume::kMainParamsFromCheckpoint;
  } else {
    call.resume =
        call.save_after > 0 && !*one_in(3) ? rig::Resume::kOptimizer : rig::Resume::kWeights;
  }
}

}  // namespace

rc::Gen<rig::WrapperCall> wrapper_lifecycle_call() {
  return rc::gen::exec([] {
    rig::WrapperCall call;
    call.wrapper = *rc::gen::resize(
        rc::kNominalSize, gen::weighted_choice<rig::Wrapper>({{3, rig::Wrapper::kFloat16},
                                                              {2, rig::Wrapper::kFp16},
                                                              {2, rig::Wrapper::kFp32},
                                                              {4, rig::Wrapper::kDistributed}}));
    const bool distributed = call.wrapper == rig::Wrapper::kDistributed;
    call.frozen = *one_in(distributed ? 4 : 3);
    call.transformer_engine = *one_in(2);  // as most training runs: TE installed
    const size_t n = *rc::gen::inRange<size_t>(1, 5);
    const bool half = call.wrapper != rig::Wrapper::kFp32;
    // A model with experts: their own optimizer in the chain, over the one DDP chunk with the
    // distributed optimizer.
    const bool moe = distributed ? !*one_in(4) : *one_in(2);
    call.params = *rc::gen::container<std::vector<rig::WrapperParam>>(n, wrapper_param(half, moe));
    const size_t steps = *rc::gen::inRange<size_t>(1, 4);
    call.grads = *wrapper_grads(call.params, steps);
    draw_resume(call, steps);
    return call;
  });
}

namespace {

// The chain get_megatron_optimizer builds for `call`: the dense optimizer always, a stub where
// no dense parameter is trainable; the experts' where one is trainable.
struct Chain {
  std::vector<std::string> optimizers;
  std::vector<bool> stubs;
};

Chain chain_of(const rig::WrapperCall& call) {
  bool dense = false, expert = false;
  for (const rig::WrapperParam& p : call.params) (p.expert ? expert : dense) = !call.frozen;
  Chain c{{class_of(call.wrapper)}, {!dense}};
  if (expert) {
    c.optimizers.push_back(class_of(call.wrapper));
    c.stubs.push_back(false);
  }
  return c;
}

std::string chain_text(const std::vector<std::string>& optimizers, const std::vector<bool>& stubs) {
  std::string out;
  for (size_t k = 0; k < optimizers.size(); ++k) {
    out += (k == 0 ? "[" : ", ") + std::string(k < stubs.size() && stubs[k] ? "stub " : "") +
           optimizers[k];
  }
  return out + "]";
}

const char* resumed_with(rig::Resume r) {
  switch (r) {
    case rig::Resume::kOptimizer:
      return "the optimizer state, it differs from no interruption: ";
    case rig::Resume::kWeights:
      return "the weights only, it differs from a fresh optimizer: ";
    case rig::Resume::kMainParamsFromCheckpoint:
      return "the main params of an fp32 checkpoint, a main param after the reload is not the "
             "checkpoint's: ";
  }
  return "?";
}

void check_values(const std::string& what, const rig::WrapperCall& call,
                  const rig::WrapperOutcome& got, const sut::Behaviour& b) {
  std::string resumed;
  if (call.resume == rig::Resume::kMainParamsFromCheckpoint) {
    if (!got.main_after_reload || !got.checkpoint_weights) {
      check(what + ": the reply has no main params after the reload", b);
      return;
    }
    resumed = first_difference(*got.main_after_reload, *got.checkpoint_weights);
  } else if (got.reference) {
    resumed = first_difference(got.resumed, *got.reference);
  } else {
    check(what + ": the reply has no reference run", b);
  }
  if (!resumed.empty()) check(what + ": resumed with " + resumed_with(call.resume) + resumed, b);
  if (call.frozen && got.reference) {
    const std::string moved = first_difference(got.uninterrupted, *got.reference);
    if (!moved.empty()) check(what + ": a frozen parameter changed: " + moved, b);
  }
}

}  // namespace

bool has_expert_optimizer(const rig::WrapperCall& call) {
  return chain_of(call).optimizers.size() == 2;
}

bool has_distributed_chain_with_experts(const rig::WrapperCall& call) {
  return call.wrapper == rig::Wrapper::kDistributed && has_expert_optimizer(call);
}

bool has_dense_stub_beside_experts(const rig::WrapperCall& call) {
  const Chain c = chain_of(call);
  return c.optimizers.size() == 2 && c.stubs[0];
}

void run_wrapper_lifecycle_property(const rig::WrapperCall& call, const sut::Behaviour& b) {
  rig::MegatronTarget tree = tree_or_fail();
  tree.cuda = device().is_cuda();
  const rig::WrapperOutcome got = rig::run_wrapper_lifecycle(tree, call);
  const Chain want = chain_of(call);
  const std::string what = "the chain " + chain_text(want.optimizers, want.stubs);
  if (got.raised) check(what + ": " + *got.raised, b);
  if (got.optimizers != want.optimizers || got.stubs != want.stubs) {
    check(what + ": the factory built " + chain_text(got.optimizers, got.stubs), b);
  }
  if (got.save_changed) check(what + ": saving changed the optimizer: " + *got.save_changed, b);
  check_values(what, call, got, b);
}

Property wrapper_lifecycle_property() {
  Property p;
  p.name = "OptimizerWrappers.TrainerLifecycleResumesAsNoInterruption";
  p.claim =
      "the ChainedOptimizer Megatron's factory builds (over the dense parameters' optimizer and, "
      "where expert parameters are trainable, theirs; each Float16OptimizerWithFloat16Params "
      "with bf16, or fp16 and its loss scaler, FP32Optimizer without, the DistributedOptimizer "
      "over the model's one DDP chunk, or the stub of any of them where none of its parameters "
      "is trainable), driven as the trainer drives it (steps; a distributed checkpoint; a fresh "
      "rank that loads the weights and the optimizer state, or the weights only and calls "
      "`reload_model_params`, or, with the distributed optimizer, the weights of an fp32 "
      "checkpoint and `reload_model_params(state_dict)`; more steps): no call raises, the chain "
      "is the one the options ask for, a save changes no param group, the resumed run equals no "
      "interruption (or, weights only, a fresh optimizer from the saved weights) bit for bit, "
      "main params reloaded from a checkpoint are the checkpoint's values bit for bit, and a "
      "frozen rank's parameters never change";
  draw_in_body(p, wrapper_lifecycle_call, run_wrapper_lifecycle_property);
  p.not_on_port =
      "the port has no non-distributed optimizer, no stub, no chain and no DDP module: it drives "
      "real Megatron code only";
  p.history_killers = {"G01", "G02", "G07"};
  return p;
}

}  // namespace sc::props
