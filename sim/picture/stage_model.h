// The stage model of a world's picture: the buffers of one pipeline stage's case, how a bar
// draws them (one run per parameter, or per layer when they are too many or too narrow), and
// each rank's owned pieces with where they step. sim/picture/stage_drawing.cc draws it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/layout.h"
#include "model/spec.h"

namespace sc::picture::stage {

// A buffer draws each parameter when it has at most kFewParams, or at most kMaxParams of which
// three quarters are at least 3 pixels wide; otherwise it draws them per layer.
constexpr size_t kFewParams = 16;
constexpr size_t kMaxParams = 64;
// Layers (or groups of layers) drawn in one buffer at most.
constexpr size_t kMaxRuns = 160;

// `value` with thousands separated by commas.
std::string with_commas(int64_t value);
// "[start, end)" with commas.
std::string range_text(int64_t start, int64_t end);

// One drawn stretch of a bar: a parameter, or the parameters of a layer (or of several).
struct Run {
  int64_t start = 0, end = 0;
  int bucket = 0;
  std::vector<std::string> labels;  // longest first; the first that fits is drawn
  std::string title;
  model::DType dtype = model::DType::kBFloat16;
  bool keep = false;  // holds a keep-fp32 parameter
  int count = 0;      // parameters
};

// The stretches a buffer's bar draws at `px_per_element`: each parameter, or each layer (or
// group of layers) when the parameters are too many or too narrow.
std::vector<Run> param_runs(const model::CaseSpec& spec, const model::BufferLayout& layout,
                            double px_per_element);

// One owned piece of a parameter, as one rank hands it to the optimizer.
struct Piece {
  model::Range world;  // absolute in the buffer
  int param = 0;
  int shard = 0;       // the rank's index in the buffer's DP group
  bool offloaded = false;
};

struct StageModel {
  std::vector<model::BufferLayout> layouts;
  std::map<int, int> param_layout;             // parameter -> layout index
  std::map<std::string, int> param_by_name;
  std::vector<std::vector<Piece>> pieces;      // per layout, shard-major, installed order
};

// The buffers of a stage's case and each rank's owned pieces of them, with where they step.
StageModel stage_model(const model::CaseSpec& spec);

}  // namespace sc::picture::stage
