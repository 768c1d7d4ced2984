// HybridDeviceOptimizer (hybrid_optimizer.py): construction, the sub-optimizers and their
// groups, the grads they step on, and the step. Its state is hybrid_optimizer_state.cc.
#include "sim/port/hybrid_optimizer.h"

#include <set>
#include <stdexcept>

#include "sim/port/fused_adam.h"
#include "sim/port/hybrid_optimizer_impl.h"
#include "sim/port/placement.h"
#include "sim/port/torch_adamw.h"
#include "sim/port/optim_state.h"

namespace sc::sut {

namespace {

using hdo_detail::adamw_state;

const HdoOptions& hdo(const torch::optim::OptimizerOptions& o) {
  return static_cast<const HdoOptions&>(o);
}

torch::optim::AdamWOptions adamw_options(const HdoOptions& o) {
  return torch::optim::AdamWOptions(o.lr())
      .betas({o.beta1(), o.beta2()})
      .eps(o.eps())
      .weight_decay(o.weight_decay());
}

FusedAdamOptions fused_options(const HdoOptions& o) {
  return FusedAdamOptions().lr(o.lr()).beta1(o.beta1()).beta2(o.beta2()).eps(o.eps()).weight_decay(
      o.weight_decay());
}

template <typename F>
void for_each_param(torch::optim::Optimizer& opt, F f) {
  for (auto& g : opt.param_groups()) {
    for (auto& p : g.params()) f(p);
  }
}

// The moments `sub` keeps for `inner` (none before its first step).
std::vector<torch::Tensor> moments(torch::optim::Optimizer* sub, const torch::Tensor& inner) {
  if (auto* fused = dynamic_cast<FusedAdam*>(sub)) {
    const FusedAdamState* s = fused->state_of(inner);
    if (!s) return {};
    return {s->exp_avg(), s->exp_avg_sq()};
  }
  auto* s = adamw_state(sub, inner);
  if (!s) return {};
  return {s->exp_avg(), s->exp_avg_sq()};
}

}  // namespace

HybridDeviceOptimizer::HybridDeviceOptimizer(
    std::vector<torch::optim::OptimizerParamGroup> param_groups, const HdoOptions& defaults,
    torch::Device accelerator, const TensorAttrs* attrs, const Behaviour& behaviour,
    Streams* streams, const HostOffloadEngine* engine)
    : torch::optim::Optimizer(std::move(param_groups), std::make_unique<HdoOptions>(defaults)),
      accelerator_(accelerator),
      attrs_(attrs),
      own_streams_(streams ? nullptr : std::make_unique<ImmediateStreams>()),
      streams_(streams ? streams : own_streams_.get()),
      behaviour_(behaviour),
      engine_(engine ? engine->fresh() : nullptr) {
  if ((behaviour_.has(Deviation::kFusedHostAdamw) || behaviour_.pipeline_chunk > 0) && !engine_) {
    throw std::invalid_argument("variant " + behaviour_.name +
                                " asks for an offload engine (sim/engines/engines.h) and the "
                                "HybridDeviceOptimizer was given none");
  }
  init_sub_optimizers();
}

const HdoOptions& HybridDeviceOptimizer::hdo_defaults() const { return hdo(defaults()); }

std::string HybridDeviceOptimizer::label(const torch::Tensor& original) const {
  int index = 0;
  for (const auto& g : param_groups_) {
    for (const auto& p : g.params()) {
      if (tensor_key(p) == tensor_key(original)) return "HDO param " + std::to_string(index);
      ++index;
    }
  }
  return "HDO param ?";
}

std::vector<torch::optim::Optimizer*> HybridDeviceOptimizer::sub_optimizers() const {
  std::vector<torch::optim::Optimizer*> subs;
  for (const auto& c : cpu_optimizers_) subs.push_back(c.get());
  if (gpu_optimizer_) subs.push_back(gpu_optimizer_.get());
  return subs;
}

void HybridDeviceOptimizer::init_sub_optimizers() {
  const HdoOptions& opts = hdo_defaults();
  param_to_fp32_param_.clear();
  gpu_params_map_cpu_copy_.clear();
  cpu_copys_map_gpu_param_.clear();
  param_to_inner_param_.clear();
  inner_param_to_orig_param_.clear();
  cpu_copy_map_grad_.clear();
  cpu_optimizers_.clear();
  gpu_optimizer_.reset();
  // HDO-07: the flag does not reach the hybrid optimizer.
  fp32_update_ = opts.param_update_in_fp32() && !behaviour_.has(Deviation::kHdo07NoFp32Update);
  const bool cuda = accelerator_.is_cuda();
  d2h_stream_ = h2d_stream_ = Streams::kCurrent;
  if (opts.overlap_cpu_optimizer_d2h_h2d()) {
    d2h_stream_ = streams_->new_stream("d2h");
    h2d_stream_ = streams_->new_stream("h2d");
  }
  // `param.is_cuda`.
  auto on_accelerator = [&](const torch::Tensor& t) {
    return place_of(t, accelerator_) == Place::kAccelerator;
  };
  int64_t gpu_total = 0;
  for (const auto& g : param_groups_) {
    for (const auto& p : g.params()) {
      if (on_accelerator(p)) gpu_total += p.numel();
    }
  }
  const double threshold = static_cast<double>(gpu_total) * opts.offload_fraction();
  int64_t offloaded = 0;
  std::vector<torch::optim::OptimizerParamGroup> cpu_groups, gpu_groups;
  for (const auto& g : param_groups_) {
    std::vector<torch::Tensor> gpu_params, cpu_params;
    for (const auto& orig : g.params()) {
      torch::Tensor p = orig;
      bool cpu_copy = false;
      // Tested before adding; the rule mutant tests after adding.
      const double running = static_cast<double>(
          behaviour_.has(Deviation::kThresholdAfterAdding) ? offloaded + p.numel() : offloaded);
      const bool below = behaviour_.has(Deviation::kThresholdAfterAdding) ? running <= threshold
                                                                          : running < threshold;
      if (below && on_accelerator(p)) {
        p = to_place(p.detach(), Place::kHost, accelerator_);  // `.detach().clone().cpu()`
        if (cuda) p = p.pin_memory();
        offloaded += p.numel();
        cpu_copy = true;
      }
      if (fp32_update_ && p.scalar_type() != torch::kFloat) {
        const bool on_host = place_of(p, accelerator_) == Place::kHost;
        p = p.detach().clone().to(torch::kFloat);  // not pinned at d8b71082
        // The fix of HDO-02 (Megatron PR #4547, after d8b71082): pinned again.
        if (on_host && cuda && behaviour_.has(Deviation::kPr4547) && opts.pin_cpu_params()) {
          p = p.pin_memory();
        }
        if (on_host) mark_host(p, accelerator_);
        param_to_fp32_param_[tensor_key(orig)] = p;
      }
      if (cpu_copy) {
        gpu_params_map_cpu_copy_[tensor_key(orig)] = p;
        cpu_copys_map_gpu_param_[tensor_key(p)] = orig;
      }
      if (p.unsafeGetTensorImpl() != orig.unsafeGetTensorImpl()) {
        streams_->name(p, (cpu_copy ? "host copy of " : "fp32 copy of ") + label(orig));
      }
      (on_accelerator(p) ? gpu_params : cpu_params).push_back(p);
    }
    if (!gpu_params.empty() && opts.gpu_optimizer_cls() == AcceleratorAdam::kTorchAdamW) {
      gpu_groups.emplace_back(
          gpu_params,
          std::make_unique<torch::optim::AdamWOptions>(adamw_options(hdo(g.options()))));
    } else if (!gpu_params.empty()) {
      gpu_groups.emplace_back(gpu_params,
                              std::make_unique<FusedAdamOptions>(fused_options(hdo(g.options()))));
    }
    if (!cpu_params.empty()) {
      cpu_groups.emplace_back(
          cpu_params,
          std::make_unique<torch::optim::AdamWOptions>(adamw_options(hdo(g.options()))));
    }
  }
  for (const auto& g : param_groups_) {
    for (const auto& p : g.params()) {
      auto f = param_to_fp32_param_.find(tensor_key(p));
      auto c = gpu_params_map_cpu_copy_.find(tensor_key(p));
      torch::Tensor inner = f != param_to_fp32_param_.end()       ? f->second
                            : c != gpu_params_map_cpu_copy_.end() ? c->second
                                                                  : p;
      param_to_inner_param_[tensor_key(p)] = inner;
      inner_param_to_orig_param_[tensor_key(inner)] = p;
    }
  }
  // `cpu_optimizer_cls` is torch.optim.AdamW; HDO-08 puts the accelerator's class there.
  auto make_cpu_optimizer = [&](std::vector<torch::optim::OptimizerParamGroup> groups)
      -> std::unique_ptr<torch::optim::Optimizer> {
    if (engine_ && !behaviour_.has(Deviation::kHdo08FusedOnHost)) {
      return engine_->make_host_optimizer(std::move(groups));
    }
    if (!behaviour_.has(Deviation::kHdo08FusedOnHost)) {
      return std::make_unique<TorchAdamW>(std::move(groups), /*fused=*/true, behaviour_);
    }
    for (auto& g : groups) {
      const auto& a = static_cast<const torch::optim::AdamWOptions&>(g.options());
      g.set_options(std::make_unique<FusedAdamOptions>(
          FusedAdamOptions().lr(a.lr()).beta1(std::get<0>(a.betas())).beta2(std::get<1>(a.betas()))
              .eps(a.eps()).weight_decay(a.weight_decay())));
    }
    return std::make_unique<FusedAdam>(std::move(groups), FusedAdamOptions(), attrs_,
                                       FusedAdamFlags{}, behaviour_);
  };
  if (opts.overlap_cpu_optimizer_d2h_h2d()) {
    for (const auto& g : cpu_groups) {
      for (const auto& p : g.params()) {
        std::vector<torch::optim::OptimizerParamGroup> one;
        one.emplace_back(std::vector<torch::Tensor>{p}, g.options().clone());
        cpu_optimizers_.push_back(make_cpu_optimizer(std::move(one)));
      }
    }
  } else if (!cpu_groups.empty()) {
    cpu_optimizers_.push_back(make_cpu_optimizer(std::move(cpu_groups)));
  }
  if (!gpu_groups.empty() && opts.gpu_optimizer_cls() == AcceleratorAdam::kTorchAdamW) {
    // The factory's defaults reach this class too: `fused=True`.
    gpu_optimizer_ = std::make_unique<TorchAdamW>(std::move(gpu_groups), /*fused=*/true, behaviour_);
  } else if (!gpu_groups.empty()) {
    // The factory builds TE's FusedAdam without use_decoupled_grad: it reads `.grad`.
    gpu_optimizer_ = std::make_unique<FusedAdam>(std::move(gpu_groups), FusedAdamOptions(),
                                                 attrs_, FusedAdamFlags{}, behaviour_);
  }
}

const torch::optim::OptimizerParamGroup& HybridDeviceOptimizer::hdo_group_of(
    const torch::Tensor& original) const {
  for (const auto& g : param_groups_) {
    for (const auto& p : g.params()) {
      if (tensor_key(p) == tensor_key(original)) return g;
    }
  }
  TORCH_CHECK(false, "parameter not in any HybridDeviceOptimizer group");
}

void HybridDeviceOptimizer::sync_hdo_param_groups_to_sub_optimizers() {
  for (torch::optim::Optimizer* sub : sub_optimizers()) {
    auto& groups = sub->param_groups();
    for (size_t k = 0; k < groups.size(); ++k) {
      TORCH_CHECK(!groups[k].params().empty(), "sub-optimizer group is empty");
      const torch::Tensor orig = inner_param_to_orig_param_.at(tensor_key(groups[k].params()[0]));
      // DS-06: take the HDO group by the sub-group's position instead of by its first param.
      const HdoOptions& src =
          behaviour_.has(Deviation::kDs06GroupByPosition) && k < param_groups_.size()
              ? hdo(param_groups_[k].options())
              : hdo(hdo_group_of(orig).options());
      if (auto* a = dynamic_cast<torch::optim::AdamWOptions*>(&groups[k].options())) {
        a->lr(src.lr()).betas({src.beta1(), src.beta2()}).eps(src.eps()).weight_decay(
            src.weight_decay());
      } else {
        auto& f = static_cast<FusedAdamOptions&>(groups[k].options());
        f.lr(src.lr()).beta1(src.beta1()).beta2(src.beta2()).eps(src.eps()).weight_decay(
            src.weight_decay());
      }
    }
  }
}

void HybridDeviceOptimizer::set_sub_optimizer_grads(bool host_grads) {
  // Runs on the D2H stream on CUDA; a plain sequence on the CPU.
  if (fp32_update_) {
    for (const auto& g : param_groups_) {
      for (const auto& param : g.params()) {
        auto it = param_to_fp32_param_.find(tensor_key(param));
        if (it == param_to_fp32_param_.end() || gpu_params_map_cpu_copy_.count(tensor_key(param))) {
          continue;
        }
        torch::Tensor fp32_param = it->second;
        torch::Tensor grad = attrs_->decoupled_grad_or_grad(param);
        if (grad.defined()) {
          // `grad.to(fp32)` on the D2H stream: the new tensor exists at once, its values only
          // once the cast has run (NaN until then, where a device would hold garbage).
          torch::Tensor cast = torch::full(grad.sizes(), std::nanf(""),
                                           grad.options().dtype(fp32_param.scalar_type()));
          streams_->name(cast, "fp32 grad of " + label(param));
          streams_->enqueue(d2h_stream_, "grad.to(fp32)", {grad}, {cast},
                            [cast, grad]() mutable { cast.copy_(grad); });
          fp32_param.mutable_grad() = cast;
          fp32_param.requires_grad_(true);
        } else {
          fp32_param.requires_grad_(false);
        }
      }
    }
  }
  if (behaviour_.has(Deviation::kF1)) {
    // F1 fix: parameters stepped in place on the accelerator read `.grad`; give them the
    // decoupled grad that precision-aware DistributedOptimizer sets.
    for (auto& g : param_groups_) {
      for (auto& param : g.params()) {
        if (gpu_params_map_cpu_copy_.count(tensor_key(param)) || param_to_fp32_param_.count(tensor_key(param))) {
          continue;
        }
        if (attrs_->has_decoupled_grad(param)) param.mutable_grad() = attrs_->decoupled_grad(param);
      }
    }
  }
  if (!host_grads) return;  // the offload engine copies them itself
  for (auto& opt : cpu_optimizers_) {
    for_each_param(*opt, [&](torch::Tensor& param) {
      const torch::Tensor gpu_param = cpu_copys_map_gpu_param_.at(tensor_key(param));
      torch::Tensor grad = attrs_->decoupled_grad_or_grad(gpu_param);
      param.requires_grad_(false);
      if (!grad.defined()) return;
      auto it = cpu_copy_map_grad_.find(tensor_key(param));
      if (it == cpu_copy_map_grad_.end()) {
        auto options = torch::TensorOptions().dtype(param.scalar_type()).device(torch::kCPU);
        if (accelerator_.is_cuda()) options = options.pinned_memory(hdo_defaults().pin_cpu_grads());
        it = cpu_copy_map_grad_
                 .emplace(tensor_key(param), mark_host(torch::empty(param.sizes(), options), accelerator_))
                 .first;
        streams_->name(it->second, "host grad of " + label(gpu_param));
        param.mutable_grad() = it->second;
      }
      // A non-blocking copy into pageable memory is synchronous for the host.
      torch::Tensor host_grad = it->second;
      streams_->enqueue(d2h_stream_, "D2H grad copy", {grad}, {host_grad},
                        [host_grad, grad]() mutable { host_grad.copy_(grad, true); },
                        accelerator_.is_cuda() ? !host_grad.is_pinned()
                                               : !hdo_defaults().pin_cpu_grads());
    });
    cpu_optimizer_events_.push_back(streams_->record_event(d2h_stream_));
  }
}

torch::Tensor HybridDeviceOptimizer::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  Streams& st = *streams_;
  sync_hdo_param_groups_to_sub_optimizers();
  // Mutant: the D2H stream no longer waits for the current stream's work (the grads).
  if (!behaviour_.has(Deviation::kNoD2hWait)) st.wait_stream(d2h_stream_, Streams::kCurrent);
  cpu_optimizer_events_.clear();
  const bool engine_step = engine_ && engine_->takes_host_step(*this);
  set_sub_optimizer_grads(/*host_grads=*/!engine_step);  // on the D2H stream
  if (gpu_optimizer_) {
    // Finding F6 fix: the accelerator step reads the fp32 grads cast on the D2H stream.
    if (behaviour_.has(Deviation::kF6)) st.wait_stream(Streams::kCurrent, d2h_stream_);
    std::vector<torch::Tensor> reads, writes;
    for (const auto& g : gpu_optimizer_->param_groups()) {
      for (const auto& p : g.params()) {
        reads.push_back(p.grad());
        writes.push_back(p);
      }
    }
    check_operands(*gpu_optimizer_, "the accelerator FusedAdam step", Place::kAccelerator);
    st.enqueue(Streams::kCurrent, "accelerator FusedAdam step", reads, writes,
               [this, closure] { gpu_optimizer_->step(closure); });
    if (fp32_update_) {  // post-step hook: fp32 copies back, on the current stream
      for (const auto& g : param_groups_) {
        for (const auto& param : g.params()) {
          if (gpu_params_map_cpu_copy_.count(tensor_key(param))) continue;
          auto it = param_to_fp32_param_.find(tensor_key(param));
          if (it == param_to_fp32_param_.end()) continue;
          torch::Tensor dst = param.detach(), src = it->second.detach();
          st.enqueue(Streams::kCurrent, "fp32 copy back", {src}, {dst},
                     [dst, src]() mutable { dst.copy_(src); });
        }
      }
    }
  }
  if (engine_step) {
    engine_->host_step(*this);
    ++engine_host_steps_;
  }
  for (size_t i = 0; !engine_step && i < cpu_optimizers_.size(); ++i) {
    auto& opt = cpu_optimizers_[i];
    if (i < cpu_optimizer_events_.size()) st.synchronize_event(cpu_optimizer_events_[i]);
    std::vector<torch::Tensor> reads, writes;
    for_each_param(*opt, [&](torch::Tensor& param) {
      reads.push_back(param.grad());
      writes.push_back(param);
    });
    check_operands(*opt, "a host AdamW step", Place::kHost);
    st.enqueue(Streams::kHost, "host AdamW step", reads, writes, [this, &opt, closure] {
      // State made by this step is made like its parameter (`zeros_like`): on the host.
      std::vector<torch::Tensor> fresh;
      for_each_param(*opt, [&](torch::Tensor& param) {
        if (moments(opt.get(), param).empty()) fresh.push_back(param);
      });
      opt->step(closure);
      for (const auto& param : fresh) {
        for (const auto& m : moments(opt.get(), param)) mark_host(m, accelerator_);
      }
    });
    // Post-step hook: the copies back on the H2D stream, which first waits for the current
    // one; then the current stream waits for them (HDO-01: for an event of the D2H stream).
    st.wait_stream(h2d_stream_, Streams::kCurrent);
    for_each_param(*opt, [&](torch::Tensor& param) {
      torch::Tensor dst = cpu_copys_map_gpu_param_.at(tensor_key(param)).detach(), src = param.detach();
      st.enqueue(h2d_stream_, "H2D copy back", {src}, {dst},
                 [dst, src]() mutable { dst.copy_(src, true); },
                 pageable_host_copy(src, cpu_copys_map_gpu_param_.at(tensor_key(param))));
    });
    const int done =
        st.record_event(behaviour_.has(Deviation::kHdo01WrongStream) ? d2h_stream_ : h2d_stream_);
    st.wait_event(Streams::kCurrent, done);
  }
  sync_sub_optimizers_state_to_hdo();
  return {};
}

