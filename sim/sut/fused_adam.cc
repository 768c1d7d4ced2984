#include "sim/sut/fused_adam.h"

#include <cmath>

#include "shardcheck/config.h"
#if SC_HAVE_CUDA && SC_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>

#include "sim/sut/cuda/fused_adam_kernel.h"
#define SC_TORCH_HAS_CUDA 1
#endif

namespace sc::sut {

namespace {
std::string state_key(const torch::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}
// Elements per block of the CPU loop; the remainder is the tail loop (where DS-01 lived).
constexpr int64_t kBlock = 8;
// Tensors per multi-tensor launch on the CPU (as the CUDA kernel's table).
constexpr size_t kTensorsPerBatch = 64;
}  // namespace

void fused_adam_cpu(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2,
                    bool mutant_tail_momentum) {
  auto element = [&](int64_t i, bool tail) {
    const float gi = g[i];
    // DS-01: the tail loop multiplied the first moment by itself times beta1.
    m[i] = (tail && mutant_tail_momentum ? beta1 * m[i] * m[i] : beta1 * m[i]) +
           (1.0f - beta1) * gi;
    v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    const float m_hat = m[i] / bc1;
    const float v_hat = v[i] / bc2;
    const float denom = std::sqrt(v_hat) + eps;
    const float update = m_hat / denom + weight_decay * p[i];
    p[i] = p[i] - lr * update;
  };
  const int64_t body = n - n % kBlock;
  for (int64_t b = 0; b < body; b += kBlock) {
    for (int64_t i = b; i < b + kBlock; ++i) element(i, false);
  }
  for (int64_t i = body; i < n; ++i) element(i, true);
}

FusedAdam::FusedAdam(std::vector<torch::optim::OptimizerParamGroup> groups,
                     const FusedAdamOptions& d, const TensorAttrs* attrs, bool use_decoupled_grad,
                     const Behaviour& behaviour)
    : torch::optim::Optimizer(std::move(groups), std::make_unique<FusedAdamOptions>(d)),
      attrs_(attrs),
      use_decoupled_grad_(use_decoupled_grad),
      behaviour_(behaviour) {}

const FusedAdamState* FusedAdam::state_of(const torch::Tensor& p) const {
  auto it = state_.find(state_key(p));
  return it == state_.end() ? nullptr : static_cast<const FusedAdamState*>(it->second.get());
}

void FusedAdam::set_state(const torch::Tensor& p, torch::Tensor exp_avg, torch::Tensor exp_avg_sq) {
  auto s = std::make_unique<FusedAdamState>();
  s->exp_avg(std::move(exp_avg));
  s->exp_avg_sq(std::move(exp_avg_sq));
  state_[state_key(p)] = std::move(s);
}

torch::Tensor FusedAdam::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    if (group.params().empty()) continue;
    auto& o = static_cast<FusedAdamOptions&>(group.options());
    o.step(o.step() + 1);
    // DS-04: one counter for the whole optimizer, advanced once per group.
    const int64_t step = behaviour_.mutant_ds04_shared_step ? ++shared_step_ : o.step();
    const double bc1 = 1.0 - std::pow(o.beta1(), static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(o.beta2(), static_cast<double>(step));
    std::vector<torch::Tensor> cuda_grads;  // kept alive until the launch
    std::vector<torch::Tensor> cuda_params;
    struct Pending {
      torch::Tensor p, g;
      FusedAdamState* s;
    };
    std::vector<Pending> cpu_batch;
    auto flush = [&] {
      for (Pending& t : cpu_batch) {
        fused_adam_cpu(t.p.data_ptr<float>(), t.g.data_ptr<float>(),
                       t.s->exp_avg().data_ptr<float>(), t.s->exp_avg_sq().data_ptr<float>(),
                       t.p.numel(), static_cast<float>(o.lr()), static_cast<float>(o.beta1()),
                       static_cast<float>(o.beta2()), static_cast<float>(o.eps()),
                       static_cast<float>(o.weight_decay()), static_cast<float>(bc1),
                       static_cast<float>(bc2), behaviour_.mutant_ds01_tail_momentum);
      }
      cpu_batch.clear();
    };
    for (auto& p : group.params()) {
      auto& slot = state_[state_key(p)];
      if (!slot) {
        auto s = std::make_unique<FusedAdamState>();
        s->exp_avg(torch::zeros_like(p, torch::kFloat));
        s->exp_avg_sq(torch::zeros_like(p, torch::kFloat));
        slot = std::move(s);
      }
      torch::Tensor grad = use_decoupled_grad_ && attrs_ ? attrs_->decoupled_grad(p) : p.grad();
      if (!grad.defined()) continue;
      TORCH_CHECK(p.scalar_type() == torch::kFloat,
                  "FusedAdam without master weights steps fp32 parameters only");
      TORCH_CHECK(p.is_contiguous(), "FusedAdam: parameters must be contiguous");
      torch::Tensor g = grad.to(torch::kFloat).contiguous();
      if (p.is_cuda()) {
        cuda_params.push_back(p);
        cuda_grads.push_back(g);
        continue;
      }
      cpu_batch.push_back({p, g, static_cast<FusedAdamState*>(slot.get())});
      // Multi-tensor apply: a launch every kTensorsPerBatch tensors, and a final flush. An empty
      // tensor contributes no chunk; PT-01 skipped the final flush when the last one was empty.
      if (cpu_batch.size() == kTensorsPerBatch) flush();
    }
    const bool last_empty = !group.params().empty() && group.params().back().numel() == 0;
    if (!(behaviour_.mutant_pt01_skip_flush && last_empty)) flush();
    if (!cuda_params.empty()) {
#if SC_TORCH_HAS_CUDA
      std::vector<cuda::AdamTensor> tensors;
      for (size_t k = 0; k < cuda_params.size(); ++k) {
        auto& s = static_cast<FusedAdamState&>(*state_[state_key(cuda_params[k])]);
        tensors.push_back(cuda::AdamTensor{
            cuda_params[k].data_ptr<float>(), cuda_grads[k].data_ptr<float>(),
            s.exp_avg().data_ptr<float>(), s.exp_avg_sq().data_ptr<float>(),
            cuda_params[k].numel()});
      }
      const cuda::AdamArgs args{static_cast<float>(o.lr()),  static_cast<float>(o.beta1()),
                                static_cast<float>(o.beta2()), static_cast<float>(o.eps()),
                                static_cast<float>(o.weight_decay()), static_cast<float>(bc1),
                                static_cast<float>(bc2)};
      const std::string err =
          cuda::fused_adam_launch(tensors, args, c10::cuda::getCurrentCUDAStream().stream());
      TORCH_CHECK(err.empty(), "FusedAdam CUDA kernel: ", err);
#else
      TORCH_CHECK(false, "FusedAdam: CUDA tensors, but this build has no CUDA kernel");
#endif
    }
  }
  return loss;
}

}  // namespace sc::sut
