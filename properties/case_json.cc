#include "properties/case_json.h"

#include <cstring>

namespace sc::props {

namespace {

// Step gradient kinds by letter, as showValue(Schedule) prints them.
constexpr const char* kKindLetters = "OZTL";

json param_json(const model::ParamSpec& p) {
  return json{{"name", p.name},
              {"shape", p.shape},
              {"dtype", model::dtype_name(p.dtype)},
              {"keep_in_fp32", p.keep_in_fp32},
              {"is_expert", p.is_expert},
              {"shared_embedding", p.shared_embedding},
              {"group", p.group},
              {"chunk", p.chunk}};
}

model::ParamSpec read_param(const json& v, const std::string& path) {
  CaseReader r(v, path);
  model::ParamSpec p;
  p.name = r.string("name");
  const json& shape = r.array("shape");
  for (size_t d = 0; d < shape.size(); ++d) {
    p.shape.push_back(CaseReader::integer_at(
        shape[d], r.at("shape") + "[" + std::to_string(d) + "]", 0, int64_t{1} << 40));
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

}  // namespace

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
              {"buffers_from_parallel_state", c.buffers_from_parallel_state},
              {"params", params}};
}

model::CaseSpec read_case(const json& v, const std::string& path) {
  CaseReader r(v, path);
  model::CaseSpec c;
  c.dp = static_cast<int>(r.integer("dp", 1, 1 << 20));
  c.expert_dp = static_cast<int>(r.integer("expert_dp", 1, 1 << 20));
  const json& bucket = *r.get("bucket_size");
  if (!bucket.is_null()) {
    c.bucket_size = CaseReader::integer_at(bucket, r.at("bucket_size"), 1, int64_t{1} << 40);
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
  // Case files from before it have no such key: the buffers were handed their groups.
  if (r.get("buffers_from_parallel_state", /*optional=*/true) != nullptr) {
    c.buffers_from_parallel_state = r.boolean("buffers_from_parallel_state");
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
    hyper.push_back(json{{"lr", h.lr},
                         {"beta1", h.beta1},
                         {"beta2", h.beta2},
                         {"eps", h.eps},
                         {"weight_decay", h.weight_decay}});
  }
  return json{{"grad_seed", d.grad_seed}, {"kinds", kinds}, {"hyper", hyper}};
}

gen::StepDraw read_step(const json& v, const std::string& path, const model::CaseSpec& c) {
  CaseReader r(v, path);
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
      bad(r.at("kinds"),
          std::string("unknown gradient kind '") + k + "' (O ordinary, Z zero, T tiny, L large)");
    }
    d.kinds.push_back(static_cast<gen::GradKind>(at - kKindLetters));
  }
  const json& hyper = r.array("hyper");
  if (static_cast<int>(hyper.size()) != c.num_groups()) {
    bad(r.at("hyper"), "one entry per param group: " + std::to_string(c.num_groups()) +
                           " expected, got " + std::to_string(hyper.size()));
  }
  for (size_t g = 0; g < hyper.size(); ++g) {
    CaseReader h(hyper[g], r.at("hyper") + "[" + std::to_string(g) + "]");
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

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw CaseFileError(path + ": " + why);
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

}  // namespace sc::props
