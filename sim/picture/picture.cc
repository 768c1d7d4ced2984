#include "sim/picture/picture.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <utility>

#include "model/layout.h"
#include "sim/picture/stage_model.h"
#include "sim/picture/svg.h"

namespace sc::picture {

namespace {

using stage::kFewParams;
using stage::param_runs;
using stage::Piece;
using stage::range_text;
using stage::Run;
using stage::stage_model;
using stage::StageModel;
using stage::with_commas;

constexpr double kWidth = 1240;
constexpr double kMargin = 16;
constexpr double kGutter = 92;  // row labels left of the bars
constexpr double kBarX = kMargin + kGutter;
constexpr double kBarW = kWidth - kMargin - kBarX;
constexpr double kBarH = 18;
constexpr double kStripH = 8;
constexpr double kHeatH = 9;
constexpr const char* kHostFill = "#c51b8a";
constexpr const char* kDeviceFill = "#525252";
constexpr const char* kFailRed = "#d62728";
constexpr const char* kOkFill = "#c7e9c0";
constexpr const char* kInk = "#222222";

const char* dtype_fill(model::DType dtype, int shade) {
  switch (dtype) {
    case model::DType::kBFloat16: return shade ? "#6baed6" : "#9ecae1";
    case model::DType::kFloat16: return shade ? "#74c476" : "#a1d99b";
    case model::DType::kFloat32: return shade ? "#fd8d3c" : "#fdae6b";
    case model::DType::kFloat64: return shade ? "#9e9ac8" : "#bcbddc";
  }
  return "#cccccc";
}

// Splits `text` into lines of at most `width` pixels at `font_px`, at spaces where it can.
std::vector<std::string> wrap(const std::string& text, double width, double font_px) {
  std::vector<std::string> lines;
  std::string line, word;
  auto flush_word = [&] {
    if (word.empty()) return;
    const std::string candidate = line.empty() ? word : line + " " + word;
    if (!line.empty() && text_width(candidate, font_px) > width) {
      lines.push_back(line);
      line = word;
    } else {
      line = candidate;
    }
    // A single word longer than the width is cut.
    while (text_width(line, font_px) > width && line.size() > 8) {
      size_t cut = line.size() - 1;
      while (cut > 1 && text_width(line.substr(0, cut), font_px) > width) --cut;
      lines.push_back(line.substr(0, cut));
      line = line.substr(cut);
    }
    word.clear();
  };
  for (char ch : text) {
    if (ch == ' ') {
      flush_word();
    } else {
      word += ch;
    }
  }
  flush_word();
  if (!line.empty()) lines.push_back(line);
  return lines;
}

// Writes wrapped text lines from `top` (the first baseline at top + font); returns the height
// used.
double text_block(SvgWriter& svg, double left, double top, double width, const std::string& text,
                  double font_px, const Attrs& extra = {}) {
  double h = 0;
  for (const std::string& l : wrap(text, width, font_px)) {
    h += font_px + 3;
    svg.text(left, top + h - 3, l, font_px, extra);
  }
  return h;
}

// A label centred in [left, left + width) when one of `labels` fits, else nothing.
void fitted_label(SvgWriter& svg, double left, double width, double baseline,
                  const std::vector<std::string>& labels, double font_px,
                  const std::string& fill = kInk, bool halo = false) {
  for (const std::string& l : labels) {
    if (text_width(l, font_px) + 4 <= width) {
      Attrs a{{"fill", fill}};
      if (halo) {
        // A pale outline under the glyphs keeps a label readable over edges drawn across it.
        a.insert(a.end(), {{"stroke", "#ffffff"}, {"stroke-opacity", "0.7"},
                           {"stroke-width", "2.5"}, {"paint-order", "stroke"}});
      }
      svg.text(left + width / 2, baseline, l, font_px, a, "middle");
      return;
    }
  }
}

// A row label in the gutter left of the bars, shrunk to fit it.
void gutter_label(SvgWriter& svg, double baseline, const std::string& text, double font_px,
                  Attrs attrs) {
  const double room = kGutter - 6, need = text_width(text, font_px);
  if (need > room) font_px *= room / need;
  svg.text(kMargin, baseline, text, font_px, attrs);
}

std::string heat_fill(double diff) {
  if (std::isnan(diff) || std::isinf(diff)) return "#000000";
  if (diff <= 0) return "#ffffff";
  // 1e-9 .. 1e-1, log scale, white to dark red.
  double t = (std::log10(diff) + 9) / 8;
  t = std::clamp(t, 0.08, 1.0);
  const int r = static_cast<int>(255 - 90 * t), g = static_cast<int>(235 * (1 - t)),
            b = static_cast<int>(225 * (1 - t));
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

// The global rank of `shard` of a buffer of stage `st` (expert shards: DP rank shard * ep + e).
int global_rank(const PictureInput& in, const PictureStage& st, bool expert, int shard) {
  const int d = expert ? shard * in.ep + st.ep_rank : shard;
  return st.stage * in.dp + d;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// `outcome` without its " (first: NAME)".
std::string without_first(const std::string& outcome) {
  const size_t at = outcome.find(" (first: ");
  if (at == std::string::npos) return outcome;
  const size_t end = outcome.find(')', at);
  return outcome.substr(0, at) + (end == std::string::npos ? "" : outcome.substr(end + 1));
}

// Failing ranks grouped by variant and outcome, in table order.
struct FailGroup {
  std::string variant, outcome, failing_param;
  std::vector<int> ranks;
};

std::vector<FailGroup> fail_groups(const std::vector<const RankOutcome*>& rows) {
  std::vector<FailGroup> groups;
  for (const RankOutcome* r : rows) {
    if (r->ok) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const FailGroup& g) {
      return g.variant == r->variant && g.outcome == r->outcome;
    });
    if (it == groups.end()) {
      groups.push_back({r->variant, r->outcome, r->failing_param, {}});
      it = groups.end() - 1;
    }
    it->ranks.push_back(r->rank);
  }
  return groups;
}

// One entry of the legend: what its swatch draws, and its text.
struct LegendItem {
  std::string kind, label;
};

// The legend's entries: the dtypes the picture holds, then every mark it can draw.
std::vector<LegendItem> legend_items(const PictureInput& in) {
  std::set<model::DType> dtypes;
  for (const auto& st : in.stages) {
    for (const auto& p : st.c.params) dtypes.insert(p.dtype);
  }
  std::vector<LegendItem> items;
  for (model::DType d : {model::DType::kBFloat16, model::DType::kFloat16, model::DType::kFloat32,
                         model::DType::kFloat64}) {
    if (dtypes.count(d)) {
      items.push_back({model::dtype_name(d), model::dtype_name(d) + " parameter"});
    }
  }
  items.insert(items.end(), {{"keep", "keep-fp32 mark (mark_keep_in_fp32)"},
                             {"pad", "padding (alignment, bucket end)"},
                             {"bucket", "bucket edge"},
                             {"shard", "DP rank shard edge"},
                             {"host", "offloaded to the host"},
                             {"device", "stays on the accelerator"},
                             {"fail", "failing rank / the piece it fails on"},
                             {"ok", "rank constructs"}});
  if (in.steps > 0) {
    items.push_back(
        {"heat", "difference from the reference: 0 white, 1e-9 to 1e-1 pale to dark red"});
  }
  return items;
}

// The swatch of a legend entry of `kind`, 16 pixels wide from (left, top).
void legend_swatch(SvgWriter& svg, const std::string& kind, double left, double top) {
  const auto dtype_box = [&](model::DType dtype) {
    svg.rect(left, top, 16, 11, {{"fill", dtype_fill(dtype, 1)}});
  };
  if (kind == "bf16") dtype_box(model::DType::kBFloat16);
  if (kind == "fp16") dtype_box(model::DType::kFloat16);
  if (kind == "fp32") dtype_box(model::DType::kFloat32);
  if (kind == "fp64") dtype_box(model::DType::kFloat64);
  if (kind == "keep") {
    svg.rect(left, top, 16, 11, {{"fill", dtype_fill(model::DType::kFloat32, 0)}});
    svg.rect(left, top, 16, 4, {{"fill", "#000000"}});
  }
  if (kind == "pad") svg.rect(left, top, 16, 11, {{"fill", "url(#pad)"}, {"stroke", "#999999"}});
  if (kind == "bucket") svg.line(left + 8, top - 2, left + 8, top + 13, "#000000", 2.5);
  if (kind == "shard") svg.line(left + 8, top - 2, left + 8, top + 13, "#333333", 1);
  if (kind == "host") svg.rect(left, top + 2, 16, 7, {{"fill", kHostFill}});
  if (kind == "device") svg.rect(left, top + 2, 16, 7, {{"fill", kDeviceFill}});
  if (kind == "fail") {
    svg.rect(left, top, 16, 11, {{"fill", "none"}, {"stroke", kFailRed}, {"stroke-width", "2"}});
  }
  if (kind == "ok") svg.rect(left, top, 16, 11, {{"fill", kOkFill}, {"stroke", "#888888"}});
  if (kind == "heat") {
    for (int k = 0; k < 4; ++k) {
      svg.rect(left + 4 * k, top + 2, 4, 7,
               {{"fill", heat_fill(k == 0 ? 0 : std::pow(10.0, -9 + 3 * k))}});
    }
  }
}

// The legend at `cursor_y` (its entries in rows, then how to read the bars); moves `cursor_y`
// below it.
void legend(SvgWriter& svg, double& cursor_y, const PictureInput& in) {
  const std::vector<LegendItem> items = legend_items(in);
  svg.text(kMargin, cursor_y + 12, "Legend", 12, {{"font-weight", "bold"}, {"fill", kInk}});
  double x = kMargin + 60, row_y = cursor_y;
  const double font = 11;
  for (const LegendItem& it : items) {
    const double item_w = 22 + text_width(it.label, font) + 16;
    if (x + item_w > kWidth - kMargin) {
      x = kMargin + 60;
      row_y += 18;
    }
    legend_swatch(svg, it.kind, x, row_y + 3);
    svg.text(x + 22, row_y + 13, it.label, font, {{"fill", kInk}});
    x += item_w;
  }
  const std::string how_to_read =
      "One bar per buffer (model chunk, dtype, dense or expert), buckets and parameters "
      "to scale across the bar, in layout order (the reverse of named_parameters()). "
      "Under each bar, the placement strip colours each rank's owned pieces by where "
      "the hybrid optimizer steps them; rank labels sit under the shards. A buffer of "
      "more than " + std::to_string(kFewParams) +
      " parameters, most of them too narrow to see, is drawn per layer (two shades "
      "alternate between neighbours). Hover for names and ranges.";
  cursor_y = row_y + 22;
  cursor_y += text_block(svg, kMargin, cursor_y, kWidth - 2 * kMargin, how_to_read, 10,
                         {{"fill", "#555555"}});
  cursor_y += 6;
}

// The ranks of `variant`, in table order.
std::vector<const RankOutcome*> variant_ranks(const PictureInput& in, const std::string& variant) {
  std::vector<const RankOutcome*> rows;
  for (const auto& r : in.ranks) {
    if (r.variant == variant) rows.push_back(&r);
  }
  return rows;
}

// One cell per rank of `variant` (`rows`), red when it fails, in rows across the bar width;
// moves `cursor_y` below the cells.
void outcome_cells(SvgWriter& svg, double& cursor_y, const std::string& variant,
                   const std::vector<const RankOutcome*>& rows) {
  const double cell = std::clamp(kBarW / static_cast<double>(rows.size()), 14.0, 40.0);
  const size_t per_row = static_cast<size_t>(std::floor(kBarW / cell));
  svg.open("g", {{"class", "outcomes"}, {"data-variant", variant}});
  for (size_t i = 0; i < rows.size(); ++i) {
    const RankOutcome& r = *rows[i];
    const double cx = kBarX + static_cast<double>(i % per_row) * cell;
    const double cy = cursor_y + static_cast<double>(i / per_row) * 22;
    const std::string title = variant + " rank " + std::to_string(r.rank) + " (stage " +
                              std::to_string(r.stage) + ", dp " + std::to_string(r.dp_rank) +
                              ", ep " + std::to_string(r.ep_rank) + "): " + r.outcome;
    svg.rect(cx + 1, cy, cell - 2, 18,
             {{"class", r.ok ? "rank-ok" : "rank-fail"},
              {"data-rank", std::to_string(r.rank)},
              {"fill", r.ok ? kOkFill : kFailRed},
              {"stroke", r.ok ? "#888888" : "#7f0000"}},
             title);
    fitted_label(svg, cx + 1, cell - 2, cy + 13,
                 {"r" + std::to_string(r.rank), std::to_string(r.rank)}, 10,
                 r.ok ? kInk : "#ffffff");
  }
  svg.close();
  cursor_y += static_cast<double>((rows.size() + per_row - 1) / per_row) * 22 + 2;
}

// The failing ones of `rows` by their error (the outcome without its first parameter), in order.
std::vector<std::pair<std::string, std::vector<const RankOutcome*>>> error_groups(
    const std::vector<const RankOutcome*>& rows) {
  std::vector<std::pair<std::string, std::vector<const RankOutcome*>>> errors;
  for (const RankOutcome* r : rows) {
    if (r->ok) continue;
    const std::string error = without_first(r->outcome);
    auto it =
        std::find_if(errors.begin(), errors.end(), [&](const auto& e) { return e.first == error; });
    if (it == errors.end()) {
      errors.push_back({error, {}});
      it = errors.end() - 1;
    }
    it->second.push_back(r);
  }
  return errors;
}

// The paragraph of one error: the error, then its `failing` ranks by the parameter they fail on.
std::string error_text(const std::string& error, const std::vector<const RankOutcome*>& failing) {
  std::vector<std::pair<std::string, std::vector<int>>> by_param;
  for (const RankOutcome* r : failing) {
    auto it = std::find_if(by_param.begin(), by_param.end(),
                           [&](const auto& e) { return e.first == r->failing_param; });
    if (it == by_param.end()) {
      by_param.push_back({r->failing_param, {}});
      it = by_param.end() - 1;
    }
    it->second.push_back(r->rank);
  }
  std::string text =
      error + ": " + std::to_string(failing.size()) + (failing.size() == 1 ? " rank" : " ranks");
  if (!(by_param.size() == 1 && by_param[0].first.empty())) {
    text += ", by the parameter each fails on first:";
    for (size_t i = 0; i < by_param.size(); ++i) {
      text += std::string(i ? "; " : " ") + (by_param[i].second.size() == 1 ? "rank " : "ranks ") +
              rank_list(by_param[i].second) +
              (by_param[i].first.empty() ? "" : " on " + by_param[i].first);
    }
  } else {
    text += ": " + rank_list(by_param[0].second);
  }
  return text;
}

// Per variant: a cell per rank, how many fail, and one paragraph per error; moves `cursor_y`
// below.
void outcome_grid(SvgWriter& svg, double& cursor_y, const PictureInput& in) {
  svg.text(kMargin, cursor_y + 14, "Construction outcome per rank", 14,
           {{"font-weight", "bold"}, {"fill", kInk}});
  cursor_y += 22;
  for (const std::string& variant : in.variants) {
    const std::vector<const RankOutcome*> rows = variant_ranks(in, variant);
    if (rows.empty()) continue;
    int failed = 0;
    for (const RankOutcome* r : rows) failed += r->ok ? 0 : 1;
    gutter_label(svg, cursor_y + 14, variant, 12,
                 {{"font-weight", "bold"}, {"fill", failed ? kFailRed : kInk}});
    outcome_cells(svg, cursor_y, variant, rows);
    const std::string summary = variant + ": " + std::to_string(failed) + " of " +
                                std::to_string(rows.size()) + " ranks fail construction";
    svg.text(kBarX, cursor_y + 12, summary, 11, {{"fill", failed ? kFailRed : kInk}});
    cursor_y += 16;
    // One paragraph per error: the error, then the ranks by the parameter they fail on.
    for (const auto& [error, failing] : error_groups(rows)) {
      cursor_y += text_block(svg, kBarX + 10, cursor_y, kBarW - 10, error_text(error, failing), 11,
                             {{"class", "fail-text"}, {"fill", kFailRed}});
    }
    cursor_y += 8;
  }
}

// A failing rank's owned piece of the parameter it fails on, in buffer `layout` of the stage.
struct Mark {
  int layout;
  Piece piece;
};

// A stage's failing ranks: a mark on each piece they fail on, and their notes by the buffer
// (layout index) that shows the piece, or -1 (under the stage's heading) when none does.
struct StageFailures {
  std::vector<Mark> marks;
  std::map<int, std::vector<const RankOutcome*>> notes;
};

// The measured differences by (variant, rank), per parameter name.
using HeatRows = std::map<std::pair<std::string, int>, std::map<std::string, double>>;

// The stage's heading, and which EP rank its expert buffers show; moves `cursor_y` below.
void stage_heading(SvgWriter& svg, double& cursor_y, const PictureInput& in,
                   const PictureStage& st) {
  const int d0 = st.stage * in.dp, d1 = d0 + in.dp - 1;
  std::string heading = "Stage " + std::to_string(st.stage) + " (ranks " + std::to_string(d0) +
                        " to " + std::to_string(d1) + ", DP " + std::to_string(in.dp) + ")";
  bool has_expert = false;
  for (const auto& p : st.c.params) has_expert |= p.is_expert;
  svg.line(kMargin, cursor_y + 2, kWidth - kMargin, cursor_y + 2, "#bbbbbb", 1);
  svg.text(kMargin, cursor_y + 20, heading, 14, {{"font-weight", "bold"}, {"fill", kInk}});
  cursor_y += 26;
  if (has_expert && in.ep > 1) {
    cursor_y +=
        text_block(svg, kMargin, cursor_y, kWidth - 2 * kMargin,
                   "Expert buffers of EP rank " + std::to_string(st.ep_rank) + " (DP ranks " +
                       std::to_string(st.ep_rank) + " + k * " + std::to_string(in.ep) +
                       "); the other EP ranks hold the same structure with other experts.",
                   10, {{"fill", "#555555"}});
  }
}

// The ranks of stage `st`, in table order.
std::vector<const RankOutcome*> stage_ranks(const PictureInput& in, const PictureStage& st) {
  std::vector<const RankOutcome*> rows;
  for (const auto& r : in.ranks) {
    if (r.stage == st.stage) rows.push_back(&r);
  }
  return rows;
}

// Where the failing ones of the stage's `rows` are drawn among the stage's `buffers`.
StageFailures stage_failures(const PictureInput& in, const PictureStage& st,
                             const StageModel& buffers,
                             const std::vector<const RankOutcome*>& rows) {
  StageFailures failures;
  for (const RankOutcome* r : rows) {
    if (r->ok) continue;
    int layout = -1;
    auto p = buffers.param_by_name.find(r->failing_param);
    if (p != buffers.param_by_name.end()) {
      const int li = buffers.param_layout.at(p->second);
      const bool expert = st.c.params[static_cast<size_t>(p->second)].is_expert;
      const int shard = !expert ? r->dp_rank
                                : (r->ep_rank == st.ep_rank ? r->dp_rank / in.ep : -1);
      for (const Piece& piece : buffers.pieces[static_cast<size_t>(li)]) {
        if (piece.param == p->second && piece.shard == shard) {
          failures.marks.push_back({li, piece});
          layout = li;
        }
      }
    }
    failures.notes[layout].push_back(r);
  }
  return failures;
}

// The failure notes of buffer `layout` (-1: of the stage), a line per variant and outcome;
// moves `cursor_y` below them.
void fail_notes(SvgWriter& svg, double& cursor_y, const StageFailures& failures, int layout) {
  auto it = failures.notes.find(layout);
  if (it == failures.notes.end()) return;
  for (const FailGroup& g : fail_groups(it->second)) {
    const std::string line = g.variant + (g.ranks.size() == 1 ? " rank " : " ranks ") +
                             rank_list(g.ranks) + (g.ranks.size() == 1 ? " fails" : " fail") +
                             (g.failing_param.empty() ? "" : " on " + g.failing_param) + ": " +
                             without_first(g.outcome);
    cursor_y += text_block(svg, kBarX, cursor_y, kBarW, line, 10,
                           {{"class", "fail-text"}, {"fill", kFailRed}});
  }
}

// The variants that compared some of the stage's `rows`, one heat row each (none without steps).
std::vector<std::string> heat_variants(const PictureInput& in,
                                       const std::vector<const RankOutcome*>& rows) {
  std::vector<std::string> variants;
  if (in.steps > 0) {
    for (const std::string& v : in.variants) {
      for (const RankOutcome* r : rows) {
        if (r->variant == v && !r->param_diff.empty()) {
          variants.push_back(v);
          break;
        }
      }
    }
  }
  return variants;
}

// The measured differences of the stage's `rows`.
HeatRows heat_rows(const std::vector<const RankOutcome*>& rows) {
  HeatRows diffs;
  for (const RankOutcome* r : rows) {
    for (const auto& [name, d] : r->param_diff) diffs[{r->variant, r->rank}][name] = d;
  }
  return diffs;
}

// What a stage's buffers are drawn from.
struct StageDrawing {
  const PictureInput& in;
  const PictureStage& st;
  const StageModel& buffers;
  const StageFailures& failures;
  const std::vector<std::string>& heat_variants;  // one heat strip each
  const HeatRows& heat_rows;
};

// One buffer as drawn: its stage, layout, owned pieces and runs, and its scale.
struct BufferView {
  const PictureInput& in;
  const PictureStage& st;
  const model::BufferLayout& layout;
  const std::vector<Piece>& pieces;  // by start
  const std::vector<Run>& runs;
  bool expert;
  double scale;  // pixels per element
  // Each parameter drawn (not per layer). Neighbouring pieces of one rank and one side merge
  // when the padding between them is under 3 px, or always when the parameters are drawn per
  // layer.
  bool per_param;

