#include "properties/case_file.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "properties/overloaded.h"

namespace sc::props {

namespace {

using nlohmann::json;

// Step gradient kinds by letter, as showValue(Schedule) prints them.
constexpr const char* kKindLetters = "OZTL";

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw CaseFileError(path + ": " + why);
}

// Reads the members of one JSON object, refusing unknown and missing keys.
class Reader {
 public:
  Reader(const json& v, std::string path) : v_(v), path_(std::move(path)) {
    if (!v_.is_object()) bad(path_, std::string("expected an object, got ") + v_.type_name());
  }
  // The member `key`; nullptr when it is absent and `optional`.
  const json* get(const std::string& key, bool optional = false) {
    seen_.push_back(key);
    auto it = v_.find(key);
    if (it == v_.end()) {
      if (optional) return nullptr;
      bad(path_, "missing key \"" + key + "\"");
    }
    return &*it;
  }
  std::string at(const std::string& key) const { return path_ + "." + key; }
  bool boolean(const std::string& key) {
    const json& x = *get(key);
    if (!x.is_boolean()) bad(at(key), std::string("expected true or false, got ") + x.type_name());
    return x.get<bool>();
  }
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) {
    return integer_at(*get(key), at(key), lo, hi);
  }
  uint64_t unsigned_integer(const std::string& key) {
    const json& x = *get(key);
    if (!x.is_number_unsigned()) {
      bad(at(key), std::string("expected an unsigned integer, got ") + x.type_name());
    }
    return x.get<uint64_t>();
  }
  double number(const std::string& key) {
    const json& x = *get(key);
    if (!x.is_number()) bad(at(key), std::string("expected a number, got ") + x.type_name());
    return x.get<double>();
  }
  std::string string(const std::string& key) {
    const json& x = *get(key);
    if (!x.is_string()) bad(at(key), std::string("expected a string, got ") + x.type_name());
    return x.get<std::string>();
  }
  const json& array(const std::string& key) {
    const json& x = *get(key);
    if (!x.is_array()) bad(at(key), std::string("expected an array, got ") + x.type_name());
    return x;
  }
  // Fails on the first key that no get() asked for.
  void done() const {
    for (const auto& [key, value] : v_.items()) {
      (void)value;
      if (std::find(seen_.begin(), seen_.end(), key) == seen_.end()) {
        bad(at(key), "unknown key");
      }
    }
  }
  static int64_t integer_at(const json& x, const std::string& path, int64_t lo, int64_t hi) {
    if (!x.is_number_integer()) bad(path, std::string("expected an integer, got ") + x.type_name());
    const int64_t n = x.get<int64_t>();
    if (n < lo || n > hi) {
      bad(path, std::to_string(n) + " is outside [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "]");
    }
    return n;
  }

 private:
  const json& v_;
  std::string path_;
  std::vector<std::string> seen_;
};

json param_json(const model::ParamSpec& p) {
  return json{{"name", p.name},           {"shape", p.shape},
              {"dtype", model::dtype_name(p.dtype)}, {"keep_in_fp32", p.keep_in_fp32},
              {"is_expert", p.is_expert}, {"shared_embedding", p.shared_embedding},
              {"group", p.group},         {"chunk", p.chunk}};
}

model::ParamSpec read_param(const json& v, const std::string& path) {
  Reader r(v, path);
  model::ParamSpec p;
  p.name = r.string("name");
  const json& shape = r.array("shape");
  for (size_t d = 0; d < shape.size(); ++d) {
    p.shape.push_back(Reader::integer_at(shape[d], r.at("shape") + "[" + std::to_string(d) + "]",
                                         0, int64_t{1} << 40));
  }
  const std::string dtype = r.string("dtype");
  const auto dt = model::parse_dtype(dtype);
  if (!dt) bad(r.at("dtype"), "unknown dtype \"" + dtype + "\" (fp32, bf16, fp16, fp64)");
  p.dtype = *dt;
  p.keep_in_fp32 = r.boolean("keep_in_fp32");
  p.is_expert = r.boolean("is_expert");
  p.shared_embedding = r.boolean("shared_embedding");
  p.group = static_cast<int>(r.integer("group", 0, 1 << 20));
  p.chunk = static_cast<int>(r.integer("chunk", 0, 1 << 20));
  r.done();
  return p;
}