bool HybridDeviceOptimizer::pageable_host_copy(const torch::Tensor& src,
                                               const torch::Tensor& gpu_param) const {
  // On CUDA the host side's is_pinned(); on the CPU, where nothing can be pinned, what it would
  // be: pageable where it is an fp32 clone (HDO-02), unless the fix pins it.
  if (accelerator_.is_cuda()) return !src.is_pinned();
  return has_fp32_copy(gpu_param) &&
         !(behaviour_.has(Deviation::kPr4547) && hdo_defaults().pin_cpu_params());
}

torch::Tensor HybridDeviceOptimizer::host_grad_source(const torch::Tensor& inner) const {
  return attrs_->decoupled_grad_or_grad(cpu_copys_map_gpu_param_.at(tensor_key(inner)));
}

int64_t HybridDeviceOptimizer::host_transfer_buffer_bytes() const {
  int64_t bytes = 0;
  for (const auto& [k, t] : cpu_copy_map_grad_) bytes += t.numel() * t.element_size();
  if (engine_) bytes += engine_->transfer_buffer_bytes();
  return bytes;
}

const torch::Tensor& HybridDeviceOptimizer::accelerator_param_of(
    const torch::Tensor& host_copy) const {
  return cpu_copys_map_gpu_param_.at(tensor_key(host_copy));
}

