// The hybrid optimizer's state: the sub-optimizers' state seen as the hybrid optimizer's own
// (the two syncs and the move of new state), state_dict / load_state_dict, and the queries and
// writes of one parameter's state. Construction and the step are hybrid_optimizer.cc.
#include "sim/port/hybrid_optimizer.h"

#include "sim/port/fused_adam.h"
#include "sim/port/hybrid_optimizer_impl.h"
#include "sim/port/optim_state.h"
#include "sim/port/placement.h"
#include "sim/port/torch_adamw.h"

namespace sc::sut {

using hdo_detail::adamw_state;

void HybridDeviceOptimizer::sync_sub_optimizers_state_to_hdo() {
  state_view_.clear();
  for (torch::optim::Optimizer* sub : sub_optimizers()) {
    for (auto& g : sub->param_groups()) {
      for (auto& inner : g.params()) {
        HdoParamState st;
        st.master_param = inner;
        if (auto* fused = dynamic_cast<FusedAdam*>(sub)) {
          const FusedAdamState* s = fused->state_of(inner);
          if (!s) continue;
          st.exp_avg = s->exp_avg();
          st.exp_avg_sq = s->exp_avg_sq();
          st.step = static_cast<const FusedAdamOptions&>(g.options()).step();
          st.step_is_group_step = true;
        } else {
          auto it = sub->state().find(sc::sut::optim_state_key(inner));
          if (it == sub->state().end()) continue;
          const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
          st.exp_avg = s.exp_avg();
          st.exp_avg_sq = s.exp_avg_sq();
          st.step = s.step();
          st.step_key = true;
        }
        state_view_[tensor_key(inner_param_to_orig_param_.at(tensor_key(inner)))] = st;
      }
    }
  }
}

void HybridDeviceOptimizer::sync_hdo_state_to_sub_optimizers() {
  for (torch::optim::Optimizer* sub : sub_optimizers()) {
    for (auto& g : sub->param_groups()) {
      for (auto& inner : g.params()) {
        const torch::Tensor orig = inner_param_to_orig_param_.at(tensor_key(inner));
        auto it = state_view_.find(tensor_key(orig));
        if (it == state_view_.end()) continue;
        const HdoParamState& st = it->second;
        if (auto* fused = dynamic_cast<FusedAdam*>(sub)) {
          fused->set_state(inner, st.exp_avg, st.exp_avg_sq);
          // TE's FusedAdam keeps its step in the group, which the rebuilt group lacks. F2 fix:
          // restore it from the step kept in the state entry.
          if (behaviour_.has(Deviation::kF2)) {
            auto& o = static_cast<FusedAdamOptions&>(g.options());
            o.step(std::max(o.step(), st.step));
          }
        } else {
          auto s = std::make_unique<torch::optim::AdamWParamState>();
          s->exp_avg(st.exp_avg);
          s->exp_avg_sq(st.exp_avg_sq);
          s->step(st.step);
          sub->state()[sc::sut::optim_state_key(inner)] = std::move(s);
        }
      }
    }
  }
  // `_update_fp32_params_by_new_state`: master_param into each fp32 copy (native fp32 params
  // have none and are skipped; HDO-05 looked every entry up and raised KeyError).
  if (fp32_update_) {
    for (const auto& [orig, st] : state_view_) {
      auto it = param_to_fp32_param_.find(orig);
      if (it == param_to_fp32_param_.end()) {
        TORCH_CHECK(!behaviour_.has(Deviation::kHdo05Fp32Lookup),
                    "KeyError: native fp32 parameter");
        continue;
      }
      it->second.detach().copy_(st.master_param);
    }
  }
  move_new_state_to_right_device();
}

void HybridDeviceOptimizer::move_new_state_to_right_device() {
  // PT-03: the state stays where load_state_dict put it.
  if (behaviour_.has(Deviation::kPt03StateStaysWhereLoaded)) return;
  for (torch::optim::Optimizer* sub : sub_optimizers()) {
    // `isinstance(optimizer, cpu_optimizer_cls)`: under HDO-08 that class is the accelerator's
    // FusedAdam too, and without Transformer Engine both classes are torch's AdamW, so every
    // sub-optimizer counts as a host one.
    const bool same_class = hdo_defaults().gpu_optimizer_cls() == AcceleratorAdam::kTorchAdamW &&
                            !behaviour_.has(Deviation::kF10);
    const bool host =
        sub != gpu_optimizer_.get() || behaviour_.has(Deviation::kHdo08FusedOnHost) || same_class;
    const Place to = host ? Place::kHost : Place::kAccelerator;
    for (auto& g : sub->param_groups()) {
      for (auto& inner : g.params()) {
        auto it = state_view_.find(tensor_key(inner_param_to_orig_param_.at(tensor_key(inner))));
        if (it == state_view_.end()) continue;
        // `hdo.state[orig][k] = sub.state[inner][k] = v.to(device)`: one dict, both names.
        HdoParamState& st = it->second;
        st.exp_avg = to_place(st.exp_avg, to, accelerator_);
        st.exp_avg_sq = to_place(st.exp_avg_sq, to, accelerator_);
        if (st.master_param.defined()) {
          st.master_param = to_place(st.master_param, to, accelerator_);
        }
        if (auto* fused = dynamic_cast<FusedAdam*>(sub)) {
          if (fused->state_of(inner)) fused->set_state(inner, st.exp_avg, st.exp_avg_sq);
        } else if (auto* s = adamw_state(sub, inner)) {
          s->exp_avg(st.exp_avg);
          s->exp_avg_sq(st.exp_avg_sq);
        }
      }
    }
  }
}
HdoStateDict HybridDeviceOptimizer::state_dict() const {
  HdoStateDict sd;
  for (const auto& g : param_groups_) {
    const auto& o = static_cast<const HdoOptions&>(g.options());
    sd.groups.push_back({o.lr(), o.beta1(), o.beta2(), o.eps(), o.weight_decay()});
    for (const auto& p : g.params()) {
      auto it = state_view_.find(tensor_key(p));
      if (it == state_view_.end()) {
        sd.state.push_back(std::nullopt);
        continue;
      }
      HdoParamState c = it->second;
      c.exp_avg = clone_in_place(c.exp_avg.detach(), accelerator_);
      c.exp_avg_sq = clone_in_place(c.exp_avg_sq.detach(), accelerator_);
      c.master_param = clone_in_place(c.master_param.detach(), accelerator_);
      sd.state.push_back(c);
    }
  }
  return sd;
}

void HybridDeviceOptimizer::load_state_dict(const HdoStateDict& sd) {
  TORCH_CHECK(sd.groups.size() == param_groups_.size(),
              "loaded state dict has a different number of parameter groups");
  state_view_.clear();
  size_t index = 0;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    auto& o = static_cast<HdoOptions&>(param_groups_[g].options());
    const auto& h = sd.groups[g];
    o.lr(h.lr).beta1(h.beta1).beta2(h.beta2).eps(h.eps).weight_decay(h.weight_decay);
    for (const auto& p : param_groups_[g].params()) {
      TORCH_CHECK(index < sd.state.size(), "loaded state dict has fewer parameters");
      const auto& entry = sd.state[index++];
      if (!entry) continue;
      // torch casts floating state to the dtype and device of the parameter it is keyed by; the
      // pre-load hook keys it by the fp32 copy under param_update_in_fp32 (on the host for an
      // offloaded parameter), so it stays fp32. PT-03: it stays where the state dict was mapped.
      const torch::ScalarType dtype = fp32_update_ ? torch::kFloat : p.scalar_type();
      auto fp32 = param_to_fp32_param_.find(tensor_key(p));
      const torch::Tensor keyed =
          fp32_update_ && fp32 != param_to_fp32_param_.end() ? fp32->second : p;
      auto cast = [&](const torch::Tensor& t) {
        const Place to = behaviour_.has(Deviation::kPt03StateStaysWhereLoaded)
                             ? place_of(t, accelerator_)
                             : place_of(keyed, accelerator_);
        // A copy of its own: the cast or the move makes one, else clone.
        torch::Tensor c = to_place(t.to(dtype), to, accelerator_);
        return c.unsafeGetTensorImpl() == t.unsafeGetTensorImpl() ? clone_in_place(c, accelerator_)
                                                                   : c;
      };
      HdoParamState st = *entry;
      st.exp_avg = cast(st.exp_avg);
      st.exp_avg_sq = cast(st.exp_avg_sq);
      st.master_param = cast(st.master_param);
      state_view_[tensor_key(p)] = st;
    }
  }
  // Post-load hook. Under param_update_in_fp32 it rebuilds hdo.state as a plain dict, and the
  // sync below looks every parameter up in it (F11: KeyError for one without state).
  if (fp32_update_ && !behaviour_.has(Deviation::kF11)) {
    for (const auto& g : param_groups_) {
      for (const auto& p : g.params()) {
        TORCH_CHECK(state_view_.count(tensor_key(p)),
                    "KeyError: a parameter without state in the loaded state dict");
      }
    }
  }
  init_sub_optimizers();
  sync_hdo_param_groups_to_sub_optimizers();
  sync_hdo_state_to_sub_optimizers();
  if (behaviour_.has(Deviation::kF4)) {
    // F4 fix: master_param is the tensor the sub-optimizer steps, as after every step.
    for (auto& [orig, st] : state_view_) st.master_param = param_to_inner_param_.at(orig);
  }
}

