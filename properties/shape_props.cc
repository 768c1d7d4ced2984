#include "properties/shape_props.h"

#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "model/adamw.h"
#include "model/offload_plan.h"
#include "properties/fused_adam_props.h"
#include "properties/gen/choice.h"
#include "properties/rank_checks.h"
#include "properties/support.h"
#include "sim/engines/adamw_kernel.h"
#include "sim/engines/engines.h"
#include "sim/engines/fused_host_adamw.h"
#include "sim/port/fused_adam.h"
#include "sim/port/hybrid_optimizer.h"
#include "sim/rig/fma_probe.h"
#include "sim/rig/rng.h"
#include "sim/port/optim_state.h"
#include "sim/port/torch_adamw.h"

namespace sc::props {

namespace {

// How a drawn tensor lies in memory: the base tensor itself, or a strided view of it.
enum class Layout { kContiguous, kTransposed, kNarrowed, kEveryOtherRow, kChannelsLast };

struct DrawnShape {
  std::vector<int64_t> sizes;  // of the base tensor
  Layout layout = Layout::kContiguous;
};

// 1-D sizes around the kernels' boundaries: FusedAdam's 4-wide loads and its multi-tensor chunk
// of 2048 * 32 elements; the fused host AdamW's vector widths (8 and 16 floats, unrolled twice)
// and its parallel grain.
std::vector<int64_t> boundary_sizes() {
  std::vector<int64_t> out{1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65};
  for (int64_t edge : {int64_t{2048} * 32, engines::kAdamWParallelGrain}) {
    for (int64_t d : {-1, 0, 1}) out.push_back(edge + d);
  }
  return out;
}

rc::Gen<int64_t> boundary_size() {
  std::vector<std::pair<size_t, int64_t>> entries;
  for (int64_t n : boundary_sizes()) entries.push_back({1, n});
  return gen::weighted_choice(entries);
}

rc::Gen<DrawnShape> contiguous_shape(bool zero_size) {
  return rc::gen::map(rc::gen::mapcat(rc::gen::inRange(2, 5),
                                      [zero_size](int rank) {
                                        return rc::gen::container<std::vector<int64_t>>(
                                            static_cast<size_t>(rank),
                                            rc::gen::inRange<int64_t>(zero_size ? 0 : 1, 8));
                                      }),
                      [](std::vector<int64_t> sizes) { return DrawnShape{sizes}; });
}

rc::Gen<DrawnShape> strided_shape() {
  return rc::gen::apply(
      [](int64_t rows, int64_t cols, Layout layout) { return DrawnShape{{rows, cols}, layout}; },
      rc::gen::inRange<int64_t>(2, 9), rc::gen::inRange<int64_t>(2, 9),
      gen::weighted_choice<Layout>(
          {{1, Layout::kTransposed}, {1, Layout::kNarrowed}, {1, Layout::kEveryOtherRow}}));
}

// A 4-D tensor in the channels-last memory format, which multi-tensor apply takes as dense.
rc::Gen<DrawnShape> channels_last_shape() {
  return rc::gen::map(
      rc::gen::container<std::vector<int64_t>>(4, rc::gen::inRange<int64_t>(2, 5)),
      [](std::vector<int64_t> sizes) { return DrawnShape{sizes, Layout::kChannelsLast}; });
}

// A shape: 1-D at a boundary, multi-dimensional, with a zero dimension, or (`views`) a strided
// view or a channels-last tensor.
rc::Gen<DrawnShape> shape(bool views) {
  const size_t view_weight = views ? 1 : 0;
  return gen::weighted_one_of<DrawnShape>(
      {{3, rc::gen::map(boundary_size(), [](int64_t n) { return DrawnShape{{n}}; })},
       {4, contiguous_shape(false)},
       {1, contiguous_shape(true)},
       {view_weight, strided_shape()},
       {view_weight, channels_last_shape()}});
}

// One to five shapes, drawn at full size from the first case on (RapidCheck's ranges grow with
// the case number; the boundaries matter from the start).
rc::Gen<std::vector<DrawnShape>> shapes(bool views) {
  return rc::gen::resize(
      rc::kNominalSize, rc::gen::mapcat(rc::gen::inRange<size_t>(1, 6), [views](size_t n) {
        return rc::gen::container<std::vector<DrawnShape>>(n, shape(views));
      }));
}

bool channels_last(const torch::Tensor& t) {
  return !t.is_contiguous() && t.is_contiguous(torch::MemoryFormat::ChannelsLast);
}

std::string text(const torch::Tensor& t) {
  std::ostringstream os;
  os << t.sizes()
     << (t.is_contiguous() ? " contiguous" : channels_last(t) ? " channels-last" : " strided")
     << " (" << t.numel()
     << " elements)";
  return os.str();
}

// A fresh tensor of `s`'s base sizes filled from `rng`, then viewed as `s` says, on `device`.
torch::Tensor make_tensor(const DrawnShape& s, rig::SplitMix64& rng, torch::Device device) {
  int64_t n = 1;
  for (int64_t d : s.sizes) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = rng.symmetric_unit();
  const torch::Tensor base = torch::tensor(v).reshape(s.sizes).to(device);
  switch (s.layout) {
    case Layout::kContiguous:
      return base;
    case Layout::kTransposed:
      return base.t();
    case Layout::kNarrowed:
      return base.narrow(1, 0, s.sizes[1] - 1);
    case Layout::kEveryOtherRow:
      return base.slice(0, 0, s.sizes[0], 2);
    case Layout::kChannelsLast:
      return base.contiguous(torch::MemoryFormat::ChannelsLast);
  }
  return base;
}

// `t`'s elements in logical (row-major) order.
std::vector<float> values(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().cpu().contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

std::vector<float> random_values(size_t n, rig::SplitMix64& rng) {
  std::vector<float> v(n);
  for (float& x : v) x = rng.symmetric_unit();
  return v;
}

// A grad of `like`'s shape holding `v`: in `like`'s memory format (row-major or channels-last),
// or (`strided`) every other row of a base twice as long in its first dimension.
torch::Tensor grad_like(const torch::Tensor& like, const std::vector<float>& v, bool strided) {
  torch::Tensor g = torch::tensor(v).reshape(like.sizes()).to(like.device());
  if (channels_last(like)) g = g.contiguous(torch::MemoryFormat::ChannelsLast);
  if (!strided || like.dim() == 0) return g;
  std::vector<int64_t> sizes = like.sizes().vec();
  sizes[0] *= 2;
  torch::Tensor view = torch::zeros(sizes, g.options()).slice(0, 0, sizes[0], 2);
  view.copy_(g);
  return view;
}

// The first element where `got` and `want` differ, as "element k: got x, want y", or nullopt.
std::optional<std::string> first_difference(const std::vector<float>& got,
                                            const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return std::to_string(got.size()) + " elements, want " + std::to_string(want.size());
  }
  for (size_t k = 0; k < got.size(); ++k) {
    if (std::memcmp(&got[k], &want[k], sizeof(float)) != 0) {
      std::ostringstream os;
      os.precision(9);
      os << "element " << k << ": got " << got[k] << ", want " << want[k];
      return os.str();
    }
  }
  return std::nullopt;
}

void require_equal(const std::vector<float>& got, const std::vector<float>& want,
                   const std::string& what, const sut::Behaviour& b) {
  if (const auto diff = first_difference(got, want)) {
    RC_LOG() << under_test(b) << ": " << what << ": " << *diff << "\n";
    RC_FAIL(what + " differs from the reference");
  }
}

// Tags the case by the kinds of tensor it holds.
void classify_shapes(const std::vector<torch::Tensor>& tensors) {
  bool multi = false, strided = false, empty = false, large = false;
  for (const torch::Tensor& t : tensors) {
    multi = multi || t.dim() > 1;
    strided = strided || !t.is_contiguous();
    empty = empty || t.numel() == 0;
    large = large || t.numel() >= engines::kAdamWParallelGrain;
  }
  RC_CLASSIFY(multi, "multi-dimensional");
  RC_CLASSIFY(strided, "strided or channels-last");
  RC_CLASSIFY(empty, "zero-size");
  RC_CLASSIFY(large, "a parallel grain or more");
}

// Whether multi-tensor apply takes `t`: dense in the row-major or a channels-last format.
bool dense(const torch::Tensor& t) {
  return t.is_contiguous() || t.is_contiguous(torch::MemoryFormat::ChannelsLast) ||
         t.is_contiguous(torch::MemoryFormat::ChannelsLast3d);
}

// Parameters (leaves on the device) of the drawn shapes, and their values in logical order.
void make_params(const std::vector<DrawnShape>& drawn, rig::SplitMix64& rng,
                 std::vector<torch::Tensor>& params, std::vector<std::vector<float>>& values_of) {
  for (const DrawnShape& s : drawn) {
    params.push_back(make_tensor(s, rng, device()).requires_grad_(true));
    values_of.push_back(values(params.back()));
  }
}

}  // namespace

void run_fused_adam_shapes_property(const sut::Behaviour& behaviour) {
  const std::vector<DrawnShape> drawn = *shapes(/*views=*/true);
  const bool strided_grad = *gen::weighted_choice<bool>({{7, false}, {1, true}});
  const int steps = *rc::gen::inRange(1, 4);
  rig::SplitMix64 rng(*rc::gen::arbitrary<uint64_t>());
  std::vector<torch::Tensor> params;
  std::vector<std::vector<float>> want;
  make_params(drawn, rng, params, want);
  const model::AdamWHyper& h = kFusedAdamHyper;
  const auto fused = one_group_fused_adam(params, behaviour);
  sut::FusedAdam& opt = *fused;
  std::vector<model::AdamWState32> states(params.size());
  for (int k = 1; k <= steps; ++k) {
    bool strided = false;
    for (size_t t = 0; t < params.size(); ++t) {
      const std::vector<float> g = random_values(want[t].size(), rng);
      params[t].mutable_grad() = grad_like(params[t], g, strided_grad && t == 0);
      strided = strided || !dense(params[t]) || !dense(params[t].grad());
      model::adamw_step_fused(want[t], g, states[t], h, k);
    }
    RC_CLASSIFY(strided, "strided tensor refused");
    if (k == 1) classify_shapes(params);
    if (strided) {
      const std::vector<std::vector<float>> before = [&] {
        std::vector<std::vector<float>> out;
        for (const auto& p : params) out.push_back(values(p));
        return out;
      }();
      std::string raised;
      try {
        opt.step();
      } catch (const c10::Error& e) {
        raised = e.msg();
      }
      RC_LOG() << under_test(behaviour) << ": a strided tensor in the list; step raised '"
               << raised.substr(0, raised.find('\n')) << "'\n";
      RC_ASSERT(raised.find("A tensor was not contiguous.") != std::string::npos);
      for (size_t t = 0; t < params.size(); ++t) {
        require_equal(values(params[t]), before[t], "tensor " + std::to_string(t) + " " +
                                                        text(params[t]) + " after the refusal",
                      behaviour);
      }
      return;
    }
    opt.step();
    for (size_t t = 0; t < params.size(); ++t) {
      require_equal(values(params[t]), want[t],
                    "step " + std::to_string(k) + ", tensor " + std::to_string(t) + " " +
                        text(params[t]),
                    behaviour);
    }
  }
}

namespace {

// Two param groups over `params` (weight decay on, then off, other betas and eps), split at
// `split`, as LibTorch's AdamW options.
using Groups = std::vector<torch::optim::OptimizerParamGroup>;

Groups adamw_groups(const std::vector<torch::Tensor>& params, size_t split) {
  Groups groups;
  const std::vector<torch::Tensor> a(params.begin(), params.begin() + static_cast<long>(split));
  const std::vector<torch::Tensor> b(params.begin() + static_cast<long>(split), params.end());
  if (!a.empty()) {
    groups.emplace_back(a, std::make_unique<torch::optim::AdamWOptions>(
                               torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).weight_decay(
                                   0.1)));
  }
  if (!b.empty()) {
    groups.emplace_back(b, std::make_unique<torch::optim::AdamWOptions>(
                               torch::optim::AdamWOptions(3e-3).eps(1e-6).weight_decay(0.0)));
  }
  return groups;
}

void* state_key(const torch::Tensor& p) { return sc::sut::optim_state_key(p); }

// exp_avg and exp_avg_sq of `p` in `opt`, in logical order.
std::pair<std::vector<float>, std::vector<float>> moments(const torch::optim::AdamW& opt,
                                                          const torch::Tensor& p) {
  const auto& st =
      static_cast<const torch::optim::AdamWParamState&>(*opt.state().at(state_key(p)));
  return {values(st.exp_avg()), values(st.exp_avg_sq())};
}

}  // namespace

