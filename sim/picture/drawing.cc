#include "sim/picture/drawing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sc::picture {

namespace {

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

}  // namespace

const char* dtype_fill(model::DType dtype, int shade) {
  switch (dtype) {
    case model::DType::kBFloat16: return shade ? "#6baed6" : "#9ecae1";
    case model::DType::kFloat16: return shade ? "#74c476" : "#a1d99b";
    case model::DType::kFloat32: return shade ? "#fd8d3c" : "#fdae6b";
    case model::DType::kFloat64: return shade ? "#9e9ac8" : "#bcbddc";
  }
  return "#cccccc";
}

double text_block(SvgWriter& svg, double left, double top, double width, const std::string& text,
                  double font_px, const Attrs& extra) {
  double h = 0;
  for (const std::string& l : wrap(text, width, font_px)) {
    h += font_px + 3;
    svg.text(left, top + h - 3, l, font_px, extra);
  }
  return h;
}

void fitted_label(SvgWriter& svg, double left, double width, double baseline,
                  const std::vector<std::string>& labels, double font_px,
                  const std::string& fill, bool halo) {
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

int global_rank(const PictureInput& in, const PictureStage& st, bool expert, int shard) {
  const int d = expert ? shard * in.ep + st.ep_rank : shard;
  return st.stage * in.dp + d;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string without_first(const std::string& outcome) {
  const size_t at = outcome.find(" (first: ");
  if (at == std::string::npos) return outcome;
  const size_t end = outcome.find(')', at);
  return outcome.substr(0, at) + (end == std::string::npos ? "" : outcome.substr(end + 1));
}

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

}  // namespace sc::picture
