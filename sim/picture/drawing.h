// What every part of a world's picture draws with: the page's geometry and palette, text that
// wraps or fits, the fills of dtypes and differences, rank numbering and failure groups.
// picture.cc draws the page, stage_drawing.cc each stage and its buffers.
#pragma once

#include <string>
#include <vector>

#include "model/spec.h"
#include "sim/picture/picture_input.h"
#include "sim/picture/svg.h"

namespace sc::picture {

inline constexpr double kWidth = 1240;
inline constexpr double kMargin = 16;
inline constexpr double kGutter = 92;  // row labels left of the bars
inline constexpr double kBarX = kMargin + kGutter;
inline constexpr double kBarW = kWidth - kMargin - kBarX;
inline constexpr double kBarH = 18;
inline constexpr double kStripH = 8;
inline constexpr double kHeatH = 9;
inline constexpr const char* kHostFill = "#c51b8a";
inline constexpr const char* kDeviceFill = "#525252";
inline constexpr const char* kFailRed = "#d62728";
inline constexpr const char* kOkFill = "#c7e9c0";
inline constexpr const char* kInk = "#222222";

// The fill of a parameter of `dtype`; `shade` alternates neighbours.
const char* dtype_fill(model::DType dtype, int shade);

// Writes wrapped text lines from `top` (the first baseline at top + font); returns the height
// used.
double text_block(SvgWriter& svg, double left, double top, double width, const std::string& text,
                  double font_px, const Attrs& extra = {});

// A label centred in [left, left + width) when one of `labels` fits, else nothing.
void fitted_label(SvgWriter& svg, double left, double width, double baseline,
                  const std::vector<std::string>& labels, double font_px,
                  const std::string& fill = kInk, bool halo = false);

// A row label in the gutter left of the bars, shrunk to fit it.
void gutter_label(SvgWriter& svg, double baseline, const std::string& text, double font_px,
                  Attrs attrs);

// The heat strip's fill of a difference from the reference (log scale, white to dark red).
std::string heat_fill(double diff);

// The global rank of `shard` of a buffer of stage `st` (expert shards: DP rank shard * ep + e).
int global_rank(const PictureInput& in, const PictureStage& st, bool expert, int shard);

// "0, 1, 5".
std::string rank_list(const std::vector<int>& ranks);

// `outcome` without its " (first: NAME)".
std::string without_first(const std::string& outcome);

// Failing ranks grouped by variant and outcome, in table order.
struct FailGroup {
  std::string variant, outcome, failing_param;
  std::vector<int> ranks;
};
std::vector<FailGroup> fail_groups(const std::vector<const RankOutcome*>& rows);

}  // namespace sc::picture