HdoStateDict HybridDeviceOptimizer::mapped_to_host(const HdoStateDict& sd) const {
  HdoStateDict out = sd;
  for (auto& entry : out.state) {
    if (!entry) continue;
    for (torch::Tensor* t : {&entry->exp_avg, &entry->exp_avg_sq, &entry->master_param}) {
      if (t->defined()) *t = to_place(*t, Place::kHost, accelerator_);
    }
  }
  return out;
}
std::optional<int64_t> HybridDeviceOptimizer::first_host_adamw_step() const {
  for (torch::optim::Optimizer* sub : sub_optimizers()) {
    if (dynamic_cast<FusedAdam*>(sub) || sub->state().empty()) continue;
    std::set<int64_t> steps;
    for (const auto& [k, s] : sub->state()) {
      steps.insert(static_cast<const torch::optim::AdamWParamState&>(*s).step());
    }
    TORCH_CHECK(steps.size() == 1, "AssertionError: steps of one host optimizer differ");
    return *steps.begin();
  }
  return std::nullopt;
}

std::optional<int64_t> HybridDeviceOptimizer::accelerator_group_step() const {
  // Without Transformer Engine the accelerator side is a torch AdamW: its steps are per tensor,
  // and first_host_adamw_step() already reads them.
  if (!dynamic_cast<const FusedAdam*>(gpu_optimizer_.get())) return std::nullopt;
  for (const auto& g : gpu_optimizer_->param_groups()) {
    const int64_t s = static_cast<const FusedAdamOptions&>(g.options()).step();
    if (!g.params().empty() && s > 0) return s;
  }
  return std::nullopt;
}