  // The x coordinate of the buffer's element `element`.
  double px(int64_t element) const { return kBarX + static_cast<double>(element) * scale; }
  // The width in pixels of `elements` elements.
  double width_px(int64_t elements) const { return static_cast<double>(elements) * scale; }
  // The global rank of `shard`.
  int rank(int shard) const { return global_rank(in, st, expert, shard); }
  // The name of parameter `param` of the stage.
  const std::string& param_name(int param) const {
    return st.c.params[static_cast<size_t>(param)].name;
  }
};

// The buffer's heading: chunk, dtype, kind, sizes, buckets and sharding.
std::string buffer_label(const model::BufferLayout& layout) {
  const bool expert = layout.key.is_expert;
  int64_t in_params = 0;
  for (const auto& pl : layout.placements) in_params += pl.range.size();
  return "chunk " + std::to_string(layout.chunk) + " · " +
         model::dtype_name(layout.key.param_dtype) + (expert ? " expert" : " dense") +
         " buffer · " + std::to_string(layout.placements.size()) + " parameters · " +
         with_commas(layout.numel()) + " elements, " + with_commas(layout.numel() - in_params) +
         " of them padding · " + std::to_string(layout.buckets.size()) +
         (layout.buckets.size() == 1 ? " bucket" : " buckets") + " · sharded over " +
         (expert ? "expert DP " : "DP ") + std::to_string(layout.dp);
}

// Each bucket's label, when the buffer has more than one; moves `cursor_y` below them.
void bucket_labels(SvgWriter& svg, double& cursor_y, const BufferView& view) {
  const auto& buckets = view.layout.buckets;
  if (buckets.size() <= 1) return;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const auto& range = buckets[b];
    fitted_label(svg, view.px(range.start), view.px(range.end) - view.px(range.start),
                 cursor_y + 10,
                 {"bucket " + std::to_string(b) + " " + range_text(range.start, range.end),
                  "bucket " + std::to_string(b), "b" + std::to_string(b)},
                 9, "#444444");
  }
  cursor_y += 13;
}

// The parameter bar at `bar_y`: padding hatched under the runs, each in its dtype's colour.
void parameter_bar(SvgWriter& svg, const BufferView& view, double bar_y) {
  gutter_label(svg, bar_y + 13, "parameters", 10, {{"fill", "#555555"}});
  svg.rect(kBarX, bar_y, kBarW, kBarH, {{"fill", "url(#pad)"}});
  const std::vector<Run>& runs = view.runs;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    const double x0 = view.px(r.start), x1 = std::max(view.px(r.end), x0 + 1.5);
    svg.rect(x0, bar_y, x1 - x0, kBarH, {{"fill", dtype_fill(r.dtype, static_cast<int>(i % 2))}},
             r.title);
  }
}