void HybridDeviceOptimizer::check_operands(torch::optim::Optimizer& sub, const std::string& kernel,
                                           Place required) const {
  for_each_param(sub, [&](torch::Tensor& inner) {
    auto named = [&](const std::string& what) {
      return [&, what] { return what + label(inner_param_to_orig_param_.at(tensor_key(inner))); };
    };
    require_place(inner, required, accelerator_, kernel, named("the stepped copy of "));
    require_place(inner.grad(), required, accelerator_, kernel, named("the grad of "));
    for (const auto& m : moments(&sub, inner)) {
      require_place(m, required, accelerator_, kernel, named("a moment of "));
    }
  });
}


void HybridDeviceOptimizer::zero_grad(bool set_to_none, TensorAttrs* attrs) {
  for (auto& g : param_groups_) {
    for (auto& p : g.params()) {
      if (p.grad().defined()) {
        if (set_to_none) {
          p.mutable_grad() = torch::Tensor();
        } else {
          p.mutable_grad().detach_();
          p.mutable_grad().zero_();
        }
      }
      if (attrs && attrs->has_decoupled_grad(p)) {
        torch::Tensor dg = attrs->decoupled_grad(p);
        if (set_to_none || !dg.defined()) {
          attrs->set_decoupled_grad(p, torch::Tensor());
        } else {
          dg.zero_();
        }
      }
    }
  }
}

