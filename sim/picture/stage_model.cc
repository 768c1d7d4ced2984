#include "sim/picture/stage_model.h"

#include <algorithm>
#include <cctype>

#include "model/offload_plan.h"
#include "model/shard.h"

namespace sc::picture::stage {

namespace {

// "layer N" (or "mtp layer N") for a decoder or MTP layer's parameter, else the name without its
// last component.
std::string layer_key(const std::string& name) {
  const size_t p = name.find("layers.");
  if (p != std::string::npos) {
    size_t e = p + 7;
    while (e < name.size() && std::isdigit(static_cast<unsigned char>(name[e]))) ++e;
    if (e > p + 7) {
      return std::string(name.rfind("mtp", 0) == 0 ? "mtp " : "") + "layer " +
             name.substr(p + 7, e - p - 7);
    }
  }
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

// The last `count` dotted components of `name`.
std::string tail_name(const std::string& name, int count) {
  size_t pos = name.size();
  for (int i = 0; i < count; ++i) {
    const size_t dot = pos == 0 ? std::string::npos : name.rfind('.', pos - 1);
    if (dot == std::string::npos) return name;
    pos = dot;
  }
  return name.substr(pos + 1);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// True when a buffer draws each parameter: at most kFewParams of them, or at most kMaxParams of
// which three quarters are at least 3 pixels wide.
bool draws_each_param(const model::BufferLayout& layout, double px_per_element) {
  const auto& placements = layout.placements;
  size_t wide = 0;
  for (const auto& pl : placements) {
    wide += static_cast<double>(pl.range.size()) * px_per_element >= 3 ? 1 : 0;
  }
  return placements.size() <= kFewParams ||
         (placements.size() <= kMaxParams && 4 * wide >= 3 * placements.size());
}

// One run per parameter of `layout`, labelled by the last components of its name.
std::vector<Run> runs_per_param(const model::CaseSpec& spec, const model::BufferLayout& layout) {
  std::vector<Run> runs;
  for (const auto& pl : layout.placements) {
    const auto& p = spec.params[static_cast<size_t>(pl.param)];
    Run r;
    r.start = pl.range.start;
    r.end = pl.range.end;
    r.bucket = pl.bucket;
    r.labels = {tail_name(p.name, 3), tail_name(p.name, 2), tail_name(p.name, 1)};
    r.title = p.name + " " + model::dtype_name(p.dtype) + " " + shape_text(p.shape) + " at " +
              range_text(pl.range.start, pl.range.end) + (p.keep_in_fp32 ? " keep-fp32" : "");
    r.dtype = p.dtype;
    r.keep = p.keep_in_fp32;
    r.count = 1;
    runs.push_back(std::move(r));
  }
  return runs;
}

// One run per layer of `layout` (its neighbouring parameters in one bucket), without titles;
// `keys` gets each run's layer key.
std::vector<Run> runs_per_layer(const model::CaseSpec& spec, const model::BufferLayout& layout,
                                std::vector<std::string>& keys) {
  std::vector<Run> runs;
  for (const auto& pl : layout.placements) {
    const auto& p = spec.params[static_cast<size_t>(pl.param)];
    const std::string key = layer_key(p.name);
    if (!runs.empty() && keys.back() == key && runs.back().bucket == pl.bucket) {
      runs.back().end = pl.range.end;
      runs.back().keep |= p.keep_in_fp32;
      ++runs.back().count;
      continue;
    }
    Run r;
    r.start = pl.range.start;
    r.end = pl.range.end;
    r.bucket = pl.bucket;
    r.dtype = p.dtype;
    r.keep = p.keep_in_fp32;
    r.count = 1;
    r.labels = {key};
    keys.push_back(key);
    runs.push_back(std::move(r));
  }
  return runs;
}

// Coarser runs: consecutive layers of one bucket merged until each run spans 1/kMaxRuns of the
// buffer (`keys`: each run's layer key).
std::vector<Run> merge_runs(const std::vector<Run>& runs, const std::vector<std::string>& keys,
                            const model::BufferLayout& layout) {
  const int64_t min_span = std::max<int64_t>(1, layout.numel() / static_cast<int64_t>(kMaxRuns));
  std::vector<Run> merged;
  std::vector<std::string> first_key;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    if (!merged.empty() && merged.back().bucket == r.bucket &&
        merged.back().end - merged.back().start < min_span) {
      Run& m = merged.back();
      m.end = r.end;
      m.keep |= r.keep;
      m.count += r.count;
      m.labels = {first_key.back() + " to " + keys[i]};
      continue;
    }
    merged.push_back(r);
    first_key.push_back(keys[i]);
  }
  return merged;
}

}  // namespace

std::string with_commas(int64_t value) {
  std::string s = std::to_string(value < 0 ? -value : value), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string range_text(int64_t start, int64_t end) {
  return "[" + with_commas(start) + ", " + with_commas(end) + ")";
}

std::vector<Run> param_runs(const model::CaseSpec& spec, const model::BufferLayout& layout,
                            double px_per_element) {
  if (draws_each_param(layout, px_per_element)) return runs_per_param(spec, layout);
  std::vector<std::string> keys;
  std::vector<Run> runs = runs_per_layer(spec, layout, keys);
  if (runs.size() > kMaxRuns) runs = merge_runs(runs, keys, layout);
  for (Run& r : runs) {
    r.title = r.labels[0] + ": " + std::to_string(r.count) + " parameters (" +
              model::dtype_name(r.dtype) + (r.keep ? ", keep-fp32 among them" : "") + ") at " +
              range_text(r.start, r.end);
    if (r.count > 1) r.labels = {r.labels[0] + " (" + std::to_string(r.count) + ")", r.labels[0]};
  }
  return runs;
}

StageModel stage_model(const model::CaseSpec& spec) {
  StageModel m;
  m.layouts = model::full_param_layout(spec);
  m.pieces.resize(m.layouts.size());
  for (size_t li = 0; li < m.layouts.size(); ++li) {
    for (const auto& pl : m.layouts[li].placements) m.param_layout[pl.param] = static_cast<int>(li);
  }
  for (size_t i = 0; i < spec.params.size(); ++i) {
    m.param_by_name[spec.params[i].name] = static_cast<int>(i);
  }
  for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
    if (!model::instance_present(spec, inst)) continue;
    const int64_t dp = model::instance_dp(spec, inst);
    for (int64_t k = 0; k < dp; ++k) {
      const model::RankPlan plan = model::plan_rank(spec, m.layouts, inst, k);
      std::map<int, model::Range> world;
      for (const auto& br : plan.ranges) {
        for (const auto& bk : br.buckets) {
          for (const auto& pr : bk.param_map) world[pr.param] = pr.gbuf_world;
        }
      }
      std::vector<std::vector<model::HdoTensor>> groups;
      for (const auto& g : plan.groups) {
        std::vector<model::HdoTensor> ts;
        for (const auto& e : g.installed) ts.push_back({e.param_range.size(), e.dtype});
        groups.push_back(std::move(ts));
      }
      model::OffloadPlan op;
      if (spec.cpu_offload) {
        model::HdoConfig config;
        config.offload_fraction = spec.offload_fraction;
        config.overlap_cpu_optimizer_d2h_h2d = spec.overlap_cpu_optimizer_d2h_h2d;
        op = model::plan_offload(groups, config);
      }
      for (size_t g = 0; g < plan.groups.size(); ++g) {
        for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
          const auto& e = plan.groups[g].installed[i];
          auto li = m.param_layout.find(e.param);
          auto w = world.find(e.param);
          if (li == m.param_layout.end() || w == world.end()) continue;
          Piece piece;
          piece.world = w->second;
          piece.param = e.param;
          piece.shard = static_cast<int>(k);
          piece.offloaded = spec.cpu_offload && op.placements[g][i].offloaded;
          m.pieces[static_cast<size_t>(li->second)].push_back(piece);
        }
      }
    }
  }
  for (auto& pieces : m.pieces) {
    std::sort(pieces.begin(), pieces.end(),
              [](const Piece& a, const Piece& b) { return a.world.start < b.world.start; });
  }
  return m;
}

}  // namespace sc::picture::stage
