#include "properties/real_code_props.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include <rapidcheck.h>

#include "model/layout.h"
#include "properties/checks.h"
#include "properties/coverage.h"
#include "properties/support.h"

namespace sc::props {

namespace {

using Difference = std::optional<std::string>;

template <typename T>
Difference differ(const std::string& what, const T& port, const T& real) {
  if (port == real) return std::nullopt;
  return what + " differs";
}

// Bit for bit: -0 and +0 differ, and a NaN equals the same NaN.
Difference differ_bits(const std::string& what, const std::vector<float>& port,
                       const std::vector<float>& real) {
  if (port.size() != real.size()) {
    return what + ": " + std::to_string(port.size()) + " values in the port, " +
           std::to_string(real.size()) + " in the real code";
  }
  for (size_t k = 0; k < port.size(); ++k) {
    if (std::memcmp(&port[k], &real[k], sizeof(float)) != 0) {
      std::ostringstream out;
      out.precision(9);
      out << what << "[" << k << "]: port " << port[k] << ", real code " << real[k];
      return out.str();
    }
  }
  return std::nullopt;
}

std::string tensor_text(const rig::ObservedTensor& t) {
  std::ostringstream out;
  out << "{param " << t.param << ", " << model::dtype_name(t.dtype) << ", numel " << t.numel
      << ", leaf " << t.is_leaf << ", requires_grad " << t.requires_grad << ", grad_fn "
      << t.has_grad_fn << ", aliases " << t.aliases_model << " at " << t.alias_offset
      << ", main_param " << t.model_has_main_param << "}";
  return out.str();
}

std::string range_text(const model::Range& r) {
  return "[" + std::to_string(r.start) + ", " + std::to_string(r.end) + ")";
}

// One line per param range of each buffer and bucket, in order.
std::vector<std::string> ranges_text(const std::vector<model::BufferRanges>& buffers) {
  std::vector<std::string> out;
  for (size_t b = 0; b < buffers.size(); ++b) {
    const model::BufferKey& k = buffers[b].key;
    const std::string buffer = "buffer " + std::to_string(b) + " (" +
                               model::dtype_name(k.param_dtype) + "/" +
                               model::dtype_name(k.grad_dtype) + (k.is_expert ? ", expert" : "") +
                               ")";
    for (size_t u = 0; u < buffers[b].buckets.size(); ++u) {
      const model::BucketRanges& bucket = buffers[b].buckets[u];
      const std::string at = buffer + " bucket " + std::to_string(u);
      out.push_back(at + " world " + range_text(bucket.world));
      for (const auto& [param, range] : bucket.param_index) {
        out.push_back(at + " param_to_index " + std::to_string(param) + ": " + range_text(range));
      }
      for (const model::ParamRanges& p : bucket.param_map) {
        out.push_back(at + " param " + std::to_string(p.param) + ": world " +
                      range_text(p.gbuf_world) + ", in bucket " +
                      range_text(p.gbuf_world_in_bucket) + ", local " +
                      range_text(p.gbuf_local) + ", param " + range_text(p.param_range));
      }
    }
  }
  return out;
}

Difference ranges_difference(const std::vector<model::BufferRanges>& port,
                             const std::vector<model::BufferRanges>& real) {
  const auto a = ranges_text(port), b = ranges_text(real);
  for (size_t k = 0; k < std::min(a.size(), b.size()); ++k) {
    if (a[k] != b[k]) return "gbuf ranges: port " + a[k] + "; real code " + b[k];
  }
  if (a.size() != b.size()) return std::string("gbuf ranges: one side has more entries");
  return std::nullopt;
}

Difference group_difference(const rig::RankObservation& port, const rig::RankObservation& real) {
  if (port.groups.size() != real.groups.size()) return "the number of installed groups differs";
  for (size_t g = 0; g < port.groups.size(); ++g) {
    if (port.groups[g].size() != real.groups[g].size()) {
      return "installed group " + std::to_string(g) + "'s size differs";
    }
    for (size_t i = 0; i < port.groups[g].size(); ++i) {
      const std::string a = tensor_text(port.groups[g][i]), b = tensor_text(real.groups[g][i]);
      if (a != b) {
        return "installed tensor (" + std::to_string(g) + ", " + std::to_string(i) +
               "): port " + a + ", real code " + b;
      }
    }
  }
  return std::nullopt;
}

Difference placement_difference(const std::string& at, const rig::ObservedPlacement& a,
                                const rig::ObservedPlacement& b) {
  for (const Difference& d :
       {differ(at + " offloaded", a.offloaded, b.offloaded),
        differ(at + " fp32 copy", a.fp32_copy, b.fp32_copy),
        differ(at + " pinned host copy", a.host_pinned, b.host_pinned),
        differ(at + " host sub-optimizer", a.cpu_optimizer, b.cpu_optimizer),
        differ(at + " stepped on the host", a.stepped_on_host, b.stepped_on_host),
        differ(at + " state devices", a.state_on_host, b.state_on_host)}) {
    if (d) return d;
  }
  return std::nullopt;
}

Difference entry_difference(const rig::RankUnderTest& port, const rig::RankUnderTest& real,
                            size_t g, size_t i) {
  const std::string at = "entry (" + std::to_string(g) + ", " + std::to_string(i) + ")";
  const rig::ObservedState a = port.state(g, i), b = real.state(g, i);
  for (const Difference& d :
       {differ_bits(at + " model piece", port.model_piece(g, i), real.model_piece(g, i)),
        differ_bits(at + " optimizer piece", port.optimizer_piece(g, i),
                    real.optimizer_piece(g, i)),
        differ(at + " state present", a.present, b.present),
        differ(at + " step", a.step, b.step), differ_bits(at + " exp_avg", a.exp_avg, b.exp_avg),
        differ_bits(at + " exp_avg_sq", a.exp_avg_sq, b.exp_avg_sq),
        differ_bits(at + " master", a.master, b.master)}) {
    if (d) return d;
  }
  return placement_difference(at, port.placement(g, i), real.placement(g, i));
}

}  // namespace

std::optional<std::string> construction_difference(const rig::RankObservation& port,
                                                   const rig::RankObservation& real,
                                                   const char* first, const char* second) {
  const auto error = [](const rig::RankObservation& o) { return o.error.value_or("(none)"); };
  if (error(port) != error(real)) {
    return "construction error: " + std::string(first) + " \"" + error(port) + "\", " + second +
           " \"" + error(real) + "\"";
  }
  for (const Difference& d :
       {differ("error type", port.error_type, real.error_type),
        differ("failing param", port.failing_param, real.failing_param),
        ranges_difference(port.ranges, real.ranges), group_difference(port, real),
        differ("model_param_group_index_map", port.index_map, real.index_map),
        differ("final optimizer groups", port.final_groups_match, real.final_groups_match),
        differ("offloaded tensors", port.offloaded_tensors, real.offloaded_tensors),
        differ("accelerator bytes", port.accel_bytes, real.accel_bytes),
        differ("host bytes", port.host_bytes, real.host_bytes),
        differ("host_min_numel (proposal S1)", port.host_min_numel, real.host_min_numel)}) {
    if (d) return d;
  }
  return std::nullopt;
}

std::optional<std::string> holding_difference(const rig::RankUnderTest& port,
                                              const rig::RankUnderTest& real,
                                              bool with_model_values) {
  const auto& groups = port.construction().groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      if (auto d = entry_difference(port, real, g, i)) return d;
    }
  }
  for (const Difference& d :
       {differ("group hyper-parameters", port.group_hyper_parameters(),
               real.group_hyper_parameters()),
        differ("host sub-optimizers", port.num_cpu_optimizers(), real.num_cpu_optimizers()),
        differ("accelerator sub-optimizer", port.has_accelerator_optimizer(),
               real.has_accelerator_optimizer())}) {
    if (d) return d;
  }
  if (!with_model_values) return std::nullopt;
  const auto a = port.model_values(), b = real.model_values();
  if (a.size() != b.size()) return std::string("the number of model parameters differs");
  for (size_t p = 0; p < a.size(); ++p) {
    if (auto d = differ_bits("model parameter " + std::to_string(p), a[p], b[p])) return d;
  }
  return std::nullopt;
}

