#include "sim/app/jobs.h"

#include <algorithm>
#include <iterator>
#include <sstream>

#include "model/memory.h"
#include "model/shard.h"
#include "sim/input/inventory_file.h"
#include "sim/rig/rng.h"

namespace sc::app {

namespace {

// The rank of a world that would hold the most tensor bytes in tensor mode, by the model's
// accounting (both sides, once stepped: on a CPU accelerator both are host memory).
struct LargestRank {
  int64_t total = -1;
  int stage = 0, dp_rank = 0;
  model::SideBytes kinds;  // accelerator + host, per kind
  std::vector<model::ParamSpec> params;
};

LargestRank largest_rank(const CliOptions& o, const input::ModelInventory& model,
                         const input::WorldSizes& w) {
  LargestRank best;
  for (int stage = 0; stage < w.pp; ++stage) {
    for (int d = 0; d < w.dp; ++d) {
      const model::CaseSpec c =
          stage_case(o, w, model.params, model.num_layers, model.num_experts, stage, d % w.ep);
      const auto layouts = model::full_param_layout(c);
      model::SideBytes kinds;
      for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
        if (!model::instance_present(c, inst)) continue;
        const int64_t rank = inst == model::Instance::kExpert ? d / w.ep : d;
        const model::RankBytes b =
            model::rank_bytes(c, layouts, model::plan_rank(c, layouts, inst, rank));
        kinds += b.accelerator;
        kinds += b.host;
      }
      if (kinds.after_step() > best.total) {
        best.total = kinds.after_step();
        best.stage = stage;
        best.dp_rank = d;
        best.kinds = kinds;
        best.params = std::move(c.params);
      }
    }
  }
  return best;
}

}  // namespace

std::optional<std::string> memory_budget_refusal(const CliOptions& options,
                                                 const input::ModelInventory& model,
                                                 const input::WorldSizes& world, int64_t scale,
                                                 int64_t budget) {
  const LargestRank worst = largest_rank(options, model, world);
  if (worst.total <= budget) return std::nullopt;
  std::ostringstream os;
  os << "tensor mode would build " << format_bytes(worst.total) << " of tensors for rank "
     << worst.stage * world.dp + worst.dp_rank << " (stage " << worst.stage << ", dp rank "
     << worst.dp_rank << ") of " << model.name << " at scale " << scale
     << ", above --memory-budget=" << format_bytes(budget) << "; largest kinds:";
  const std::pair<const char*, int64_t> kinds[] = {
      {"param_buffer", worst.kinds.param_buffer},   {"grad_buffer", worst.kinds.grad_buffer},
      {"main_params", worst.kinds.main_params},     {"grad_copies", worst.kinds.grad_copies},
      {"optimizer_state", worst.kinds.optimizer_state}};
  std::vector<std::pair<const char*, int64_t>> sorted(std::begin(kinds), std::end(kinds));
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  for (size_t i = 0; i < 3; ++i) {
    os << (i ? ", " : " ") << sorted[i].first << " " << format_bytes(sorted[i].second);
  }
  std::vector<const model::ParamSpec*> params;
  for (const auto& p : worst.params) params.push_back(&p);
  auto bytes = [](const model::ParamSpec* p) { return p->numel() * model::element_size(p->dtype); };
  std::stable_sort(params.begin(), params.end(),
                   [&](const auto* a, const auto* b) { return bytes(a) > bytes(b); });
  os << "; largest parameters:";
  for (size_t i = 0; i < params.size() && i < 3; ++i) {
    os << (i ? ", " : " ") << params[i]->name << " (" << model::dtype_name(params[i]->dtype)
       << ", " << format_bytes(bytes(params[i])) << ")";
  }
  // The smallest power-of-two multiple of the scale at which the largest rank fits.
  std::string fits;
  for (int64_t s = scale * 2; s <= (int64_t{1} << 40); s *= 2) {
    auto smaller = load_model(options, s);
    if (!std::holds_alternative<input::ModelInventory>(smaller)) break;
    if (largest_rank(options, std::get<input::ModelInventory>(smaller), world).total <= budget) {
      fits = "--scale=" + std::to_string(s) + " fits; ";
      break;
    }
  }
  os << ". Use a larger --scale (" << fits << "every dimension is divided by it) or "
     << "--layout-only (no tensors, any size), or raise --memory-budget";
  return os.str();
}