// Keep-fp32 marks on the bar at `bar_y`: one band over each stretch of marked runs.
void keep_marks(SvgWriter& svg, const BufferView& view, double bar_y) {
  const std::vector<Run>& runs = view.runs;
  for (size_t i = 0; i < runs.size();) {
    if (!runs[i].keep) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < runs.size() && runs[j].keep && runs[j].bucket == runs[i].bucket &&
           view.width_px(runs[j].start - runs[j - 1].end) < 1.5) {
      ++j;
    }
    const double x0 = view.px(runs[i].start), x1 = std::max(view.px(runs[j - 1].end), x0 + 0.8);
    svg.rect(x0, bar_y, x1 - x0, 4, {{"fill", "#000000"}});
    i = j;
  }
}

// The placement strip at `top`: each rank's owned pieces by where the hybrid optimizer steps
// them; returns its bottom.
double placement_strip(SvgWriter& svg, const BufferView& view, double top) {
  const model::CaseSpec& spec = view.st.c;
  gutter_label(svg, top + 8, spec.cpu_offload ? "placement" : "no offload", 10,
               {{"fill", "#555555"}});
  svg.rect(kBarX, top, kBarW, kStripH, {{"fill", "#f4f4f4"}});
  const auto& pieces = view.pieces;
  for (size_t i = 0; i < pieces.size();) {
    size_t j = i + 1;
    int64_t end = pieces[i].world.end;
    while (j < pieces.size() && pieces[j].shard == pieces[i].shard &&
           pieces[j].offloaded == pieces[i].offloaded &&
           (!view.per_param || view.width_px(pieces[j].world.start - end) < 3) &&
           pieces[j].world.start >= end) {
      end = pieces[j].world.end;
      ++j;
    }
    const double x0 = view.px(pieces[i].world.start), x1 = std::max(view.px(end), x0 + 0.8);
    const std::string title =
        "rank " + std::to_string(view.rank(pieces[i].shard)) + ": " + std::to_string(j - i) +
        (j - i == 1 ? " piece " : " pieces ") +
        (pieces[i].offloaded ? "offloaded to the host" : "on the accelerator") + " at " +
        range_text(pieces[i].world.start, end) +
        (j - i == 1 ? " (" + view.param_name(pieces[i].param) + ")" : "");
    svg.rect(x0, top, x1 - x0, kStripH, {{"fill", pieces[i].offloaded ? kHostFill : kDeviceFill}},
             title);
    i = j;
  }
  return top + kStripH;
}