void run_port_vs_real_code(const model::CaseSpec& spec, const gen::Schedule& schedule,
                           const sut::Behaviour& behaviour, const rig::MegatronTarget& tree) {
  tag_coverage(spec);
  RC_CLASSIFY(spec.transformer_engine, "Transformer Engine (its FusedAdam a stand-in there)");
  const auto layouts = model::full_param_layout(spec);
  const rig::ParamValues initial = rig::initial_values(spec, /*seed=*/2024);
  rig::Target port{behaviour, device(), std::nullopt}, real{behaviour, device(), tree};
  for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
    if (!model::instance_present(spec, inst)) continue;
    for (int64_t r : ranks_to_check(spec, layouts, inst)) {
      const auto a = rig::build_rank(port, spec, inst, r, initial);
      const auto b = rig::build_rank(real, spec, inst, r, initial);
      const std::string where = std::string(inst == model::Instance::kExpert ? "expert" : "dense") +
                                " rank " + std::to_string(r) + ", port variant " + behaviour.name;
      Difference d = construction_difference(a->construction(), b->construction());
      if (d) RC_LOG() << where << ", construction: " << *d << "\n";
      RC_ASSERT(!d);
      if (a->construction().error) continue;
      d = holding_difference(*a, *b);
      for (size_t k = 0; !d && k < schedule.steps.size(); ++k) {
        const model::StepInputs in = gen::materialise(spec, schedule.steps[k]);
        const std::string raised_a = step_outcome(*a, in), raised_b = step_outcome(*b, in);
        if (raised_a != raised_b) {
          d = "step raised: port \"" + raised_a + "\", real code \"" + raised_b + "\"";
        } else if (!raised_a.empty()) {
          break;  // both raised the same: nothing after it to compare
        } else {
          d = holding_difference(*a, *b);
        }
        if (d) *d = "after step " + std::to_string(k + 1) + ": " + *d;
      }
      if (d) RC_LOG() << where << ": " << *d << "\n";
      RC_ASSERT(!d);
    }
  }
}

}  // namespace sc::props
