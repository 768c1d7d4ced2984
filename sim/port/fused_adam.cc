#include "sim/port/fused_adam.h"

#include <cmath>
#include <functional>

#include "shardcheck/config.h"
#if SC_HAVE_CUDA && SC_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>

#include "sim/port/cuda/fused_adam_kernel.h"
#include "sim/port/optim_state.h"
#define SC_TORCH_HAS_CUDA 1
#endif

namespace sc::sut {

namespace {
void* state_key(const torch::Tensor& p) { return sc::sut::optim_state_key(p); }
// Elements per block of the CPU loop; the remainder is the tail loop (where DS-01 lived).
constexpr int64_t kBlock = 8;
// Tensors per multi-tensor launch on the CPU (as the CUDA kernel's table).
constexpr size_t kTensorsPerBatch = 64;
}  // namespace

void fused_adam_cpu(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                    int64_t count, float lr, float beta1, float beta2, float eps,
                    float weight_decay, float bc1, float bc2, bool mutant_tail_momentum) {
  auto element = [&](int64_t i, bool tail) {
    const float gi = grad[i];
    // DS-01: the tail loop multiplied the first moment by itself times beta1.
    exp_avg[i] =
        (tail && mutant_tail_momentum ? beta1 * exp_avg[i] * exp_avg[i] : beta1 * exp_avg[i]) +
        (1.0f - beta1) * gi;
    exp_avg_sq[i] = beta2 * exp_avg_sq[i] + (1.0f - beta2) * gi * gi;
    const float m_hat = exp_avg[i] / bc1;
    const float v_hat = exp_avg_sq[i] / bc2;
    const float denom = std::sqrt(v_hat) + eps;
    const float update = m_hat / denom + weight_decay * param[i];
    param[i] = param[i] - lr * update;
  };
  const int64_t body = count - count % kBlock;
  for (int64_t b = 0; b < body; b += kBlock) {
    for (int64_t i = b; i < b + kBlock; ++i) element(i, false);
  }
  for (int64_t i = body; i < count; ++i) element(i, true);
}

float te_bias_correction(double beta, int64_t step, bool from_double_beta) {
  const double b = from_double_beta ? beta : static_cast<double>(static_cast<float>(beta));
  return static_cast<float>(1.0 - std::pow(b, static_cast<double>(step)));
}

FusedAdam::FusedAdam(std::vector<torch::optim::OptimizerParamGroup> groups,
                     const FusedAdamOptions& defaults, const TensorAttrs* attrs,
                     const FusedAdamFlags& flags, const Behaviour& behaviour)
    : torch::optim::Optimizer(std::move(groups), std::make_unique<FusedAdamOptions>(defaults)),
      attrs_(attrs),
      flags_(flags),
      behaviour_(behaviour) {
  // TE keeps remainders only for fp32 masters of master-weight optimizers.
  flags_.store_param_remainders = flags.store_param_remainders && flags.master_weights;
}

bool FusedAdam::keeps_remainders(const torch::Tensor& param) const {
  return flags_.store_param_remainders && param.scalar_type() == torch::kBFloat16;
}

const FusedAdamState* FusedAdam::state_of(const torch::Tensor& param) const {
  auto it = state_.find(state_key(param));
  return it == state_.end() ? nullptr : static_cast<const FusedAdamState*>(it->second.get());
}

void FusedAdam::set_state(const torch::Tensor& param, torch::Tensor exp_avg,
                          torch::Tensor exp_avg_sq) {
  auto s = std::make_unique<FusedAdamState>();
  s->exp_avg(std::move(exp_avg));
  s->exp_avg_sq(std::move(exp_avg_sq));
  state_[state_key(param)] = std::move(s);
}

void FusedAdam::initialize_state(const torch::Tensor& param) {
  auto s = std::make_unique<FusedAdamState>();
  s->exp_avg(torch::zeros_like(param, torch::kFloat));
  s->exp_avg_sq(torch::zeros_like(param, torch::kFloat));
  if (flags_.master_weights) {
    // Remainders start at zero (the master is the parameter); else a clone of the parameter.
    s->master_param(keeps_remainders(param) ? torch::zeros_like(param, torch::kShort)
                                            : param.detach().clone().to(torch::kFloat));
  }
  state_[state_key(param)] = std::move(s);
}

void FusedAdam::set_master_state(const torch::Tensor& param, const torch::Tensor& value) {
  auto it = state_.find(state_key(param));
  if (it == state_.end()) {
    initialize_state(param);
    it = state_.find(state_key(param));
  }
  auto& s = static_cast<FusedAdamState&>(*it->second);
  TORCH_CHECK(s.master_param().defined(), "FusedAdam: no master_param without master weights");
  TORCH_CHECK(value.scalar_type() == (keeps_remainders(param) ? torch::kShort : torch::kFloat),
              "FusedAdam: master_param of the wrong dtype");
  torch::NoGradGuard no_grad;
  s.master_param().copy_(value);
}

void FusedAdam::load_state_entry(const torch::Tensor& param, const torch::Tensor& exp_avg,
                                 const torch::Tensor& exp_avg_sq, const torch::Tensor& master) {
  torch::NoGradGuard no_grad;
  auto s = std::make_unique<FusedAdamState>();
  s->exp_avg(torch::empty_like(param, torch::kFloat).copy_(exp_avg));
  s->exp_avg_sq(torch::empty_like(param, torch::kFloat).copy_(exp_avg_sq));
  if (master.defined()) {
    if (keeps_remainders(param)) {
      TORCH_CHECK(master.scalar_type() == torch::kShort,
                  "AssertionError: remainders of a bf16 master must be int16");
      s->master_param(torch::zeros_like(param, torch::kShort).copy_(master));
    } else {
      s->master_param(torch::empty_like(param, torch::kFloat).copy_(master.to(torch::kFloat)));
    }
  }
  state_[state_key(param)] = std::move(s);
}

torch::Tensor FusedAdam::master_of(const torch::Tensor& param) const {
  const FusedAdamState* s = state_of(param);
  if (param.scalar_type() == torch::kFloat || !s || !s->master_param().defined()) {
    return param.detach().to(torch::kFloat);
  }
  return keeps_remainders(param) ? join_remainder_master(param.detach(), s->master_param())
                                 : s->master_param();
}

torch::Tensor join_remainder_master(const torch::Tensor& param_bf16, const torch::Tensor& rem) {
  // In int64 so that no step overflows: the high half (undoing the round-up of a negative
  // remainder, with the int16 wrap), shifted, above the remainder's 16 bits, then reinterpreted.
  const torch::Tensor r = rem.to(torch::kLong);
  torch::Tensor hi = (param_bf16.view(torch::kShort).to(torch::kLong) - r.lt(0).to(torch::kLong))
                         .bitwise_and(0xFFFF);
  torch::Tensor bits = hi * 65536 + r.bitwise_and(0xFFFF);
  bits = bits - bits.ge(int64_t{1} << 31).to(torch::kLong) * (int64_t{1} << 32);
  return bits.to(torch::kInt).view(torch::kFloat);
}

void split_remainder_master(const torch::Tensor& master, torch::Tensor& param_bf16,
                            torch::Tensor& rem) {
  const torch::Tensor bits = master.view(torch::kInt).to(torch::kLong).bitwise_and(int64_t{0xFFFFFFFF});
  const torch::Tensor lo = bits.bitwise_and(0xFFFF);
  const torch::Tensor up = lo.ge(0x8000).to(torch::kLong);
  const torch::Tensor hi = (bits.div(65536, "floor") + up).bitwise_and(0xFFFF);
  auto to_int16 = [](const torch::Tensor& u16) {
    return (u16 - u16.ge(0x8000).to(torch::kLong) * 65536).to(torch::kShort);
  };
  torch::NoGradGuard no_grad;
  param_bf16.view(torch::kShort).copy_(to_int16(hi));
  rem.copy_(to_int16(lo));
}

namespace {

// Multi-tensor apply's test of every tensor it is handed: contiguous in the default, the
// channels-last or the 3-D channels-last memory format.
bool dense_in_memory(const torch::Tensor& t) {
  return t.is_contiguous() || t.is_contiguous(torch::MemoryFormat::ChannelsLast) ||
         t.is_contiguous(torch::MemoryFormat::ChannelsLast3d);
}

}  // namespace

torch::Tensor FusedAdam::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  const torch::Tensor loss = closure_loss(closure);
  for (auto& group : param_groups_) {
    if (group.params().empty()) continue;
    auto& o = static_cast<FusedAdamOptions&>(group.options());
    o.step(o.step() + 1);
    // DS-04: one counter for the whole optimizer, advanced once per group.
    const int64_t step = behaviour_.has(Deviation::kDs04SharedStep) ? ++shared_step_ : o.step();
    const float bc1 =
        te_bias_correction(o.beta1(), step, behaviour_.has(Deviation::kBcDoubleBetas));
    const float bc2 =
        te_bias_correction(o.beta2(), step, behaviour_.has(Deviation::kBcDoubleBetas));
    // One unit of the kernel's work: an fp32 tensor stepped in place (the parameter, its master,
    // or a work copy), and how the result reaches the parameter afterwards.
    struct Work {
      torch::Tensor target, grad;
      FusedAdamState* state;
      std::function<void()> finish;
    };
    std::vector<Work> f16_work, f32_work;
    bool has_fp16 = false, has_bf16 = false;
    for (auto& p : group.params()) {
      if (!state_.count(state_key(p))) initialize_state(p);
      auto* s = static_cast<FusedAdamState*>(state_[state_key(p)].get());
      torch::Tensor grad = flags_.use_decoupled_grad && attrs_ ? attrs_->decoupled_grad(p)
                                                                : p.grad();
      if (!grad.defined()) continue;
      // Multi-tensor apply refuses strided tensors, parameters and grads alike, and takes
      // channels-last ones as they lie in memory.
      TORCH_CHECK(dense_in_memory(p) && dense_in_memory(grad), "A tensor was not contiguous.");
      Work w{torch::Tensor(), grad.to(torch::kFloat), s, nullptr};
      const torch::ScalarType dt = p.scalar_type();
      if (dt == torch::kHalf || dt == torch::kBFloat16) {
        has_fp16 = has_fp16 || dt == torch::kHalf;
        has_bf16 = has_bf16 || dt == torch::kBFloat16;
        torch::Tensor param = p.detach();
        if (flags_.master_weights && keeps_remainders(p)) {
          w.target = join_remainder_master(param, s->master_param());
          w.finish = [t = w.target, param, rem = s->master_param()]() mutable {
            split_remainder_master(t, param, rem);
          };
        } else if (flags_.master_weights) {
          w.target = s->master_param();
          w.finish = [t = w.target, param]() mutable { param.copy_(t); };
        } else {
          w.target = param.to(torch::kFloat);
          w.finish = [t = w.target, param]() mutable { param.copy_(t); };
        }
        f16_work.push_back(std::move(w));
      } else if (dt == torch::kFloat) {
        w.target = p.detach();
        f32_work.push_back(std::move(w));
      } else {
        TORCH_CHECK(false, "FusedAdam only support model weights in fp32, fp16, bf16 and fp8");
      }
      if (has_fp16 && has_bf16) {
        TORCH_CHECK(!flags_.store_param_remainders,
                    "FusedAdam doesn't support a mix of FP16/BF16 weights + Store param "
                    "remainder.");
        TORCH_CHECK(false, "FusedAdam does not support a mix of float16 and bfloat16 model weights.");
      }
    }
    // Multi-tensor apply: on the CPU a launch every kTensorsPerBatch tensors and a final one; an
    // empty tensor contributes no chunk, and PT-01 skipped the final launch when the group's last
    // parameter was empty.
    const bool last_empty = group.params().back().numel() == 0;
    // SHAPE-fused-first-dim: the first dimension's length taken for the element count.
    auto elements = [&](const torch::Tensor& t) {
      return behaviour_.has(Deviation::kFusedFirstDimOnly) && t.dim() > 0 ? t.size(0) : t.numel();
    };
    auto run = [&](std::vector<Work>& works) {
      std::vector<Work*> cpu_batch;
      auto flush = [&] {
        for (Work* t : cpu_batch) {
          fused_adam_cpu(t->target.data_ptr<float>(), t->grad.data_ptr<float>(),
                         t->state->exp_avg().data_ptr<float>(),
                         t->state->exp_avg_sq().data_ptr<float>(), elements(t->target),
                         static_cast<float>(o.lr()), static_cast<float>(o.beta1()),
                         static_cast<float>(o.beta2()), static_cast<float>(o.eps()),
                         static_cast<float>(o.weight_decay()), bc1, bc2,
                         behaviour_.has(Deviation::kDs01TailMomentum));
        }
        cpu_batch.clear();
      };
      std::vector<Work*> cuda_works;
      for (Work& w : works) {
        if (w.target.is_cuda()) {
          cuda_works.push_back(&w);
          continue;
        }
        cpu_batch.push_back(&w);
        if (cpu_batch.size() == kTensorsPerBatch) flush();
      }
      if (!(behaviour_.has(Deviation::kPt01SkipFlush) && last_empty)) flush();
      if (!cuda_works.empty()) {
#if SC_TORCH_HAS_CUDA
        std::vector<cuda::AdamTensor> tensors;
        for (Work* w : cuda_works) {
          tensors.push_back(cuda::AdamTensor{
              w->target.data_ptr<float>(), w->grad.data_ptr<float>(),
              w->state->exp_avg().data_ptr<float>(), w->state->exp_avg_sq().data_ptr<float>(),
              elements(w->target)});
        }
        const cuda::AdamArgs args{static_cast<float>(o.lr()),  static_cast<float>(o.beta1()),
                                  static_cast<float>(o.beta2()), static_cast<float>(o.eps()),
                                  static_cast<float>(o.weight_decay()), bc1, bc2};
        const std::string err =
            cuda::fused_adam_launch(tensors, args, c10::cuda::getCurrentCUDAStream().stream());
        TORCH_CHECK(err.empty(), "FusedAdam CUDA kernel: ", err);
#else
        TORCH_CHECK(false, "FusedAdam: CUDA tensors, but this build has no CUDA kernel");
#endif
      }
      for (Work& w : works) {
        if (w.finish) w.finish();
      }
    };
    run(f16_work);
    run(f32_work);
  }
  return loss;
}

}  // namespace sc::sut
