#include "properties/case_file.h"

#include <algorithm>

#include "properties/case_extras.h"
#include "properties/case_json.h"

namespace sc::props {

namespace {

RealCodeSource read_source(const json& v, const std::string& path) {
  CaseReader r(v, path);
  RealCodeSource s;
  s.tree = r.string("tree");
  if (s.tree.empty()) bad(r.at("tree"), "names no tree");
  s.commit = r.string("commit");
  const json& patches = r.array("patches");
  for (size_t k = 0; k < patches.size(); ++k) {
    if (!patches[k].is_string()) bad(path + ".patches[" + std::to_string(k) + "]", "not a string");
    s.patches.push_back(patches[k].get<std::string>());
  }
  r.done();
  return s;
}

}  // namespace

std::string to_json(const CaseFile& file) {
  json steps = json::array();
  for (const gen::StepDraw& d : file.inputs.schedule.steps) steps.push_back(step_json(d));
  json full{{"property", file.property},
            {"variant", file.variant},
            {"case", case_json(file.inputs.c)},
            {"schedule", steps}};
  for (const CaseExtra& e : case_extras()) {
    if (std::find(file.extras.begin(), file.extras.end(), e.key) == file.extras.end()) continue;
    json value = e.write(file.inputs);
    if (!value.is_null()) full[e.key] = std::move(value);
  }
  if (file.megatron) {
    full["megatron"] = {{"tree", file.megatron->tree},
                        {"commit", file.megatron->commit},
                        {"patches", file.megatron->patches}};
  }
  return full.dump(2) + "\n";
}

CaseFile parse_case_file(const std::string& text) {
  json v;
  try {
    v = json::parse(text);
  } catch (const json::exception& e) {  // a syntax error, or a number out of range (1e400)
    throw CaseFileError(std::string("not JSON: ") + e.what());
  }
  CaseReader r(v, "case file");
  CaseFile f;
  f.property = r.string("property");
  f.variant = r.string("variant");
  f.inputs.c = read_case(*r.get("case"), "case");
  const json& steps = r.array("schedule");
  for (size_t k = 0; k < steps.size(); ++k) {
    f.inputs.schedule.steps.push_back(
        read_step(steps[k], "schedule[" + std::to_string(k) + "]", f.inputs.c));
  }
  // The property's own extras; files of earlier releases hold "split" and "other_fraction"
  // whatever their property.
  for (const CaseExtra& e : case_extras()) {
    if (!r.get(e.key, /*optional=*/true)) continue;
    e.read(r, f.inputs);
    f.extras.push_back(e.key);
  }
  if (r.get("megatron", true)) f.megatron = read_source(*r.get("megatron"), r.at("megatron"));
  r.done();
  return f;
}

bool same_inputs(const CaseInputs& first, const CaseInputs& second) {
  const model::CaseSpec &x = first.c, &y = second.c;
  bool same = x.dp == y.dp && x.expert_dp == y.expert_dp && x.bucket_size == y.bucket_size &&
              x.pad_for_high_nccl_busbw == y.pad_for_high_nccl_busbw &&
              x.grad_reduce_in_fp32 == y.grad_reduce_in_fp32 &&
              x.precision_aware == y.precision_aware &&
              x.transformer_engine == y.transformer_engine &&
              x.buffers_from_parallel_state == y.buffers_from_parallel_state &&
              x.store_param_remainders == y.store_param_remainders &&
              x.cpu_offload == y.cpu_offload && x.offload_fraction == y.offload_fraction &&
              x.overlap_cpu_optimizer_d2h_h2d == y.overlap_cpu_optimizer_d2h_h2d &&
              x.params.size() == y.params.size() &&
              first.schedule.steps.size() == second.schedule.steps.size();
  for (size_t i = 0; same && i < x.params.size(); ++i) same = same_param(x.params[i], y.params[i]);
  for (size_t k = 0; same && k < first.schedule.steps.size(); ++k) {
    same = same_step(first.schedule.steps[k], second.schedule.steps[k]);
  }
  for (const CaseExtra& e : case_extras()) same = same && e.same(first, second);
  return same;
}

}  // namespace sc::props