void run_fused_host_adamw_shapes_property(const sut::Behaviour& behaviour) {
  const std::vector<DrawnShape> drawn = *shapes(/*views=*/true);
  const size_t split = *rc::gen::inRange<size_t>(0, drawn.size() + 1);
  const int steps = *rc::gen::inRange(1, 4);
  rig::SplitMix64 rng(*rc::gen::arbitrary<uint64_t>());
  std::vector<torch::Tensor> ours, theirs;
  for (const DrawnShape& s : drawn) {
    const uint64_t seed = rng.next();
    rig::SplitMix64 a(seed), b(seed);
    ours.push_back(make_tensor(s, a, torch::kCPU));
    // Contiguous copies: torch's fused kernel mispairs a strided parameter's elements with its
    // grad's (engines::FusedHostAdamW::step_through_copies), so the logical values are stepped.
    theirs.push_back(make_tensor(s, b, torch::kCPU).contiguous());
  }
  engines::FusedHostAdamW opt(adamw_groups(ours, split), {},
                              behaviour.has(sut::Deviation::kEngStridedFastPath));
  // What it stands in for: Megatron's host `torch.optim.AdamW(fused=True)`.
  sut::TorchAdamW ref(adamw_groups(theirs, split), /*fused=*/true, sut::Behaviour{});
  bool fused = false;
  for (int k = 1; k <= steps; ++k) {
    for (size_t t = 0; t < ours.size(); ++t) {
      const std::vector<float> g = random_values(static_cast<size_t>(ours[t].numel()), rng);
      ours[t].mutable_grad() = grad_like(ours[t], g, false);
      theirs[t].mutable_grad() = grad_like(theirs[t], g, false);
    }
    opt.step();
    ref.step();
    fused = fused || opt.last_step_was_fused();
    for (size_t t = 0; t < ours.size(); ++t) {
      const std::string at =
          "step " + std::to_string(k) + ", tensor " + std::to_string(t) + " " + text(ours[t]);
      require_equal(values(ours[t]), values(theirs[t]), at + " (vs torch's fused AdamW)", behaviour);
      const auto [m, v] = moments(opt, ours[t]);
      const auto [m_ref, v_ref] = moments(ref, theirs[t]);
      require_equal(m, m_ref, at + " exp_avg", behaviour);
      require_equal(v, v_ref, at + " exp_avg_sq", behaviour);
    }
  }
  RC_CLASSIFY(fused, "fused pass");
  classify_shapes(ours);
}

