// Job building for the main job and the multi-process mode: the model and world the options
// choose, checked; each stage's case; each step's inputs; the memory check of tensor mode.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "model/reference.h"
#include "model/spec.h"
#include "sim/app/options.h"
#include "sim/input/scenario.h"

namespace sc::app {

// The model `options` choose (--model or --model-file) at `scale`, or a message naming the
// problem: an unknown name, or the file and the line or field of a bad model file.
std::variant<input::ModelInventory, std::string> load_model(const CliOptions& options,
                                                            int64_t scale);
// The world `options` asks for on `model`, checked: options.world with the model's pipeline
// layout when no split is asked for and the layout has pp * vpp stages; the pipeline split as
// Megatron makes it; EP dividing the experts; TP dividing every dimension it splits at full size.
// Or the message.
std::variant<input::WorldSizes, std::string> checked_world(const CliOptions& options,
                                                           const input::ModelInventory& model);
// Tensor mode's memory check: the model's byte accounting (model/memory.h, both sides, once
// stepped) of the largest rank of world `world` on `model` at `scale`, against `budget`. Empty when
// it fits; else the refusal, naming the rank, the largest kinds of bytes and the largest
// parameters, and suggesting a larger --scale or --layout-only. Allocates no tensor.
std::optional<std::string> memory_budget_refusal(const CliOptions& options,
                                                 const input::ModelInventory& model,
                                                 const input::WorldSizes& world, int64_t scale,
                                                 int64_t budget);
// The main job's case for pipeline stage `stage` and EP rank `ep_rank` of `inventory` (TP rank
// 0), in the checked world `world` (checked_world), with the switches of `options`.
model::CaseSpec stage_case(const CliOptions& options, const input::WorldSizes& world,
                           const std::vector<input::InventoryParam>& inventory, int num_layers,
                           int num_experts, int stage, int ep_rank);
// The main job's inputs of step `step` (grads from the seed, the groups' hyper-parameters).
model::StepInputs main_job_step(const model::CaseSpec& spec, uint64_t seed, int step);

}  // namespace sc::app
