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
#include "sim/picture/drawing.h"
#include "sim/picture/stage_drawing.h"
#include "sim/picture/svg.h"

namespace sc::picture {

namespace {

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