json case_json(const model::CaseSpec& c) {
  json params = json::array();
  for (const model::ParamSpec& p : c.params) params.push_back(param_json(p));
  return json{{"dp", c.dp},
              {"expert_dp", c.expert_dp},
              {"bucket_size", c.bucket_size ? json(*c.bucket_size) : json(nullptr)},
              {"pad_for_high_nccl_busbw", c.pad_for_high_nccl_busbw},
              {"grad_reduce_in_fp32", c.grad_reduce_in_fp32},
              {"precision_aware", c.precision_aware},
              {"store_param_remainders", c.store_param_remainders},
              {"cpu_offload", c.cpu_offload},
              {"overlap_cpu_optimizer_d2h_h2d", c.overlap_cpu_optimizer_d2h_h2d},
              {"offload_fraction", c.offload_fraction},
              {"transformer_engine", c.transformer_engine},
              {"params", params}};
}

model::CaseSpec read_case(const json& v, const std::string& path) {
  Reader r(v, path);
  model::CaseSpec c;
  c.dp = static_cast<int>(r.integer("dp", 1, 1 << 20));
  c.expert_dp = static_cast<int>(r.integer("expert_dp", 1, 1 << 20));
  const json& bucket = *r.get("bucket_size");
  if (!bucket.is_null()) {
    c.bucket_size = Reader::integer_at(bucket, r.at("bucket_size"), 1, int64_t{1} << 40);
  }
  c.pad_for_high_nccl_busbw = r.boolean("pad_for_high_nccl_busbw");
  c.grad_reduce_in_fp32 = r.boolean("grad_reduce_in_fp32");
  c.precision_aware = r.boolean("precision_aware");
  c.store_param_remainders = r.boolean("store_param_remainders");
  c.cpu_offload = r.boolean("cpu_offload");
  c.overlap_cpu_optimizer_d2h_h2d = r.boolean("overlap_cpu_optimizer_d2h_h2d");
  c.offload_fraction = r.number("offload_fraction");
  // Case files from before the no-TE configuration have no such key: Transformer Engine.
  if (r.get("transformer_engine", /*optional=*/true) != nullptr) {
    c.transformer_engine = r.boolean("transformer_engine");
  }
  if (!(c.offload_fraction >= 0.0 && c.offload_fraction <= 1.0)) {
    bad(r.at("offload_fraction"), "must lie in [0, 1]");
  }
  const json& params = r.array("params");
  if (params.empty()) bad(r.at("params"), "a case needs at least one parameter");
  for (size_t i = 0; i < params.size(); ++i) {
    c.params.push_back(read_param(params[i], r.at("params") + "[" + std::to_string(i) + "]"));
  }
  r.done();
  if (const auto why = model::validate(c)) bad(path, *why);
  return c;
}

json step_json(const gen::StepDraw& d) {
  std::string kinds;
  for (gen::GradKind k : d.kinds) kinds += kKindLetters[static_cast<int>(k)];
  json hyper = json::array();
  for (const model::AdamWHyper& h : d.hyper) {
    hyper.push_back(json{{"lr", h.lr}, {"beta1", h.beta1}, {"beta2", h.beta2}, {"eps", h.eps},
                         {"weight_decay", h.weight_decay}});
  }
  return json{{"grad_seed", d.grad_seed}, {"kinds", kinds}, {"hyper", hyper}};
}

gen::StepDraw read_step(const json& v, const std::string& path, const model::CaseSpec& c) {
  Reader r(v, path);
  gen::StepDraw d;
  d.grad_seed = r.unsigned_integer("grad_seed");
  const std::string kinds = r.string("kinds");
  if (kinds.size() != c.params.size()) {
    bad(r.at("kinds"), "one letter per parameter: " + std::to_string(c.params.size()) +
                           " expected, got " + std::to_string(kinds.size()));
  }
  for (char k : kinds) {
    const char* at = std::strchr(kKindLetters, k);
    if (k == '\0' || at == nullptr) {
      bad(r.at("kinds"), std::string("unknown gradient kind '") + k +
                             "' (O ordinary, Z zero, T tiny, L large)");
    }
    d.kinds.push_back(static_cast<gen::GradKind>(at - kKindLetters));
  }
  const json& hyper = r.array("hyper");
  if (static_cast<int>(hyper.size()) != c.num_groups()) {
    bad(r.at("hyper"), "one entry per param group: " + std::to_string(c.num_groups()) +
                           " expected, got " + std::to_string(hyper.size()));
  }
  for (size_t g = 0; g < hyper.size(); ++g) {
    Reader h(hyper[g], r.at("hyper") + "[" + std::to_string(g) + "]");
    model::AdamWHyper x;
    x.lr = h.number("lr");
    x.beta1 = h.number("beta1");
    x.beta2 = h.number("beta2");
    x.eps = h.number("eps");
    x.weight_decay = h.number("weight_decay");
    h.done();
    d.hyper.push_back(x);
  }
  r.done();
  return d;
}

