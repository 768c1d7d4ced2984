// Model inventories and parallel worlds for the simulator's main job.
//
// An inventory is a parameter list with Megatron's names, shapes, dtypes, keep-fp32 marks and
// expert flags, built from a small config and scaled down by an integer factor that keeps every
// parameter and its dtype (dimensions are divided, never below 1). A world splits it by pipeline
// stage (with virtual chunks), expert-parallel rank and data-parallel rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/spec.h"

namespace sc::sim {

// A parameter of the whole model, before pipeline and expert splitting.
struct InventoryParam {
  model::ParamSpec spec;  // group: 0 = decay, 1 = no decay (1-D and *.bias)
  int layer = -1;         // decoder layer, or -1 for pre-process, -2 post-process, -3 MTP
  int expert = -1;        // routed expert index, -1 for non-expert params
};

// A whole model: its inventory plus the counts a world needs.
struct ModelInventory {
  std::string name;
  std::vector<InventoryParam> params;
  int num_layers = 1;   // decoder layers
  int num_experts = 0;  // routed experts; every expert index is below it
};

// Names accepted by build_inventory.
const std::vector<std::string>& inventory_names();
// The inventory `name` at `scale` (>= 1), plus its decoder layer count; nullopt if unknown.
std::optional<std::pair<std::vector<InventoryParam>, int>> build_inventory(const std::string& name,
                                                                           int64_t scale);
// build_inventory as a ModelInventory (num_experts: one more than the largest expert index).
std::optional<ModelInventory> builtin_model(const std::string& name, int64_t scale);

// The parallel sizes of a world (TP is 1).
struct WorldSizes {
  int pp = 1;   // pipeline stages
  int vpp = 1;  // virtual chunks per stage
  int ep = 1;   // expert-parallel size; divides dp
  int dp = 1;   // dense data-parallel size; expert DP is dp / ep
};

// Empty when `w` is a possible world for `num_layers` decoder layers, else why not.
std::optional<std::string> validate_world(const WorldSizes& w, int num_layers);
// The decoder layers of global virtual chunk `chunk` (of pp * vpp): [first, last).
std::pair<int, int> chunk_layers(const WorldSizes& w, int num_layers, int chunk);
// The parameters held by pipeline stage `stage` and expert-parallel rank `ep_rank`, with
// ParamSpec::chunk set to the local virtual chunk; experts keep their global index in the name.
std::vector<model::ParamSpec> stage_params(const std::vector<InventoryParam>& inventory,
                                           const WorldSizes& w, int num_layers, int stage,
                                           int ep_rank, int num_experts);

}  // namespace sc::sim