// Each owned piece's difference from the reference for `variant` (NaN: not measured).
std::vector<double> piece_diffs(const BufferView& view, const HeatRows& heat_rows,
                                const std::string& variant) {
  const auto& pieces = view.pieces;
  std::vector<double> diffs(pieces.size(), std::nan(""));
  for (size_t i = 0; i < pieces.size(); ++i) {
    auto row = heat_rows.find({variant, view.rank(pieces[i].shard)});
    if (row == heat_rows.end()) continue;
    auto d = row->second.find(view.param_name(pieces[i].param));
    if (d != row->second.end()) diffs[i] = d->second;
  }
  return diffs;
}

// The heat strip of `variant` at `top`: stretches of one rank and one colour; returns its
// bottom.
double heat_strip(SvgWriter& svg, const BufferView& view, const HeatRows& heat_rows,
                  const std::string& variant, double top) {
  gutter_label(svg, top + 8, "diff " + variant, 9, {{"fill", "#555555"}});
  svg.rect(kBarX, top, kBarW, kHeatH, {{"fill", "#f4f4f4"}});
  const auto& pieces = view.pieces;
  const std::vector<double> diffs = piece_diffs(view, heat_rows, variant);
  for (size_t i = 0; i < pieces.size();) {
    if (std::isnan(diffs[i])) {
      ++i;
      continue;
    }
    const std::string fill = heat_fill(diffs[i]);
    size_t j = i + 1;
    double worst = diffs[i];
    while (j < pieces.size() && pieces[j].shard == pieces[i].shard && !std::isnan(diffs[j]) &&
           heat_fill(diffs[j]) == fill &&
           (!view.per_param ||
            view.width_px(pieces[j].world.start - pieces[j - 1].world.end) < 3)) {
      worst = std::max(worst, diffs[j]);
      ++j;
    }
    const double x0 = view.px(pieces[i].world.start),
                 x1 = std::max(view.px(pieces[j - 1].world.end), x0 + 0.8);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", worst);
    const std::string title =
        variant + " rank " + std::to_string(view.rank(pieces[i].shard)) + ", " +
        (j - i == 1 ? view.param_name(pieces[i].param) : std::to_string(j - i) + " pieces") +
        ": max |port - reference| " + buf + " after " + std::to_string(view.in.steps) + " steps";
    svg.rect(x0, top, x1 - x0, kHeatH, {{"fill", fill}}, title);
    i = j;
  }
  return top + kHeatH;
}