json command_json(const StateCommand& command) {
  json out{{"command", command_name(command)}};
  std::visit(Overloaded{[&](const state_cmd::Step& x) { out["step"] = step_json(x.draw); },
                        [&](const state_cmd::SetHyper& x) {
                          out["group"] = x.group;
                          out["value"] = x.value;
                        },
                        [&](const state_cmd::ZeroGrad& x) { out["set_to_none"] = x.set_to_none; },
                        [](const auto&) {}},
             command);
  return out;
}

StateCommand read_command(const json& v, const std::string& path, const model::CaseSpec& c) {
  Reader r(v, path);
  const std::string name = r.string("command");
  StateCommand k;
  if (name == "Step") {
    k = state_cmd::Step{read_step(*r.get("step"), r.at("step"), c)};
  } else if (name == "SetLr" || name == "SetWd") {
    state_cmd::SetHyper x;
    x.lr = name == "SetLr";
    x.group = static_cast<int>(r.integer("group", 0, c.num_groups() - 1));
    x.value = r.number("value");
    if (!(x.value >= 0.0 && x.value <= 1.0)) bad(r.at("value"), "must lie in [0, 1]");
    k = x;
  } else if (name == "ZeroGrad") {
    k = state_cmd::ZeroGrad{r.boolean("set_to_none")};
  } else if (name == "SaveState") {
    k = state_cmd::SaveState{};
  } else if (name == "Rebuild+LoadState") {
    k = state_cmd::RebuildAndLoadState{};
  } else if (name == "ReloadModelParams") {
    k = state_cmd::ReloadModelParams{};
  } else {
    bad(r.at("command"), "unknown command \"" + name +
                             "\" (Step, SetLr, SetWd, ZeroGrad, SaveState, Rebuild+LoadState, "
                             "ReloadModelParams)");
  }
  r.done();
  return k;
}

bool same_param(const model::ParamSpec& a, const model::ParamSpec& b) {
  return a.name == b.name && a.shape == b.shape && a.dtype == b.dtype &&
         a.keep_in_fp32 == b.keep_in_fp32 && a.is_expert == b.is_expert &&
         a.shared_embedding == b.shared_embedding && a.group == b.group && a.chunk == b.chunk;
}

bool same_step(const gen::StepDraw& s, const gen::StepDraw& t) {
  bool same = s.grad_seed == t.grad_seed && s.kinds == t.kinds && s.hyper.size() == t.hyper.size();
  for (size_t g = 0; same && g < s.hyper.size(); ++g) same = s.hyper[g] == t.hyper[g];
  return same;
}

bool same_command(const StateCommand& a, const StateCommand& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<state_cmd::Step>(&a)) {
    return same_step(x->draw, std::get<state_cmd::Step>(b).draw);
  }
  if (const auto* x = std::get_if<state_cmd::SetHyper>(&a)) {
    const auto& y = std::get<state_cmd::SetHyper>(b);
    return x->group == y.group && x->lr == y.lr && x->value == y.value;
  }
  if (const auto* x = std::get_if<state_cmd::ZeroGrad>(&a)) {
    return x->set_to_none == std::get<state_cmd::ZeroGrad>(b).set_to_none;
  }
  return true;  // the commands without fields
}

