#include "sim/engines/fused_host_adamw.h"

#include "sim/engines/parallel.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "sim/engines/adamw_kernel.h"
#include "sim/engines/pieces.h"
#include "sim/port/optim_state.h"

namespace sc::engines {

namespace {

void* state_key(const torch::Tensor& p) { return sc::sut::optim_state_key(p); }

// `strided_ok`: the ENG-strided-fast-path mutant, which forgets the contiguity test.
bool plain_fp32(const torch::Tensor& t, int64_t numel, bool strided_ok = false) {
  return t.defined() && t.device().is_cpu() && t.layout() == torch::kStrided &&
         t.scalar_type() == torch::kFloat && (strided_ok || t.is_contiguous()) &&
         t.numel() == numel;
}

// One parameter's share of a step.
struct Work {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  AdamWScalars s;
};

std::atomic<int64_t> g_fused_steps{0};

}  // namespace

std::optional<int64_t> fused_adamw_body_width() {
  static const std::optional<int64_t> kWidth = []() -> std::optional<int64_t> {
    torch::NoGradGuard no_grad;
    constexpr int64_t n = 1037;  // a body and a tail for every vector width
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    torch::Tensor p0 = torch::linspace(-1.0, 1.0, n, torch::kFloat).sin();
    std::vector<torch::Tensor> grads;
    for (int k = 1; k <= 3; ++k) {
      grads.push_back(torch::linspace(-0.3 * k, 0.2 * k, n, torch::kFloat).cos() * 0.1);
    }
    torch::Tensor p = p0.clone();
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<torch::Tensor>{p});
    sut::TorchAdamW ref(std::move(groups), /*fused=*/true, sut::Behaviour{},
                        torch::optim::AdamWOptions(lr).betas({b1, b2}).eps(eps).weight_decay(wd));
    for (const auto& g : grads) {
      p.mutable_grad() = g;
      ref.step();
    }
    for (int64_t width : {8, 16, 4, 32, 1}) {  // AVX2, AVX-512, 128-bit, wider, scalar
      torch::Tensor q = p0.clone();
      std::vector<float> m(n, 0.0f), v(n, 0.0f);
      for (int64_t k = 0; k < 3; ++k) {
        const AdamWScalars s = adamw_scalars(lr, b1, b2, eps, wd, k + 1);
        adamw_step_span(q.data_ptr<float>(), grads[k].data_ptr<float>(), m.data(), v.data(), n, s,
                        n - n % width);
      }
      if (std::memcmp(q.data_ptr<float>(), p.data_ptr<float>(), n * sizeof(float)) == 0) {
        return width;
      }
    }
    return std::nullopt;
  }();
  return kWidth;
}

FusedHostAdamW::FusedHostAdamW(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                               torch::optim::AdamWOptions defaults, bool strided_fast_path)
    : sut::TorchAdamW(std::move(param_groups), /*fused=*/true, sut::Behaviour{},
                      std::move(defaults)),
      strided_fast_path_(strided_fast_path) {}

FusedHostAdamW::FusedHostAdamW(std::vector<torch::Tensor> params,
                               torch::optim::AdamWOptions defaults)
    : FusedHostAdamW(std::vector<torch::optim::OptimizerParamGroup>{
                         torch::optim::OptimizerParamGroup(std::move(params))},
                     std::move(defaults)) {}

int64_t FusedHostAdamW::fused_steps_taken() { return g_fused_steps.load(); }

bool FusedHostAdamW::fast_path_applies(bool strided_ok) const {
  auto has_grad = [](const torch::Tensor& p) { return p.grad().defined(); };
  if (!applies(has_grad, strided_ok)) return false;
  for (const auto& group : param_groups_) {
    for (const auto& p : group.params()) {
      const torch::Tensor& g = p.grad();
      if (!g.defined()) continue;
      if (!plain_fp32(g, p.numel(), strided_ok)) return false;
      // A grad sharing memory with its parameter would be read after it is written.
      if (p.numel() > 0 && p.data_ptr() == g.data_ptr()) return false;
    }
  }
  return true;
}

bool FusedHostAdamW::external_step_applies(
    const std::function<bool(const torch::Tensor&)>& has_grad) const {
  return applies(has_grad, strided_fast_path_);
}

bool FusedHostAdamW::applies(const std::function<bool(const torch::Tensor&)>& has_grad,
                             bool strided_ok) const {
  if (!fused_adamw_body_width()) return false;
  for (const auto& group : param_groups_) {
    if (static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad()) return false;
    for (const auto& p : group.params()) {
      if (!has_grad(p)) continue;
      if (!plain_fp32(p, p.numel(), strided_ok)) return false;
      auto it = state_.find(state_key(p));
      if (it == state_.end()) continue;
      const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      if (!plain_fp32(st.exp_avg(), p.numel(), strided_ok) ||
          !plain_fp32(st.exp_avg_sq(), p.numel(), strided_ok)) {
        return false;
      }
    }
  }
  return true;
}