// The DP shard edges (every few shards where they would crowd), then the bucket edges, from
// above the bar at `bar_y` to below the strips at `bottom`.
void bucket_edges(SvgWriter& svg, const BufferView& view, double bar_y, double bottom) {
  const model::BufferLayout& layout = view.layout;
  for (const auto& b : layout.buckets) {
    const int64_t shard = b.size() / std::max<int64_t>(1, layout.dp);
    const double shard_px = view.width_px(shard);
    const int64_t step =
        shard_px >= 3 ? 1 : static_cast<int64_t>(std::ceil(3 / std::max(shard_px, 1e-9)));
    for (int64_t k = step; k < layout.dp; k += step) {
      const double x = view.px(b.start + k * shard);
      svg.line(x, bar_y - 2, x, bottom + 2, "#333333", 1);
    }
  }
  for (const auto& b : layout.buckets) {
    svg.line(view.px(b.start), bar_y - 3, view.px(b.start), bottom + 3, "#000000", 2.5);
    svg.line(view.px(b.end), bar_y - 3, view.px(b.end), bottom + 3, "#000000", 2.5);
  }
}

// A red outline from `bar_y` to `bottom` around each piece of buffer `index` a rank fails on.
void failure_marks(SvgWriter& svg, const BufferView& view, const std::vector<Mark>& marks,
                   size_t index, double bar_y, double bottom) {
  for (const Mark& mk : marks) {
    if (mk.layout != static_cast<int>(index)) continue;
    const double x0 = view.px(mk.piece.world.start);
    const double wdt = std::max(view.px(mk.piece.world.end) - x0, 4.0);
    svg.rect(
        x0 - 1, bar_y - 1, wdt + 2, bottom - bar_y + 2,
        {{"class", "fail-mark"}, {"fill", "none"}, {"stroke", kFailRed}, {"stroke-width", "2"}},
        "rank " + std::to_string(view.rank(mk.piece.shard)) + " fails on this piece of " +
            view.param_name(mk.piece.param));
  }
}

