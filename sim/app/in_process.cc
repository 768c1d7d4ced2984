#include "sim/app/in_process.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "sim/app/jobs.h"
#include "sim/port/device.h"

namespace sc::app {

model::CaseSpec ResolvedWorld::stage_case(const CliOptions& options, int stage,
                                          int ep_rank) const {
  return app::stage_case(options, sizes, model.params, model.num_layers, model.num_experts, stage,
                         ep_rank);
}

std::variant<ResolvedWorld, std::string> resolve_world(const CliOptions& options, int64_t scale) {
  ResolvedWorld world;
  world.scale = scale;
  auto loaded = load_model(options, scale);
  if (auto* message = std::get_if<std::string>(&loaded)) return *message;
  world.model = std::move(std::get<input::ModelInventory>(loaded));
  auto sizes = checked_world(options, world.model);
  if (auto* why = std::get_if<std::string>(&sizes)) {
    return "impossible world for " + world.model.name + ": " + *why;
  }
  world.sizes = std::get<input::WorldSizes>(sizes);
  world.device = sut::pick_device();
  if (options.device == "cpu") world.device = torch::Device(torch::kCPU);
  if (options.device == "cuda" && !world.device.is_cuda()) {
    return "--device=cuda but " + sut::cpu_fallback_reason();
  }
  return world;
}

JobRank::JobRank(const model::CaseSpec& spec, model::Instance inst, int64_t rank,
                             const sut::Behaviour& behaviour, torch::Device device, uint64_t seed)
    : spec_(spec),
      inst_(inst),
      rank_(rank),
      seed_(seed),
      rig_(spec, inst, rank, behaviour, device, seed) {
  for (int p = 0; p < static_cast<int>(spec.params.size()); ++p) {
    if (spec.params[p].is_expert == (inst == model::Instance::kExpert)) case_params_.push_back(p);
  }
}

std::string JobRank::outcome() const {
  const rig::RankObservation& obs = rig_.construction();
  if (!obs.error) return "OK";
  std::string s = obs.error_type + ": " + *obs.error;
  if (obs.failing_param >= 0) s += " (first: " + spec_.params[obs.failing_param].name + ")";
  return s;
}

model::StepInputs JobRank::step(int k) {
  model::StepInputs in = main_job_step(spec_, seed_, k);
  step(in);
  return in;
}

std::vector<model::Instance> instances_of(const model::CaseSpec& spec) {
  std::vector<model::Instance> out;
  for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
    if (model::instance_present(spec, inst)) out.push_back(inst);
  }
  return out;
}

uint64_t digest_params(const std::vector<std::vector<float>>& full) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& v : full) {
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t k = 0; k < v.size() * sizeof(float); ++k) h = (h ^ p[k]) * 0x100000001b3ull;
  }
  return h;
}

namespace {

// Every parameter of `spec` assembled from the pieces `ranks` own after a step; or the message
// when the pieces do not tile a parameter exactly once.
std::variant<std::vector<std::vector<float>>, std::string> assembled_params(
    const model::CaseSpec& spec, const std::vector<std::unique_ptr<JobRank>>& ranks) {
  std::vector<std::vector<float>> full(spec.params.size());
  std::vector<std::vector<char>> covered(spec.params.size());
  for (size_t p = 0; p < spec.params.size(); ++p) {
    full[p].assign(static_cast<size_t>(spec.params[p].numel()), 0.0f);
    covered[p].assign(full[p].size(), 0);
  }
  for (const auto& r : ranks) {
    const std::vector<int>& params = r->case_params();
    const std::vector<std::vector<float>> values = r->rig().model_values();
    for (const auto& buffer : r->rig().construction().ranges) {
      for (const auto& bucket : buffer.buckets) {
        for (const auto& pr : bucket.param_map) {
          const auto port = std::find(params.begin(), params.end(), pr.param) - params.begin();
          for (int64_t e = pr.param_range.start; e < pr.param_range.end; ++e) {
            full[pr.param][e] = values[port][e];
            ++covered[pr.param][e];
          }
        }
      }
    }
  }
  for (size_t p = 0; p < spec.params.size(); ++p) {
    for (char n : covered[p]) {
      if (n != 1) return "in-process pieces do not tile " + spec.params[p].name;
    }
  }
  return full;
}

}  // namespace

std::variant<StageDigests, std::string> stage_digests(const CliOptions& options,
                                                      const ResolvedWorld& world,
                                                      const sut::Behaviour& behaviour, int stage,
                                                      int ep_rank) {
  const model::CaseSpec c = world.stage_case(options, stage, ep_rank);
  std::vector<std::unique_ptr<JobRank>> ranks;
  for (model::Instance inst : instances_of(c)) {
    const int size = static_cast<int>(model::instance_dp(c, inst));
    for (int d = 0; d < size; ++d) {
      auto port = std::make_unique<JobRank>(c, inst, d, behaviour, world.device, options.seed);
      if (!port->ok()) {
        return "in-process " + std::string(inst == model::Instance::kExpert ? "expert-DP" : "DP") +
               " rank " + std::to_string(d) + " of stage " + std::to_string(stage) + ": " +
               port->outcome();
      }
      ranks.push_back(std::move(port));
    }
  }
  const int dp = options.world.dp, edp = options.world.dp / options.world.ep;
  StageDigests out;
  for (int k = 0; k < options.steps; ++k) {
    const model::StepInputs in = main_job_step(c, options.seed, k);
    out.state.emplace_back(static_cast<size_t>(dp + edp), 0);
    for (auto& r : ranks) {
      r->step(in);
      const bool is_expert = r->instance() == model::Instance::kExpert;
      out.state.back()[static_cast<size_t>(is_expert ? dp + r->rank() : r->rank())] =
          r->rig().digest();
    }
    auto full = assembled_params(c, ranks);
    if (auto* why = std::get_if<std::string>(&full)) return *why;
    out.params.push_back(digest_params(std::get<std::vector<std::vector<float>>>(full)));
  }
  return out;
}

}  // namespace sc::app