namespace {

// The hybrid optimizer's arguments a case draws.
struct HdoDraw {
  double fraction = 0.5;
  bool overlap = true;
  bool torch_adamw_on_accelerator = false;  // the configuration without Transformer Engine
  size_t split = 0;                         // params before it in group 0 (weight decay 0.1)
};

rc::Gen<double> offload_fraction() {
  return gen::weighted_one_of<double>(
      {{1, rc::gen::just(0.5)},
       {1, rc::gen::just(0.0)},
       {1, rc::gen::just(1.0)},
       {3, rc::gen::map(rc::gen::inRange(0, 101), [](int x) { return x / 100.0; })}});
}

sut::HdoOptions hdo_group(double weight_decay) {
  sut::HdoOptions o;
  return o.lr(1e-2).beta1(0.9).beta2(0.95).eps(1e-8).weight_decay(weight_decay);
}

}  // namespace

namespace {

// The hybrid optimizer's groups over `params`: those before `split` with weight decay 0.1, the
// rest without; an empty group is left out.
Groups hdo_groups(const std::vector<torch::Tensor>& params, size_t split) {
  Groups groups;
  const auto at = [&](size_t k) { return params.begin() + static_cast<long>(k); };
  if (split > 0) {
    groups.emplace_back(std::vector<torch::Tensor>(at(0), at(split)),
                        std::make_unique<sut::HdoOptions>(hdo_group(0.1)));
  }
  if (split < params.size()) {
    groups.emplace_back(std::vector<torch::Tensor>(at(split), at(params.size())),
                        std::make_unique<sut::HdoOptions>(hdo_group(0.0)));
  }
  return groups;
}

// Whether the model's offload plan offloads each of `params` (fp32, grouped as hdo_groups).
std::vector<bool> planned_offload(const std::vector<torch::Tensor>& params, const HdoDraw& d) {
  std::vector<std::vector<model::HdoTensor>> groups(2);
  for (size_t t = 0; t < params.size(); ++t) {
    groups[t < d.split ? 0 : 1].push_back({params[t].numel(), model::DType::kFloat32});
  }
  if (groups[0].empty()) groups.erase(groups.begin());
  if (groups.back().empty()) groups.pop_back();
  model::HdoConfig config;
  config.offload_fraction = d.fraction;
  config.overlap_cpu_optimizer_d2h_h2d = d.overlap;
  config.accelerator_is_cuda = device().is_cuda();
  const model::OffloadPlan plan = model::plan_offload(groups, config);
  RC_CLASSIFY(plan.num_cpu_optimizers > 0 && plan.has_accelerator_optimizer, "split");
  std::vector<bool> offloaded;
  for (const auto& g : plan.placements) {
    for (const auto& p : g) offloaded.push_back(p.offloaded);
  }
  return offloaded;
}

void require_planned_split(const sut::HybridDeviceOptimizer& hdo,
                           const std::vector<torch::Tensor>& params,
                           const std::vector<bool>& offloaded, const sut::Behaviour& b) {
  for (size_t t = 0; t < params.size(); ++t) {
    if (hdo.is_offloaded(params[t]) == offloaded[t]) continue;
    RC_LOG() << under_test(b) << ": param " << t << " " << text(params[t])
             << (offloaded[t] ? " kept on the accelerator, the plan offloads it\n"
                              : " offloaded, the plan keeps it on the accelerator\n");
    RC_FAIL("offload split differs from the model's plan");
  }
}

}  // namespace