// Each rank's label under its shard of each bucket, at `baseline`.
void rank_labels(SvgWriter& svg, const BufferView& view, double baseline) {
  const model::BufferLayout& layout = view.layout;
  for (const auto& b : layout.buckets) {
    const int64_t shard = b.size() / std::max<int64_t>(1, layout.dp);
    for (int64_t k = 0; k < layout.dp; ++k) {
      const int g = view.rank(static_cast<int>(k));
      const double x0 = view.px(b.start + k * shard), x1 = view.px(b.start + (k + 1) * shard);
      fitted_label(svg, x0, x1 - x0, baseline,
                   {"rank " + std::to_string(g), "r" + std::to_string(g), std::to_string(g)}, 9,
                   "#333333");
    }
  }
}

// Buffer `index` of the stage: its heading, the bar, the strips, the edges, the failure marks,
// the labels and its failure notes; moves `cursor_y` below.
void draw_buffer(SvgWriter& svg, double& cursor_y, const StageDrawing& stage, size_t index) {
  const model::BufferLayout& layout = stage.buffers.layouts[index];
  const int64_t numel = std::max<int64_t>(1, layout.numel());
  const double scale = kBarW / static_cast<double>(numel);
  const std::vector<Run> runs = param_runs(stage.st.c, layout, scale);
  const BufferView view{stage.in, stage.st, layout, stage.buffers.pieces[index], runs,
                        layout.key.is_expert, scale, runs.size() == layout.placements.size()};
  svg.open("g", {{"class", "buffer"},
                 {"data-stage", std::to_string(stage.st.stage)},
                 {"data-chunk", std::to_string(layout.chunk)}});
  cursor_y += text_block(svg, kBarX, cursor_y, kBarW, buffer_label(layout), 10, {{"fill", kInk}});
  bucket_labels(svg, cursor_y, view);
  const double bar_y = cursor_y;
  parameter_bar(svg, view, bar_y);
  keep_marks(svg, view, bar_y);
  double bottom = placement_strip(svg, view, bar_y + kBarH + 2);
  for (const std::string& variant : stage.heat_variants) {
    bottom = heat_strip(svg, view, stage.heat_rows, variant, bottom + 3);
  }
  bucket_edges(svg, view, bar_y, bottom);
  failure_marks(svg, view, stage.failures.marks, index, bar_y, bottom);
  for (const Run& r : runs) {
    fitted_label(svg, view.px(r.start), view.px(r.end) - view.px(r.start), bar_y + 13, r.labels, 9,
                 kInk, true);
  }
  const double label_y = bottom + 11;
  rank_labels(svg, view, label_y);
  cursor_y = label_y + 3;
  fail_notes(svg, cursor_y, stage.failures, static_cast<int>(index));
  svg.close();
  cursor_y += 5;
}