void HybridDeviceOptimizer::dummy_step(uint64_t seed, TensorAttrs* attrs) {
  torch::manual_seed(seed);
  for (auto& g : param_groups_) {
    for (auto& p : g.params()) p.mutable_grad() = torch::randn_like(p);
  }
  step();
  zero_grad(true, attrs);
}


void HybridDeviceOptimizer::update_fp32_param_by_new_param() {
  for (auto& g : param_groups_) {
    for (auto& p : g.params()) {
      auto it = param_to_fp32_param_.find(tensor_key(p));
      if (it != param_to_fp32_param_.end()) {
        it->second.detach().copy_(p.detach());
        continue;
      }
      // F3 fix: the host copy of an fp32 original is not in the fp32 map; refresh it too.
      auto c = gpu_params_map_cpu_copy_.find(tensor_key(p));
      if (behaviour_.has(Deviation::kF3) && c != gpu_params_map_cpu_copy_.end()) {
        c->second.detach().copy_(p.detach());
      }
    }
  }
}

bool HybridDeviceOptimizer::is_offloaded(const torch::Tensor& original) const {
  return gpu_params_map_cpu_copy_.count(tensor_key(original)) != 0;
}

bool HybridDeviceOptimizer::has_fp32_copy(const torch::Tensor& original) const {
  return param_to_fp32_param_.count(tensor_key(original)) != 0;
}

torch::Tensor HybridDeviceOptimizer::inner_param(const torch::Tensor& original) const {
  auto it = param_to_inner_param_.find(tensor_key(original));
  TORCH_CHECK(it != param_to_inner_param_.end(), "not a parameter of this optimizer");
  return it->second;
}

int HybridDeviceOptimizer::cpu_optimizer_index(const torch::Tensor& original) const {
  const torch::Tensor inner = inner_param(original);
  for (size_t i = 0; i < cpu_optimizers_.size(); ++i) {
    for (const auto& g : cpu_optimizers_[i]->param_groups()) {
      for (const auto& p : g.params()) {
        if (tensor_key(p) == tensor_key(inner)) return static_cast<int>(i);
      }
    }
  }
  return -1;
}

}  // namespace sc::sut