void run_hdo_whole_params_property(const sut::Behaviour& behaviour) {
  const std::vector<DrawnShape> drawn = *shapes(/*views=*/false);
  HdoDraw d;
  d.fraction = *offload_fraction();
  d.overlap = *rc::gen::arbitrary<bool>();
  d.torch_adamw_on_accelerator = !device().is_cuda() && *rc::gen::arbitrary<bool>();
  d.split = *rc::gen::inRange<size_t>(0, drawn.size() + 1);
  const int steps = *rc::gen::inRange(1, 4);
  rig::SplitMix64 rng(*rc::gen::arbitrary<uint64_t>());
  std::vector<torch::Tensor> params;
  std::vector<std::vector<float>> want;
  make_params(drawn, rng, params, want);
  classify_shapes(params);
  sut::HdoOptions defaults = hdo_group(0.0);
  defaults.offload_fraction(d.fraction)
      .param_update_in_fp32(true)
      .overlap_cpu_optimizer_d2h_h2d(d.overlap)
      .gpu_optimizer_cls(d.torch_adamw_on_accelerator ? sut::AcceleratorAdam::kTorchAdamW
                                                      : sut::AcceleratorAdam::kFusedAdam);
  sut::TensorAttrs attrs;
  const auto engine = engines::engine_for(behaviour);
  sut::HybridDeviceOptimizer hdo(hdo_groups(params, d.split), defaults, device(), &attrs,
                                 behaviour, nullptr, engine.get());
  const std::vector<bool> offloaded = planned_offload(params, d);
  require_planned_split(hdo, params, offloaded, behaviour);
  const int width = torch_kernels().fused_width;
  std::vector<model::AdamWState32> states(params.size());
  for (int k = 1; k <= steps; ++k) {
    for (size_t t = 0; t < params.size(); ++t) {
      const std::vector<float> g = random_values(want[t].size(), rng);
      params[t].mutable_grad() = grad_like(params[t], g, false);
      const model::AdamWHyper h{1e-2, 0.9, 0.95, 1e-8, t < d.split ? 0.1 : 0.0};
      if (offloaded[t] || d.torch_adamw_on_accelerator) {
        // Both sides' torch AdamW receive the factory's `fused=True`.
        model::adamw_step_torch_fused_cpu(want[t], g, states[t], h, width);
      } else {
        model::adamw_step_fused(want[t], g, states[t], h, k);
      }
    }
    hdo.step();
    for (size_t t = 0; t < params.size(); ++t) {
      require_equal(values(params[t]), want[t],
                    "step " + std::to_string(k) + ", param " + std::to_string(t) + " " +
                        text(params[t]) + (offloaded[t] ? " (offloaded)" : " (accelerator)"),
                    behaviour);
    }
  }
}

}  // namespace sc::props
