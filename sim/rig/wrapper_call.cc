#include "sim/rig/wrapper_call.h"

namespace sc::rig {

namespace {

using json = nlohmann::json;

std::vector<std::vector<float>> values_of(const json& lists) {
  std::vector<std::vector<float>> out;
  for (const json& bits : lists) out.push_back(from_bits(bits));
  return out;
}

std::optional<std::vector<std::vector<float>>> optional_values(const json& reply,
                                                               const char* key) {
  if (!reply.contains(key) || reply.at(key).is_null()) return std::nullopt;
  return values_of(reply.at(key));
}

const char* dtype_of(Wrapper w, const WrapperParam& p) {
  if (!p.half) return "fp32";
  return w == Wrapper::kFp16 ? "fp16" : "bf16";
}

json request_of(const WrapperCall& call) {
  json params = json::array(), initial = json::array();
  for (const WrapperParam& p : call.params) {
    params.push_back(
        {{"dtype", dtype_of(call.wrapper, p)}, {"shape", p.shape}, {"is_expert", p.expert}});
    initial.push_back(to_bits(p.initial));
  }
  return {{"op", "wrapper_lifecycle"},
          {"wrapper", wrapper_name(call.wrapper)},
          {"frozen", call.frozen},
          {"transformer_engine", call.transformer_engine},
          {"params", params},
          {"initial", initial},
          {"grads", steps_json(call.grads)},
          {"save_after", call.save_after},
          {"resume", resume_name(call.resume)}};
}

}  // namespace

json steps_json(const std::vector<std::vector<std::vector<float>>>& steps) {
  json out = json::array();
  for (const auto& step : steps) {
    json one = json::array();
    for (const std::vector<float>& values : step) one.push_back(to_bits(values));
    out.push_back(one);
  }
  return out;
}

std::vector<std::vector<std::vector<float>>> steps_of(const json& steps) {
  std::vector<std::vector<std::vector<float>>> out;
  for (const json& step : steps) out.push_back(values_of(step));
  return out;
}

const char* wrapper_name(Wrapper w) {
  switch (w) {
    case Wrapper::kFloat16:
      return "float16";
    case Wrapper::kFp16:
      return "fp16";
    case Wrapper::kFp32:
      return "fp32";
    case Wrapper::kDistributed:
      return "distributed";
  }
  return "?";
}

const char* resume_name(Resume r) {
  switch (r) {
    case Resume::kOptimizer:
      return "optimizer";
    case Resume::kWeights:
      return "weights";
    case Resume::kMainParamsFromCheckpoint:
      return "main_params_from_checkpoint";
  }
  return "?";
}

WrapperOutcome run_wrapper_lifecycle(const MegatronTarget& tree, const WrapperCall& call) {
  const json reply = MegatronWorker::of(tree).request(request_of(call));
  WrapperOutcome out;
  if (reply.contains("raised")) {
    out.raised = reply.at("raised").get<std::string>();
    return out;
  }
  out.optimizers = reply.at("optimizers").get<std::vector<std::string>>();
  out.stubs = reply.at("stubs").get<std::vector<bool>>();
  if (!reply.at("save_changed").is_null()) {
    out.save_changed = reply.at("save_changed").get<std::string>();
  }
  out.uninterrupted = values_of(reply.at("uninterrupted"));
  out.resumed = values_of(reply.at("resumed"));
  out.reference = optional_values(reply, "reference");
  out.main_after_reload = optional_values(reply, "main_after_reload");
  out.checkpoint_weights = optional_values(reply, "checkpoint_weights");
  return out;
}

namespace {

const char* resumed_with(Resume r) {
  switch (r) {
    case Resume::kOptimizer:
      return "the optimizer state";
    case Resume::kWeights:
      return "the weights only";
    case Resume::kMainParamsFromCheckpoint:
      return "the weights and the main params of an fp32 checkpoint";
  }
  return "?";
}

}  // namespace

void showValue(const WrapperCall& call, std::ostream& os) {
  os << wrapper_name(call.wrapper) << (call.frozen ? " (every parameter frozen)" : "")
     << (call.transformer_engine ? ", with Transformer Engine" : "") << ", " << call.grads.size()
     << " steps, saved after " << call.save_after << ", resumed with "
     << resumed_with(call.resume);
  for (size_t i = 0; i < call.params.size(); ++i) {
    const WrapperParam& p = call.params[i];
    os << "\n  p" << i << ": " << dtype_of(call.wrapper, p) << "[";
    for (size_t d = 0; d < p.shape.size(); ++d) os << (d == 0 ? "" : "x") << p.shape[d];
    os << "]" << (p.expert ? " expert" : "");
  }
}

}  // namespace sc::rig
