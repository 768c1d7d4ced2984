// The optimizers Megatron's factory builds besides the distributed optimizer, driven on real
// Megatron code as the trainer drives them (the worker's `wrapper_lifecycle` op,
// sim/megatron/wrappers.py): the ChainedOptimizer get_megatron_optimizer returns, over the dense
// parameters' optimizer and, where expert parameters are trainable, theirs; each
// Float16OptimizerWithFloat16Params (bf16, or fp16 with its loss scaler, without the distributed
// optimizer) or FP32Optimizer (neither bf16 nor fp16), or the DistributedOptimizer over the one
// DDP chunk of the model (the dense and the experts' sharing it), or the stub the factory builds of
// any of them where none of its parameters is trainable. The port has none of them: this seam has a
// real-code side only.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "sim/rig/megatron_worker.h"

namespace sc::rig {

// What the trainer's options ask the factory for: bf16 or fp16 (with its dynamic loss scaler)
// without the distributed optimizer, neither, or the distributed optimizer (with bf16).
enum class Wrapper { kFloat16, kFp16, kFp32, kDistributed };

// How the trainer resumes from the checkpoint: with the optimizer state; with the weights only
// and reload_model_params() (--finetune, --no-load-optim); or with the weights and
// reload_model_params(state_dict) (--load-main-params-from-ckpt with --no-load-optim), the
// checkpoint then saved by an fp32 run of the same model, whose values 16 bits cannot hold.
enum class Resume { kOptimizer, kWeights, kMainParamsFromCheckpoint };

struct WrapperParam {
  bool half = false;           // 16-bit: fp16 under kFp16, else bf16; otherwise fp32
  bool expert = false;         // an expert parameter: the experts' optimizer holds it
  std::vector<int64_t> shape;  // one or two dimensions
  std::vector<float> initial;  // its values (rounded to its dtype by the worker)
};

struct WrapperCall {
  Wrapper wrapper = Wrapper::kFloat16;
  bool frozen = false;              // every parameter frozen: the factory builds a stub
  bool transformer_engine = false;  // the inner optimizer TE's FusedAdam (the worker's stand-in)
  std::vector<WrapperParam> params;
  std::vector<std::vector<std::vector<float>>> grads;  // per step, per parameter
  int save_after = 0;                                  // steps before the checkpoint is saved
  Resume resume = Resume::kOptimizer;
};

struct WrapperOutcome {
  // The chain's optimizers in order (dense, then experts where built): class, and whether a stub.
  std::vector<std::string> optimizers;
  std::vector<bool> stubs;
  std::optional<std::string> save_changed;  // what the save changed in their param groups
  std::optional<std::string> raised;        // "CALL: Type: message" where a call raised
  // Each parameter's values (fp32) after: the run without interruption, the resumed run, and
  // what the resumed run must equal (the run without interruption where the optimizer state was
  // loaded, else a fresh optimizer stepped from the saved weights; none with main params from the
  // checkpoint).
  std::vector<std::vector<float>> uninterrupted, resumed;
  std::optional<std::vector<std::vector<float>>> reference;
  // With main params from the checkpoint: each parameter's main copy right after the reload, and
  // the checkpoint's weights it must equal.
  std::optional<std::vector<std::vector<float>>> main_after_reload, checkpoint_weights;
};

WrapperOutcome run_wrapper_lifecycle(const MegatronTarget& tree, const WrapperCall& call);

// Per step, per parameter values as the worker's requests and replies carry them (bit lists), and
// back.
nlohmann::json steps_json(const std::vector<std::vector<std::vector<float>>>& steps);
std::vector<std::vector<std::vector<float>>> steps_of(const nlohmann::json& steps);

const char* wrapper_name(Wrapper w);
const char* resume_name(Resume r);

// How RapidCheck prints a drawn call.
void showValue(const WrapperCall& call, std::ostream& os);

}  // namespace sc::rig
