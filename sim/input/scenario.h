// Model inventories and parallel worlds for the simulator's main job.
//
// An inventory is a parameter list with Megatron's names, shapes, dtypes, keep-fp32 marks and
// expert flags, built from a small config and scaled down by an integer factor that keeps every
// parameter and its dtype (dimensions are divided, never below 1). A world shards it by tensor-
// parallel rank (TP rank 0 stands for all: they hold the same structure) and splits it by
// pipeline stage and virtual chunk (Megatron's layer assignment, exactly), expert-parallel rank
// and data-parallel rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "model/spec.h"

namespace sc::input {

// How tensor parallelism shards a parameter (Megatron's `partition_dim`).
enum class TpSplit {
  kNone,    // replicated: norms, routers, duplicated linears, row-parallel biases, mHC
  kColumn,  // dim 0: column-parallel weights and biases, vocab-parallel embedding and output
  kRow,     // dim 1: row-parallel weights
};

// Megatron's TP split of a parameter named `name` (GPT layer specs with Transformer Engine;
// experts use the expert TP size, which defaults to TP). See default_tp_split in scenario.cc.
TpSplit default_tp_split(const std::string& name);
// "none", "column", "row" or "vocab" (a column split) as a TpSplit; nullopt otherwise.
std::optional<TpSplit> parse_tp_split(const std::string& text);
// The name parse_tp_split reads back ("none", "column" or "row").
const char* tp_split_name(TpSplit name);

// A parameter of the whole model, before pipeline and expert splitting.
struct InventoryParam {
  model::ParamSpec spec;  // group: 0 = decay, 1 = no decay (1-D and *.bias)
  int layer = -1;         // decoder layer, or -1 for pre-process, -2 post-process, -3 MTP
  int expert = -1;        // routed expert index, -1 for non-expert params
  TpSplit tp_split = TpSplit::kNone;  // default_tp_split(name) unless a model file says
};

// A whole model: its inventory plus the counts a world needs.
struct ModelInventory {
  std::string name;
  std::vector<InventoryParam> params;
  int num_layers = 1;   // decoder layers
  int num_experts = 0;  // routed experts; every expert index is below it
  // The model's pipeline layout (Megatron's --pipeline-model-parallel-layout), used when no
  // other split is asked for and its stage count is pp * vpp; empty: none.
  std::string pipeline_layout;
};

// The seed model's layout: 43 decoder layers over 24 virtual stages (PP 8 x VPP 3), MTP with
// the loss on the last one. Megatron cannot split 43 layers evenly over any PP above 1.
inline constexpr const char* kDsv4FlashLayout = "Et|(tt|)*20t|t|mL";

// Names accepted by build_inventory.
const std::vector<std::string>& inventory_names();
// The inventory `name` at `scale` (>= 1), plus its decoder layer count; nullopt if unknown.
std::optional<std::pair<std::vector<InventoryParam>, int>> build_inventory(const std::string& name,
                                                                           int64_t scale);
// build_inventory as a ModelInventory (num_experts: one more than the largest expert index;
// dsv4-flash carries kDsv4FlashLayout).
std::optional<ModelInventory> builtin_model(const std::string& name, int64_t scale);

// The parallel sizes of a world and how its pipeline is split.
struct WorldSizes {
  int pp = 1;   // pipeline stages
  int vpp = 1;  // virtual chunks per stage
  int ep = 1;   // expert-parallel size; divides dp
  int dp = 1;   // dense data-parallel size; expert DP is dp / ep
  int tp = 1;   // tensor-parallel size (expert TP equals it)
  int first_stage_layers = 0;  // num_layers_in_first_pipeline_stage; 0: not set
  int last_stage_layers = 0;   // num_layers_in_last_pipeline_stage; 0: not set
  std::string pipeline_layout;  // pipeline_model_parallel_layout; empty: not set
};

// The decoder layers [first, last) of every (stage, virtual chunk), and where MTP goes.
struct PipelinePlan {
  std::vector<std::vector<std::pair<int, int>>> layers;  // [stage][chunk]
  int mtp_stage = 0, mtp_chunk = 0;  // the last chunk unless a layout places `m`
};

// A pipeline layout string (Megatron's PipelineParallelLayerLayout.parse_str_to_list: E, t, m,
// L, '|' between stages, "(...)*n" and "x*n" repeat, commas ignored) as one string of layer
// characters per virtual stage, in list order; or why it is malformed.
std::variant<std::vector<std::string>, std::string> parse_pipeline_layout(const std::string& text);
// Megatron's assignment of `num_layers` decoder layers to (stage, virtual chunk) under `world`:
// a layout, an uneven first/last stage, or the even split, with the error Megatron raises
// when the layers do not divide (`mtp`: whether the model has MTP layers, for a layout).
std::variant<PipelinePlan, std::string> pipeline_plan(const WorldSizes& world, int num_layers,
                                                      bool mtp = false);
// Empty when `world` is a possible world for `num_layers` decoder layers, else why not.
std::optional<std::string> validate_world(const WorldSizes& world, int num_layers,
                                          bool mtp = false);
// The decoder layers of global virtual chunk `chunk` (= v * pp + stage): [first, last).
// Requires a valid world.
std::pair<int, int> chunk_layers(const WorldSizes& world, int num_layers, int chunk);
// Empty when w.tp divides every dimension TP splits in `full_size` (the model at scale 1),
// else the first parameter it does not divide, named.
std::optional<std::string> validate_tp(const std::vector<InventoryParam>& full_size, int tp);
// `param`'s shape on a TP rank: the split dimension divided by tp (rounded down, never below 1:
// at a scale the full-size check, validate_tp, is what guarantees the split).
std::vector<int64_t> tp_shape(const InventoryParam& param, int tp);
// The parameters held by TP rank 0 of pipeline stage `stage` and expert-parallel rank
// `ep_rank`, with ParamSpec::chunk set to the local virtual chunk and shapes sharded by world.tp;
// experts keep their global index in the name. Requires a valid world.
std::vector<model::ParamSpec> stage_params(const std::vector<InventoryParam>& inventory,
                                           const WorldSizes& world, int num_layers, int stage,
                                           int ep_rank, int num_experts);

}  // namespace sc::input
