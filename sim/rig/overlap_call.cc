#include "sim/rig/overlap_call.h"

namespace sc::rig {

namespace {

using json = nlohmann::json;

json request_of(const OverlapCall& call) {
  json params = json::array(), initial = json::array();
  for (const WrapperParam& p : call.params) {
    params.push_back({{"dtype", p.half ? "bf16" : "fp32"}, {"shape", p.shape}});
    initial.push_back(to_bits(p.initial));
  }
  return {{"op", "overlap_training"}, {"params", params},
          {"initial", initial},       {"order", call.order},
          {"bucket_size", call.bucket_size}, {"grads", steps_json(call.grads)}};
}

std::optional<std::string> raised(const json& reply, const char* key) {
  if (reply.at(key).is_null()) return std::nullopt;
  return reply.at(key).get<std::string>();
}

}  // namespace

OverlapOutcome run_overlap_training(const MegatronTarget& tree, const OverlapCall& call) {
  const json reply = MegatronWorker::of(tree).request(request_of(call));
  OverlapOutcome out;
  out.overlapped = steps_of(reply.at("overlapped"));
  out.synchronous = steps_of(reply.at("synchronous"));
  out.overlapped_raised = raised(reply, "overlapped_raised");
  out.synchronous_raised = raised(reply, "synchronous_raised");
  return out;
}

void showValue(const OverlapCall& call, std::ostream& os) {
  os << call.grads.size() << " steps, bucket_size " << call.bucket_size << ", forward order";
  for (int k : call.order) os << " p" << k;
  for (size_t i = 0; i < call.params.size(); ++i) {
    const WrapperParam& p = call.params[i];
    os << "\n  p" << i << ": " << (p.half ? "bf16" : "fp32") << "[";
    for (size_t d = 0; d < p.shape.size(); ++d) os << (d == 0 ? "" : "x") << p.shape[d];
    os << "]";
  }
}

}  // namespace sc::rig
