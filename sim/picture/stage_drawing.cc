#include "sim/picture/stage_drawing.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/layout.h"
#include "sim/picture/drawing.h"
#include "sim/picture/stage_model.h"

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

}  // namespace

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

}  // namespace sc::picture
