// The one driver of the port's ranks: the world the options name, resolved once (the model at its
// scale, the checked sizes, the accelerator), and one rank's instance of the main job's case
// built and stepped as the main job steps it, and the in-process mode of one stage that the
// multi-process mode checks its ranks against (stage_digests). The main job's rows (cli.cc) and
// the multi-process ranks' own instances (multiprocess.cc) build ranks through it too.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "model/spec.h"
#include "sim/app/options.h"
#include "sim/input/scenario.h"
#include "sim/port/behaviour.h"
#include "sim/rig/rank_rig.h"

namespace sc::app {

// The world `options` name, resolved once.
struct ResolvedWorld {
  int64_t scale = 0;
  input::ModelInventory model;
  input::WorldSizes sizes;  // checked (checked_world)
  torch::Device device{torch::kCPU};

  // The main job's case of pipeline stage `stage` and EP rank `ep_rank` (TP rank 0).
  model::CaseSpec stage_case(const CliOptions& options, int stage, int ep_rank) const;
};

// Loads the model at `scale` (--model or --model-file), checks the world and the device; or the
// message (exit status 2).
std::variant<ResolvedWorld, std::string> resolve_world(const CliOptions& options, int64_t scale);

// One instance (dense or expert) of one DP rank of a stage's case of the main job, built by the
// port: a row of the main job, a member of the in-process expectation of the multi-process mode,
// and an instance of one of its ranks.
class JobRank {
 public:
  JobRank(const model::CaseSpec& spec, model::Instance inst, int64_t rank,
                const sut::Behaviour& behaviour, torch::Device device, uint64_t seed);

  bool ok() const { return !rig_.construction().error; }
  // "OK", or the construction error as "Type: message (first: PARAM)".
  std::string outcome() const;
  // One step with `in`.
  void step(const model::StepInputs& in) { rig_.step(in); }
  // One step with the main job's inputs of step `k` (main_job_step); returns them.
  model::StepInputs step(int k);
  model::Instance instance() const { return inst_; }
  // The case parameters of its instance, in case order (the rig's parameters).
  const std::vector<int>& case_params() const { return case_params_; }
  int64_t rank() const { return rank_; }
  rig::RankRig& rig() { return rig_; }
  const rig::RankRig& rig() const { return rig_; }

 private:
  model::CaseSpec spec_;
  model::Instance inst_;
  std::vector<int> case_params_;
  int64_t rank_;
  uint64_t seed_;
  rig::RankRig rig_;
};

// The instances of `spec` present on a rank (dense, then expert when the stage holds experts).
std::vector<model::Instance> instances_of(const model::CaseSpec& spec);

// FNV-1a over the fp32 bits of every parameter, in order.
uint64_t digest_params(const std::vector<std::vector<float>>& full);

// What the in-process mode holds after each step of one stage and EP rank.
struct StageDigests {
  std::vector<uint64_t> params;  // [step]: the assembled full parameters
  // [step][member]: RankRig::digest of the dense instance at DP rank d (member d), then of the
  // expert instance at expert-DP rank e (member dp + e)
  std::vector<std::vector<uint64_t>> state;
};

// The in-process mode for stage `stage` and EP rank `ep_rank` of `world` (options.world its
// checked sizes): the dense instance at every DP rank and the expert instance at every expert-DP
// rank (dp / ep of them), stepped together; the digest of the assembled parameters and of every
// rig's owned pieces and optimizer state after each step. Or the first construction error.
std::variant<StageDigests, std::string> stage_digests(const CliOptions& options,
                                                      const ResolvedWorld& world,
                                                      const sut::Behaviour& behaviour, int stage,
                                                      int ep_rank);

}  // namespace sc::app