void HybridDeviceOptimizer::set_state_steps(int64_t step) {
  for (auto& [orig, st] : state_view_) {
    st.step = step;
    st.step_key = true;
  }
  for (torch::optim::Optimizer* sub : sub_optimizers()) {
    for (auto& g : sub->param_groups()) {
      for (auto& inner : g.params()) {
        if (auto* s = adamw_state(sub, inner)) s->step(step);
      }
    }
  }
}

std::map<std::string, torch::Tensor> HybridDeviceOptimizer::state_tensors(
    const torch::Tensor& original) const {
  std::map<std::string, torch::Tensor> out;
  auto it = state_view_.find(tensor_key(original));
  if (it == state_view_.end()) return out;
  const HdoParamState& st = it->second;
  out["exp_avg"] = st.exp_avg;
  out["exp_avg_sq"] = st.exp_avg_sq;
  if (st.master_param.defined()) out["master_param"] = st.master_param;
  if (st.step_key) out["step"] = torch::full({}, static_cast<double>(st.step), torch::kFloat);
  return out;
}

void HybridDeviceOptimizer::assign_state(const torch::Tensor& original, const std::string& name,
                                         const torch::Tensor& value) {
  HdoParamState& st = state_view_[tensor_key(original)];
  const torch::Tensor inner = inner_param(original);
  torch::optim::Optimizer* owner = nullptr;
  for (torch::optim::Optimizer* sub : sub_optimizers()) {
    for (auto& g : sub->param_groups()) {
      for (auto& p : g.params()) {
        if (tensor_key(p) == tensor_key(inner)) owner = sub;
      }
    }
  }
  auto* adamw = owner ? adamw_state(owner, inner) : nullptr;
  auto* fused = dynamic_cast<FusedAdam*>(owner);
  if (name == "exp_avg" || name == "exp_avg_sq") {
    (name == "exp_avg" ? st.exp_avg : st.exp_avg_sq) = value;
    if (adamw) name == "exp_avg" ? adamw->exp_avg(value) : adamw->exp_avg_sq(value);
    if (fused && fused->state_of(inner)) fused->set_state(inner, st.exp_avg, st.exp_avg_sq);
  } else if (name == "master_param") {
    st.master_param = value;
  } else if (name == "step") {
    st.step = static_cast<int64_t>(value.item<double>());
    st.step_key = true;
    if (adamw) adamw->step(st.step);
  } else {
    TORCH_CHECK(false, "hybrid optimizer state has no entry ", name);
  }
}

void HybridDeviceOptimizer::copy_state(const torch::Tensor& original, const std::string& name,
                                       const torch::Tensor& value) {
  torch::NoGradGuard no_grad;
  if (name == "step") {
    assign_state(original, name, value);
    return;
  }
  auto live = state_tensors(original);
  auto it = live.find(name);
  TORCH_CHECK(it != live.end(), "KeyError: ", name);
  it->second.copy_(value);
}

const HdoParamState* HybridDeviceOptimizer::state_of(const torch::Tensor& original) const {
  auto it = state_view_.find(tensor_key(original));
  return it == state_view_.end() ? nullptr : &it->second;
}

}  // namespace sc::sut