// Stage `st`: its heading and failures outside its buffers, then each buffer; moves `cursor_y`
// below.
void draw_stage(SvgWriter& svg, double& cursor_y, const PictureInput& in, const PictureStage& st) {
  const StageModel buffers = stage_model(st.c);
  stage_heading(svg, cursor_y, in, st);
  // Failures of this stage's ranks, by buffer (or the stage when the piece is not drawn here).
  const std::vector<const RankOutcome*> rows = stage_ranks(in, st);
  const StageFailures failures = stage_failures(in, st, buffers, rows);
  fail_notes(svg, cursor_y, failures, -1);
  const std::vector<std::string> variants = heat_variants(in, rows);
  const HeatRows diffs = heat_rows(rows);
  const StageDrawing stage{in, st, buffers, failures, variants, diffs};
  for (size_t li = 0; li < buffers.layouts.size(); ++li) draw_buffer(svg, cursor_y, stage, li);
}

}  // namespace

std::string draw_svg(const PictureInput& in) {
  SvgWriter w;
  w.open("defs");
  w.open("pattern", {{"id", "pad"},
                     {"width", "6"},
                     {"height", "6"},
                     {"patternUnits", "userSpaceOnUse"},
                     {"patternTransform", "rotate(45)"}});
  w.rect(0, 0, 6, 6, {{"fill", "#eeeeee"}});
  w.line(0, 0, 0, 6, "#bbbbbb", 2);
  w.close();
  w.close();
  double y = kMargin;
  w.rect(0, 0, kWidth, 1, {{"fill", "#ffffff"}});  // replaced below by the full background
  w.text(kMargin, y + 18, in.title, 18, {{"font-weight", "bold"}, {"fill", kInk}});
  y += 26;
  y += text_block(w, kMargin, y, kWidth - 2 * kMargin, in.header, 10,
                  {{"fill", "#444444"}, {"class", "config"}});
  y += 8;
  legend(w, y, in);
  outcome_grid(w, y, in);
  for (const PictureStage& st : in.stages) draw_stage(w, y, in, st);
  y += kMargin;
  std::string svg = w.finish(kWidth, y);
  // A white background the height of the picture (renderers default to transparent).
  const std::string first = "<rect x=\"0\" y=\"0\" width=\"" + svg_number(kWidth) +
                            "\" height=\"1\" fill=\"#ffffff\"/>";
  const size_t at = svg.find(first);
  if (at != std::string::npos) {
    svg.replace(at, first.size(),
                "<rect x=\"0\" y=\"0\" width=\"" + svg_number(kWidth) + "\" height=\"" +
                    svg_number(y) + "\" fill=\"#ffffff\"/>");
  }
  return svg;
}

