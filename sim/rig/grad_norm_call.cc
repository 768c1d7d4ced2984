#include "sim/rig/grad_norm_call.h"

#include <cmath>

#include "sim/port/clip_grads.h"

namespace sc::rig {

namespace {

using json = nlohmann::json;

// The port: each rank's share in rank order, then the group's reduction (MAX, or SUM added in
// rank order in fp32), which every rank receives and finishes alike.
GradNormOutcome port_grad_norm(const Target& target, const GradNormCall& call) {
  const bool fixed = target.behaviour.has(sut::Deviation::kF17);
  GradNormOutcome out;
  torch::Tensor reduced;
  for (size_t r = 0; r < call.grads.size(); ++r) {
    std::vector<torch::Tensor> grads;
    for (const std::vector<float>& g : call.grads[r]) {
      grads.push_back(torch::tensor(g, torch::kFloat).to(target.device));
    }
    torch::Tensor share;
    try {
      share = sut::grad_norm_share(grads, call.norm_type, fixed);
    } catch (const sut::PythonRaised& e) {
      out.raising_rank = static_cast<int>(r);
      out.raised = e.type + ": " + e.what();
      return out;
    }
    share = share.cpu();
    if (!reduced.defined()) {
      reduced = share;
    } else if (sut::norm_reduce(call.norm_type) == sut::NormReduce::kMax) {
      reduced = torch::maximum(reduced, share);
    } else {
      reduced = reduced + share;
    }
  }
  out.norms.assign(call.grads.size(), sut::grad_norm_from_reduced(reduced, call.norm_type));
  return out;
}

GradNormOutcome megatron_grad_norm(const Target& target, const GradNormCall& call) {
  MegatronTarget where = *target.megatron;
  where.cuda = target.device.is_cuda();
  json ranks = json::array();
  for (const auto& grads : call.grads) {
    json list = json::array();
    for (const std::vector<float>& g : grads) list.push_back(to_bits(g));
    ranks.push_back(list);
  }
  const json norm_type =
      std::isinf(call.norm_type) ? json("inf") : json(call.norm_type);
  const json reply = MegatronWorker::of(where).request(
      {{"op", "grad_norm"}, {"grads", ranks}, {"norm_type", norm_type}});
  GradNormOutcome out;
  if (reply.contains("raised")) {
    out.raising_rank = reply.at("rank").get<int>();
    out.raised = reply.at("raised").get<std::string>();
    return out;
  }
  out.norms = reply.at("norms").get<std::vector<double>>();
  return out;
}

}  // namespace

GradNormOutcome call_grad_norm(const Target& target, const GradNormCall& call) {
  return target.megatron ? megatron_grad_norm(target, call) : port_grad_norm(target, call);
}

void showValue(const GradNormCall& call, std::ostream& os) {
  os << "norm type " << call.norm_type << ", " << call.grads.size() << " ranks";
  for (size_t r = 0; r < call.grads.size(); ++r) {
    os << "\n  rank " << r << ":";
    if (call.grads[r].empty()) os << " no grads";
    for (const std::vector<float>& g : call.grads[r]) {
      os << " [";
      for (size_t i = 0; i < g.size(); ++i) os << (i == 0 ? "" : ", ") << g[i];
      os << "]";
    }
  }
}

}  // namespace sc::rig