RealCodeSource read_source(const json& v, const std::string& path) {
  Reader r(v, path);
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
  const json out{{"property", file.property},
                 {"variant", file.variant},
                 {"case", case_json(file.inputs.c)},
                 {"schedule", steps},
                 {"split", file.inputs.split},
                 {"other_fraction", file.inputs.other_fraction},
                 {"checkpoint_format", file.inputs.checkpoint_format},
                 {"other_dp", file.inputs.other_dp}};
  json full = out;
  if (!file.inputs.map_location.empty()) full["map_location"] = file.inputs.map_location;
  if (!file.inputs.commands.empty()) {
    json commands = json::array();
    for (const StateCommand& k : file.inputs.commands) commands.push_back(command_json(k));
    full["rank"] = file.inputs.rank;
    full["commands"] = commands;
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
  Reader r(v, "case file");
  CaseFile f;
  f.property = r.string("property");
  f.variant = r.string("variant");
  f.inputs.c = read_case(*r.get("case"), "case");
  const json& steps = r.array("schedule");
  for (size_t k = 0; k < steps.size(); ++k) {
    f.inputs.schedule.steps.push_back(
        read_step(steps[k], "schedule[" + std::to_string(k) + "]", f.inputs.c));
  }
  f.inputs.split = static_cast<size_t>(r.integer("split", 0, 1 << 20));
  if (f.inputs.split > steps.size()) bad("split", "larger than the number of steps");
  f.inputs.other_fraction = r.number("other_fraction");
  if (!(f.inputs.other_fraction >= 0.0 && f.inputs.other_fraction <= 1.0)) {
    bad("other_fraction", "must lie in [0, 1]");
  }
  // Optional: case files written before the gathered-checkpoint property lack them.
  if (r.get("checkpoint_format", true)) f.inputs.checkpoint_format = r.string("checkpoint_format");
  const std::string& format = f.inputs.checkpoint_format;
  if (!format.empty() && format != "dp_zero_gather_scatter" && format != "fully_reshardable") {
    bad("checkpoint_format", "unknown format \"" + format +
                                 "\" (dp_zero_gather_scatter, fully_reshardable or empty)");
  }
  if (r.get("other_dp", true)) f.inputs.other_dp = static_cast<int>(r.integer("other_dp", 0, 4096));
  if (f.inputs.other_dp != 0 && format != "fully_reshardable") {
    bad("other_dp", "only a fully_reshardable checkpoint loads at another DP size");
  }
  // Optional: only the load-placement property's case files have it.
  if (r.get("map_location", true)) {
    f.inputs.map_location = r.string("map_location");
    if (f.inputs.map_location != "cpu") {
      bad("map_location", "unknown map location \"" + f.inputs.map_location +
                              "\" (\"cpu\", or leave the key out to read tensors where saved)");
    }
  }
  // Optional: only the stateful property's case files have them.
  if (r.get("rank", true)) f.inputs.rank = r.integer("rank", 0, f.inputs.c.dp - 1);
  if (r.get("commands", true)) {
    const json& commands = r.array("commands");
    for (size_t k = 0; k < commands.size(); ++k) {
      f.inputs.commands.push_back(
          read_command(commands[k], "commands[" + std::to_string(k) + "]", f.inputs.c));
    }
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
              x.store_param_remainders == y.store_param_remainders &&
              x.cpu_offload == y.cpu_offload && x.offload_fraction == y.offload_fraction &&
              x.overlap_cpu_optimizer_d2h_h2d == y.overlap_cpu_optimizer_d2h_h2d &&
              x.params.size() == y.params.size() && first.split == second.split &&
              first.other_fraction == second.other_fraction &&
              first.checkpoint_format == second.checkpoint_format &&
              first.other_dp == second.other_dp && first.map_location == second.map_location &&
              first.schedule.steps.size() == second.schedule.steps.size() &&
              first.rank == second.rank && first.commands.size() == second.commands.size();
  for (size_t i = 0; same && i < x.params.size(); ++i) same = same_param(x.params[i], y.params[i]);
  for (size_t k = 0; same && k < first.schedule.steps.size(); ++k) {
    same = same_step(first.schedule.steps[k], second.schedule.steps[k]);
  }
  for (size_t k = 0; same && k < first.commands.size(); ++k) {
    same = same_command(first.commands[k], second.commands[k]);
  }
  return same;
}

std::string command_name(const StateCommand& command) {
  return std::visit(
      Overloaded{[](const state_cmd::Step&) { return "Step"; },
                 [](const state_cmd::SetHyper& x) { return x.lr ? "SetLr" : "SetWd"; },
                 [](const state_cmd::ZeroGrad&) { return "ZeroGrad"; },
                 [](const state_cmd::SaveState&) { return "SaveState"; },
                 [](const state_cmd::RebuildAndLoadState&) { return "Rebuild+LoadState"; },
                 [](const state_cmd::ReloadModelParams&) { return "ReloadModelParams"; }},
      command);
}

}  // namespace sc::props