std::string draw_html(const PictureInput& in, const std::string& svg) {
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>" +
       xml_escape(in.title) + "</title>\n<style>\n"
       "body{font-family:'DejaVu Sans',Verdana,sans-serif;margin:16px;color:#222}\n"
       "table{border-collapse:collapse;font-size:12px;margin:8px 0 24px}\n"
       "th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}\n"
       "td.text,th.text{text-align:left}\n"
       "tr.fail td{background:#fde0e0;color:#a00000}\n"
       "code{font-size:12px}\n</style>\n</head>\n<body>\n";
  h += "<h1>" + xml_escape(in.title) + "</h1>\n<p><code>" + xml_escape(in.header) + "</code></p>\n";
  const size_t svg_start = svg.find("<svg");
  h += svg_start == std::string::npos ? svg : svg.substr(svg_start);
  h += "<h2>Ranks</h2>\n<table>\n<tr><th class=\"text\">variant</th><th>rank</th><th>stage</th>"
       "<th>dp</th><th>ep</th><th>params</th><th>fp32</th><th>pieces</th><th>fp32</th>"
       "<th>accel_bytes</th><th>host_bytes</th><th>max_diff</th>"
       "<th class=\"text\">outcome</th></tr>\n";
  for (const RankOutcome& r : in.ranks) {
    char diff[32] = "-";
    if (r.max_diff) std::snprintf(diff, sizeof diff, "%.3g", *r.max_diff);
    h += std::string("<tr") + (r.ok ? "" : " class=\"fail\"") + "><td class=\"text\">" +
         xml_escape(r.variant) + "</td><td>" + std::to_string(r.rank) + "</td><td>" +
         std::to_string(r.stage) + "</td><td>" + std::to_string(r.dp_rank) + "</td><td>" +
         std::to_string(r.ep_rank) + "</td><td>" + std::to_string(r.params) + "</td><td>" +
         std::to_string(r.params_fp32_kept) + "</td><td>" + std::to_string(r.pieces) +
         "</td><td>" + std::to_string(r.pieces_fp32) + "</td><td>" +
         (r.ok ? std::to_string(r.accel_bytes) : "-") + "</td><td>" +
         (r.ok ? std::to_string(r.host_bytes) : "-") + "</td><td>" + diff +
         "</td><td class=\"text\">" + xml_escape(r.outcome) + "</td></tr>\n";
  }
  h += "</table>\n<h2>Buffers</h2>\n<table>\n<tr><th>stage</th><th>chunk</th>"
       "<th class=\"text\">dtype</th><th class=\"text\">kind</th><th>parameters</th>"
       "<th>keep-fp32</th><th>elements</th><th>padding</th><th>buckets</th><th>sharded over</th>"
       "</tr>\n";
  for (const PictureStage& st : in.stages) {
    for (const auto& layout : model::full_param_layout(st.c)) {
      int64_t in_params = 0, keep = 0;
      for (const auto& pl : layout.placements) {
        in_params += pl.range.size();
        keep += st.c.params[static_cast<size_t>(pl.param)].keep_in_fp32 ? 1 : 0;
      }
      h += "<tr><td>" + std::to_string(st.stage) + "</td><td>" + std::to_string(layout.chunk) +
           "</td><td class=\"text\">" + model::dtype_name(layout.key.param_dtype) +
           "</td><td class=\"text\">" + (layout.key.is_expert ? "expert" : "dense") + "</td><td>" +
           std::to_string(layout.placements.size()) + "</td><td>" + std::to_string(keep) +
           "</td><td>" + std::to_string(layout.numel()) + "</td><td>" +
           std::to_string(layout.numel() - in_params) + "</td><td>" +
           std::to_string(layout.buckets.size()) + "</td><td>" + std::to_string(layout.dp) +
           "</td></tr>\n";
    }
  }
  h += "</table>\n</body>\n</html>\n";
  return h;
}

std::optional<std::string> write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return "cannot write " + path + ": " + std::strerror(errno);
  f << text;
  f.close();
  if (!f) return "cannot write " + path + ": " + std::strerror(errno);
  return std::nullopt;
}

}  // namespace sc::picture
