#include "properties/gen/case_gen.h"

#include "properties/gen/choice.h"

namespace sc::gen {

using model::DType;

namespace {
bool transformer_engine_available = true;
}  // namespace

void set_transformer_engine_available(bool available) {
  transformer_engine_available = available;
}

rc::Gen<model::ParamSpec> param_spec(std::string name) {
  return rc::gen::exec([name] {
    model::ParamSpec p;
    p.name = name;
    p.dtype = *weighted_choice<DType>({{4, DType::kBFloat16}, {3, DType::kFloat32}, {2, DType::kFloat16}});
    p.keep_in_fp32 = p.dtype == DType::kFloat32 && *rc::gen::arbitrary<bool>();
    // Total size class: tiny, small, medium, large; a few exact multiples of 64.
    const int64_t limit = *weighted_choice<int64_t>({{3, 8}, {4, 300}, {2, 5000}, {1, 70000}});
    int64_t numel = *rc::gen::inRange<int64_t>(1, limit + 1);
    if (*weighted_choice<int>({{9, 0}, {1, 1}}) == 1) {
      numel = 64 * *rc::gen::inRange<int64_t>(1, 40);
    }
    // Split numel into 1 to 4 dimensions by peeling divisors off.
    const int ndim = *rc::gen::inRange(1, 5);
    int64_t rest = numel;
    for (int d = 1; d < ndim; ++d) {
      int64_t dim = 1;
      for (int64_t f : {2, 3, 4, 5, 7, 8, 16}) {
        if (rest % f == 0 && *rc::gen::arbitrary<bool>()) {
          dim = f;
          break;
        }
      }
      p.shape.push_back(dim);
      rest /= dim;
    }
    p.shape.insert(p.shape.begin(), rest);
    p.is_expert = *weighted_choice<bool>({{4, false}, {1, true}});
    p.shared_embedding = *weighted_choice<bool>({{9, false}, {1, true}});
    p.group = *rc::gen::inRange(0, 3);
    p.chunk = *weighted_choice<int>({{3, 0}, {1, 1}});
    return p;
  });
}

rc::Gen<int> dp_size() {
  return weighted_one_of<int>({
      {6, rc::gen::inRange(1, 9)},
      {3, rc::gen::map(rc::gen::inRange<size_t>(0, 9), [](size_t i) {
         static constexpr int kOddAndPrime[] = {3, 5, 7, 11, 13, 31, 97, 127, 251};
         return kOddAndPrime[i];
       })},
      {1, rc::gen::inRange(1, 257)},
  });
}

rc::Gen<model::CaseSpec> case_spec() {
  // RapidCheck's inRange narrows with the size parameter, which would make early cases dp 1 with
  // one bf16 parameter; every case here draws from the full ranges, and shrinking minimises.
  return rc::gen::resize(rc::kNominalSize, rc::gen::exec([] {
    model::CaseSpec c;
    const int n = *rc::gen::inRange(1, 9);
    for (int i = 0; i < n; ++i) c.params.push_back(*param_spec("p" + std::to_string(i)));
    // Drop parameters one by one when shrinking: a suffix-free list generator.
    const auto keep = *rc::gen::container<std::vector<bool>>(
        c.params.size(), weighted_choice<bool>({{1, false}, {5, true}}));
    std::vector<model::ParamSpec> kept;
    for (size_t i = 0; i < c.params.size(); ++i) {
      if (keep[i] || (kept.empty() && i + 1 == c.params.size())) kept.push_back(c.params[i]);
    }
    c.params = std::move(kept);
    c.dp = *dp_size();
    c.expert_dp = *dp_size();
    int64_t total = 0;
    for (const auto& p : c.params) total += p.numel();
    if (*weighted_choice<bool>({{1, false}, {1, true}})) {
      c.bucket_size = *rc::gen::inRange<int64_t>(1, 2 * total + 2);
    }
    c.pad_for_high_nccl_busbw = *weighted_choice<bool>({{19, false}, {1, true}});
    c.grad_reduce_in_fp32 = *rc::gen::arbitrary<bool>();
    c.precision_aware = *rc::gen::arbitrary<bool>();
    c.store_param_remainders = *weighted_choice<bool>({{3, true}, {1, false}});
    c.overlap_cpu_optimizer_d2h_h2d = *weighted_choice<bool>({{1, true}, {1, false}});
    c.cpu_offload = *weighted_choice<bool>({{1, true}, {1, false}});
    c.offload_fraction = *weighted_one_of<double>({
        {2, rc::gen::just(1.0)},  // the CLI default first
        {1, rc::gen::just(0.0)},
        {2, rc::gen::map(rc::gen::inRange(1, 100), [](int k) { return k / 100.0; })},
    });
    // Drawn last, so that the draws above do not move.
    c.transformer_engine =
        transformer_engine_available && *weighted_choice<bool>({{3, true}, {1, false}});
    if (!c.transformer_engine) c.precision_aware = false;
    return c;
  }));
}

}  // namespace sc::gen

namespace sc::model {

void showValue(const GradScalerConfig& c, std::ostream& os) {
  os << "GradScalerConfig{" << (c.dynamic ? "dynamic" : "constant")
     << " initial_scale=" << c.initial_scale << " min_scale=" << c.min_scale
     << " growth_factor=" << c.growth_factor << " backoff_factor=" << c.backoff_factor
     << " growth_interval=" << c.growth_interval << " hysteresis=" << c.hysteresis << "}";
}

void showValue(const CaseSpec& spec, std::ostream& os) {
  os << "CaseSpec{dp=" << spec.dp << " expert_dp=" << spec.expert_dp << " bucket_size="
     << (spec.bucket_size ? std::to_string(*spec.bucket_size) : "None")
     << " high_busbw=" << spec.pad_for_high_nccl_busbw
     << " grad_reduce_in_fp32=" << spec.grad_reduce_in_fp32
     << " precision_aware=" << spec.precision_aware
     << " store_param_remainders=" << spec.store_param_remainders
     << " overlap=" << spec.overlap_cpu_optimizer_d2h_h2d << " cpu_offload=" << spec.cpu_offload
     << " offload_fraction=" << spec.offload_fraction
     << " transformer_engine=" << spec.transformer_engine
     << (spec.buffers_from_parallel_state ? " buffers_from_parallel_state=1" : "") << " params=[";
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const ParamSpec& p = spec.params[i];
    os << (i ? ", " : "") << p.name << ":" << dtype_name(p.dtype) << "[";
    for (size_t d = 0; d < p.shape.size(); ++d) os << (d ? "x" : "") << p.shape[d];
    os << "]";
    if (p.keep_in_fp32) os << " keep_fp32";
    if (p.is_expert) os << " expert";
    if (p.shared_embedding) os << " shared_embedding";
    os << " g" << p.group << " c" << p.chunk;
  }
  os << "]}";
}

}  // namespace sc::model