std::vector<FusedHostAdamW::Span> FusedHostAdamW::begin_external_step(
    const std::function<bool(const torch::Tensor&)>& has_grad) {
  std::vector<Span> spans;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!has_grad(p)) continue;
      Span span;
      void* const k = state_key(p);
      auto it = state_.find(k);
      if (it == state_.end()) {
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(0);
        st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        it = state_.emplace(k, std::move(st)).first;
        span.fresh = true;
      }
      auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
      st.step(st.step() + 1);
      span.param = p;
      span.exp_avg = st.exp_avg();
      span.exp_avg_sq = st.exp_avg_sq();
      span.scalars = adamw_scalars(o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()),
                                   o.eps(), o.weight_decay(), st.step());
      if (span.scalars.apply_decay) p.unsafeGetTensorImpl()->bump_version();
      p.unsafeGetTensorImpl()->bump_version();
      span.exp_avg.unsafeGetTensorImpl()->bump_version();
      span.exp_avg_sq.unsafeGetTensorImpl()->bump_version();
      spans.push_back(std::move(span));
    }
  }
  last_step_fused_ = true;
  g_fused_steps.fetch_add(1);
  return spans;
}

void FusedHostAdamW::step_span(const Span& span, const float* grad, int64_t lo, int64_t hi) {
  const int64_t n = span.param.numel();
  const int64_t tail_from = n - n % *fused_adamw_body_width();
  float* p = span.param.data_ptr<float>();
  float* m = span.exp_avg.data_ptr<float>();
  float* v = span.exp_avg_sq.data_ptr<float>();
  at::parallel_for(lo, hi, kAdamWParallelGrain, [&](int64_t begin, int64_t end) {
    adamw_step_span(p + begin, grad + (begin - lo), m + begin, v + begin, end - begin, span.scalars,
                    tail_from - begin);
  });
}

torch::Tensor FusedHostAdamW::step(LossClosure closure) {
  const std::optional<int64_t> width = fused_adamw_body_width();
  if (!width || !fast_path_applies(strided_fast_path_)) {
    last_step_fused_ = false;
    if (width && fast_path_applies(/*strided_ok=*/true)) return step_through_copies(closure);
    return sut::TorchAdamW::step(closure);
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor loss = sut::closure_loss(closure);
  // The per-parameter bookkeeping of torch's step, in its order (parameters without a grad
  // are skipped, state is created zeroed at the first step, the count advanced before the
  // bias corrections), then one pass over all the elements.
  const std::vector<Span> spans =
      begin_external_step([](const torch::Tensor& p) { return p.grad().defined(); });
  std::vector<Work> work;
  std::vector<int64_t> ends;  // running element count after each work item
  int64_t total = 0;
  for (const Span& span : spans) {
    const int64_t n = span.param.numel();
    if (n == 0) continue;
    work.push_back({span.param.data_ptr<float>(), span.param.grad().data_ptr<float>(),
                    span.exp_avg.data_ptr<float>(), span.exp_avg_sq.data_ptr<float>(), n,
                    span.scalars});
    total += n;
    ends.push_back(total);
  }
  at::parallel_for(0, total, kAdamWParallelGrain, [&](int64_t begin, int64_t end) {
    for_each_piece(ends, begin, end, [&](size_t k, int64_t lo, int64_t hi) {
      const Work& w = work[k];
      adamw_step_span(w.p + lo, w.g + lo, w.m + lo, w.v + lo, hi - lo, w.s,
                      w.n - w.n % *width - lo);
    });
  });
  return loss;
}

// torch 2.11's fused CPU kernel walks a non-contiguous parameter (and its moments, made with its
// strides) in memory order but its grad in logical order, so elements get other elements'
// grads: a transposed 4x3 parameter moved by 0.2 where the single-tensor loop moved it by
// 0.1. The engine steps such tensors through contiguous copies: each element gets its own grad,
// with the fused kernel's arithmetic.
torch::Tensor FusedHostAdamW::step_through_copies(LossClosure closure) {
  torch::NoGradGuard no_grad;
  const torch::Tensor loss = sut::closure_loss(closure);
  for (const Span& s : begin_external_step([](const torch::Tensor& p) { return p.grad().defined(); })) {
    Span c = s;
    c.param = s.param.contiguous();
    c.exp_avg = s.exp_avg.contiguous();
    c.exp_avg_sq = s.exp_avg_sq.contiguous();
    const torch::Tensor grad = s.param.grad().contiguous();
    step_span(c, grad.data_ptr<float>(), 0, c.param.numel());
    if (!c.param.is_same(s.param)) s.param.copy_(c.param);
    if (!c.exp_avg.is_same(s.exp_avg)) s.exp_avg.copy_(c.exp_avg);
    if (!c.exp_avg_sq.is_same(s.exp_avg_sq)) s.exp_avg_sq.copy_(c.exp_avg_sq);
  }
  last_step_fused_ = false;
  return loss;
}

}  // namespace sc::engines
