// What a world's picture is drawn from: the main job's per-rank outcomes and each pipeline
// stage's case. picture.h draws it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/memory.h"
#include "model/spec.h"

namespace sc::picture {

// One rank's outcome in the main job, as its table row, its JSON and its pictures all read it.
struct RankOutcome {
  std::string variant;
  int rank = 0, stage = 0, dp_rank = 0, ep_rank = 0;
  int64_t params = 0, params_fp32_kept = 0, pieces = 0, pieces_fp32 = 0;
  int64_t accel_bytes = 0,
          host_bytes = 0;  // after construction (when ok): the port's or the model's
  model::RankBytes bytes;  // the model's split, through the first step
  bool ok = true;
  std::string outcome;        // "OK" or the error text
  std::string failing_param;  // the parameter that makes construction fail; empty if none
  // The largest |port - reference| over the owned pieces after the steps, when compared.
  std::optional<double> max_diff;
  // The same over each parameter's owned piece, by parameter name (heat strip; empty when not
  // measured).
  std::vector<std::pair<std::string, double>> param_diff;
  uint64_t digest = 0;  // of the final states of the rank's instances (tensor mode)
};

// The case of one pipeline stage (TP rank 0, one EP rank), as the main job builds it.
struct PictureStage {
  int stage = 0;
  int ep_rank = 0;
  model::CaseSpec c;
};

// Everything one picture shows.
struct PictureInput {
  std::string title;
  std::string header;  // the main job's configuration line
  int pp = 1, dp = 1, ep = 1;
  int steps = 0;       // steps behind the heat strip (0: none drawn)
  std::vector<std::string> variants;
  std::vector<PictureStage> stages;  // stage order
  std::vector<RankOutcome> ranks;    // variant-major, rank order (as the table)
};

}  // namespace sc::picture