std::variant<input::ModelInventory, std::string> load_model(const CliOptions& options,
                                                            int64_t scale) {
  if (!options.model_file.empty()) {
    auto model = input::load_inventory_file(options.model_file, scale);
    // Its messages begin with the file's name: "--model-file=FILE: why", as for every option.
    if (auto* why = std::get_if<std::string>(&model)) *why = "--model-file=" + *why;
    return model;
  }
  if (auto model = input::builtin_model(options.model, scale)) return std::move(*model);
  return "unknown model '" + options.model + "'";
}

std::variant<input::WorldSizes, std::string> checked_world(const CliOptions& options,
                                                           const input::ModelInventory& model) {
  input::WorldSizes w = options.world;
  if (w.pipeline_layout == "none") {
    w.pipeline_layout.clear();
  } else if (w.pipeline_layout.empty() && w.first_stage_layers == 0 &&
             w.last_stage_layers == 0 && !model.pipeline_layout.empty()) {
    // The model's layout, where it fits the world (Megatron derives VPP from a layout's stage
    // count: transformer_config.py lines 2432-2445).
    auto stages = input::parse_pipeline_layout(model.pipeline_layout);
    if (auto* why = std::get_if<std::string>(&stages)) return "the model's layout: " + *why;
    if (std::get<std::vector<std::string>>(stages).size() ==
        static_cast<size_t>(w.pp) * static_cast<size_t>(w.vpp)) {
      w.pipeline_layout = model.pipeline_layout;
    }
  }
  bool mtp = false;
  for (const auto& p : model.params) mtp |= p.layer == -3;
  if (auto why = input::validate_world(w, model.num_layers, mtp)) return *why;
  if (model.num_experts > 0 && model.num_experts % w.ep != 0) {
    return "ep=" + std::to_string(w.ep) + " does not divide the " +
           std::to_string(model.num_experts) + " experts";
  }
  if (w.tp > 1) {
    // Checked at full size: a scaled model keeps the structure, not the divisibility.
    auto full = load_model(options, 1);
    if (auto* why = std::get_if<std::string>(&full)) return *why;
    if (auto why = input::validate_tp(std::get<input::ModelInventory>(full).params, w.tp)) {
      return *why + " at full size";
    }
  }
  return w;
}

model::CaseSpec stage_case(const CliOptions& options, const input::WorldSizes& world,
                           const std::vector<input::InventoryParam>& inventory, int num_layers,
                           int num_experts, int stage, int ep_rank) {
  model::CaseSpec c;
  c.params = input::stage_params(inventory, world, num_layers, stage, ep_rank, num_experts);
  c.dp = world.dp;
  c.expert_dp = world.dp / world.ep;
  // DDP drops bucket_size on pipeline ranks > 0; get_model drops it for chunks after the first.
  if (stage == 0) c.bucket_size = options.bucket_size;
  c.bucket_first_chunk_only = true;
  c.precision_aware = options.precision_aware;
  c.cpu_offload = options.offload;
  c.offload_fraction = options.offload_fraction;
  c.grad_reduce_in_fp32 = true;  // Megatron's default for bf16 training
  return c;
}

// The inputs of step `step` of the main job: grads from the seed and each parameter's name (so that
// a parameter gets the same gradient on every rank that holds it, and the experts of different
// EP ranks different ones), lr 1e-3, weight decay 0.1 for even groups and 0 for odd ones (as at
// construction).
model::StepInputs main_job_step(const model::CaseSpec& spec, uint64_t seed, int step) {
  model::StepInputs in;
  for (const auto& p : spec.params) {
    uint64_t name_hash = 0xcbf29ce484222325ull;
    for (unsigned char ch : p.name) name_hash = (name_hash ^ ch) * 0x100000001b3ull;
    rig::SplitMix64 rng(seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(step + 1)) ^
                        name_hash);
    std::vector<float> g(static_cast<size_t>(p.numel()));
    for (float& x : g) x = rng.symmetric_unit() * 0.01f;
    in.grads.push_back(std::move(g));
  }
  for (int g = 0; g < spec.num_groups(); ++g) {
    in.group_hyper.push_back(model::AdamWHyper{1e-3, 0.9, 0.999, 1e-8, g % 2 == 0 ? 0.1 : 0.0});
  }
  return in;
}

}  // namespace sc::app
