#include "properties/checks.h"

#include <algorithm>
#include <sstream>

#include "properties/support.h"

namespace sc::props {

namespace {

template <typename... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

std::string where(const model::RankPlan& plan) {
  return str(plan.instance == model::Instance::kExpert ? "expert" : "dense", " rank ", plan.rank);
}

}  // namespace

Violation check_ownership(const model::CaseSpec& spec, const std::vector<model::BufferLayout>& ls) {
  for (size_t bi = 0; bi < ls.size(); ++bi) {
    const model::BufferLayout& l = ls[bi];
    // pieces[param] = owned param ranges over all ranks
    std::vector<std::vector<model::Range>> pieces(spec.params.size());
    for (int b = 0; b < static_cast<int>(l.buckets.size()); ++b) {
      int64_t next = l.buckets[b].start;
      for (int64_t r = 0; r < l.dp; ++r) {
        const model::Range w = model::rank_world_range(l, b, r);
        if (w.start != next || w.size() * l.dp != l.buckets[b].size()) {
          return str("buffer ", bi, " bucket ", b, ": rank ", r, " world range ", w,
                     " does not tile ", l.buckets[b], " in ", l.dp, " equal parts");
        }
        next = w.end;
      }
      if (next != l.buckets[b].end) {
        return str("buffer ", bi, " bucket ", b, ": ranks end at ", next, " not ",
                   l.buckets[b].end);
      }
    }
    for (int64_t r = 0; r < l.dp; ++r) {
      for (const model::BucketRanges& br : model::buffer_ranges(l, r).buckets) {
        for (const model::ParamRanges& pr : br.param_map) pieces[pr.param].push_back(pr.param_range);
      }
    }
    for (const model::ParamPlacement& pl : l.placements) {
      auto& ps = pieces[pl.param];
      std::sort(ps.begin(), ps.end(),
                [](const model::Range& a, const model::Range& b) { return a.start < b.start; });
      int64_t covered = 0;
      for (const model::Range& r : ps) {
        if (r.start != covered) {
          return str("param ", spec.params[pl.param].name,
                     ": owned pieces leave a gap or overlap at ", covered, " (next piece ", r, ")");
        }
        covered = r.end;
      }
      if (covered != spec.params[pl.param].numel()) {
        return str("param ", spec.params[pl.param].name, ": owned pieces cover ", covered, " of ",
                   spec.params[pl.param].numel(), " elements");
      }
    }
  }
  return std::nullopt;
}

namespace {

// Buffer `bi`'s buckets: contiguous, multiples of `divisor`, each padded the least.
Violation check_buckets(const model::CaseSpec& c, const model::BufferLayout& l, size_t bi,
                        int64_t divisor) {
  for (size_t b = 0; b < l.buckets.size(); ++b) {
    const model::Range& bucket = l.buckets[b];
    if (bucket.start != (b == 0 ? 0 : l.buckets[b - 1].end)) {
      return str("buffer ", bi, ": bucket ", b, " ", bucket, " is not contiguous");
    }
    if (bucket.start % divisor != 0 || bucket.end % divisor != 0) {
      return str("buffer ", bi, ": bucket ", bucket, " not a multiple of ", divisor);
    }
    // The tail pad is the least that reaches the divisor; the unpadded size ends at the last
    // param (or at its 64-padded end when a shared embedding pre-splits the bucket).
    int64_t last_end = bucket.start;
    size_t last = 0;
    for (size_t k = 0; k < l.placements.size(); ++k) {
      if (l.placements[k].bucket == static_cast<int>(b)) {
        last_end = l.placements[k].range.end;
        last = k;
      }
    }
    // A pre-split happens only when the bucket is still open when the embedding arrives.
    const std::optional<int64_t> size = model::chunk_bucket_size(c, l.chunk);
    const bool closed_by_size = size && last_end - bucket.start >= *size;
    const bool pre_split = last + 1 < l.placements.size() &&
                           c.params[l.placements[last + 1].param].shared_embedding &&
                           !c.params[l.placements[last].param].shared_embedding &&
                           !closed_by_size;
    const int64_t unpadded = (pre_split ? model::pad_param_start(last_end) : last_end) -
                             bucket.start;
    if (l.bucket_numel_unpadded.at(b) != unpadded ||
        bucket.end != model::pad_to_divisor(bucket.start + unpadded, divisor)) {
      return str("buffer ", bi, ": bucket ", bucket, " with unpadded size ",
                 l.bucket_numel_unpadded.at(b), " is not the least padding of ", unpadded,
                 " to a multiple of ", divisor);
    }
  }
  return std::nullopt;
}

// Buffer `bi`'s placements: reverse list order, 64-element starts, no overlap, inside their
// bucket, a shared embedding alone in its bucket.
Violation check_placements(const model::CaseSpec& c, const model::BufferLayout& l, size_t bi,
                           const std::vector<int>& list) {
  int64_t prev_end = 0;
  for (size_t k = 0; k < l.placements.size(); ++k) {
    const model::ParamPlacement& pl = l.placements[k];
    const model::ParamSpec& p = c.params[pl.param];
    if (pl.param != list[list.size() - 1 - k]) {
      return str("buffer ", bi, ": placement ", k, " is ", p.name, ", not reverse list order");
    }
    if (pl.range.start % model::kParamAlignment != 0) {
      return str("param ", p.name, " starts at ", pl.range.start, ", not a multiple of 64");
    }
    if (pl.range.size() != p.numel() || pl.range.start < prev_end) {
      return str("param ", p.name, " at ", pl.range, " overlaps or has the wrong size");
    }
    const model::Range& bucket = l.buckets.at(pl.bucket);
    if (pl.range.start < bucket.start || pl.range.end > bucket.end) {
      return str("param ", p.name, " at ", pl.range, " leaves its bucket ", bucket);
    }
    if (p.shared_embedding) {
      for (const model::ParamPlacement& other : l.placements) {
        if (other.param != pl.param && other.bucket == pl.bucket) {
          return str("shared embedding ", p.name, " shares bucket ", pl.bucket, " with ",
                     c.params[other.param].name);
        }
      }
    }
    prev_end = pl.range.end;
  }
  return std::nullopt;
}

// The bucket-size rule of buffer layout `l`.
Violation check_bucket_size_rule(const model::CaseSpec& c, const model::BufferLayout& l) {
  // Bucket-size rule: every bucket but the last closes at the first param reaching the size
  // (or at a shared embedding); so no earlier param of the bucket had reached it.
  const std::optional<int64_t> bucket_size = model::chunk_bucket_size(c, l.chunk);
  for (size_t k = 0; bucket_size && k < l.placements.size(); ++k) {
    const model::ParamPlacement& pl = l.placements[k];
    const bool last_in_bucket =
        k + 1 == l.placements.size() || l.placements[k + 1].bucket != pl.bucket;
    const bool reached = pl.range.end - l.buckets[pl.bucket].start >= *bucket_size;
    const bool next_is_embedding =
        k + 1 < l.placements.size() && c.params[l.placements[k + 1].param].shared_embedding;
    if (reached && !last_in_bucket) {
      return str("bucket ", pl.bucket, " did not close after ", c.params[pl.param].name,
                 " reached bucket_size ", *bucket_size);
    }
    if (!reached && last_in_bucket && k + 1 != l.placements.size() &&
        !c.params[pl.param].shared_embedding && !next_is_embedding) {
      return str("bucket ", pl.bucket, " closed early after ", c.params[pl.param].name);
    }
  }
  return std::nullopt;
}

}  // namespace

Violation check_layout_rules(const model::CaseSpec& spec,
                             const std::vector<model::BufferLayout>& ls) {
  const auto buffers = model::group_params_for_buffers(spec);
  if (buffers.size() != ls.size()) return str("expected ", buffers.size(), " buffers");
  for (size_t bi = 0; bi < ls.size(); ++bi) {
    const model::BufferLayout& l = ls[bi];
    const int64_t divisor = model::bucket_end_divisor(l.dp, spec.pad_for_high_nccl_busbw);
    const std::vector<int>& list = buffers[bi].params;
    if (l.placements.size() != list.size()) return str("buffer ", bi, ": wrong parameter count");
    if (l.numel() % l.dp != 0) return str("buffer ", bi, ": numel ", l.numel(), " % dp != 0");
    if (Violation v = check_buckets(spec, l, bi, divisor)) return v;
    if (Violation v = check_placements(spec, l, bi, list)) return v;
    if (Violation v = check_bucket_size_rule(spec, l)) return v;
  }
  return std::nullopt;
}

namespace {

// The bucket's `param_to_index` (every param's range in the bucket) against the model's layout,
// where the system under test has one.
Violation check_param_index(const model::RankPlan& plan, size_t buffer, size_t bucket,
                            const model::BucketRanges& m, const model::BucketRanges& s) {
  if (s.param_index.empty() || s.param_index == m.param_index) return std::nullopt;
  std::ostringstream have, want;
  for (const auto& [p, r] : s.param_index) have << " p" << p << " " << r;
  for (const auto& [p, r] : m.param_index) want << " p" << p << " " << r;
  return str(where(plan), " buffer ", buffer, " bucket ", bucket, ": param_to_index ",
             tested_side(), have.str(), "; model", want.str());
}

}  // namespace

Violation check_ranges(const model::RankPlan& plan, const rig::RankObservation& obs) {
  if (plan.ranges.size() != obs.ranges.size()) {
    return str(where(plan), ": ", tested_side(), " has ", obs.ranges.size(), " buffers, model ",
               plan.ranges.size());
  }
  for (size_t b = 0; b < plan.ranges.size(); ++b) {
    const auto& m = plan.ranges[b];
    const auto& s = obs.ranges[b];
    if (!(m.key == s.key) || m.buckets.size() != s.buckets.size()) {
      return str(where(plan), " buffer ", b, ": key or bucket count differs");
    }
    for (size_t k = 0; k < m.buckets.size(); ++k) {
      if (m.buckets[k].world != s.buckets[k].world) {
        return str(where(plan), " buffer ", b, " bucket ", k, ": world range ", tested_side(), " ",
                   s.buckets[k].world, " model ", m.buckets[k].world);
      }
      if (Violation v = check_param_index(plan, b, k, m.buckets[k], s.buckets[k])) return v;
      const auto& mp = m.buckets[k].param_map;
      const auto& sp = s.buckets[k].param_map;
      if (mp.size() != sp.size()) {
        return str(where(plan), " buffer ", b, " bucket ", k, ": ", tested_side(), " owns ", sp.size(),
                   " params, model ", mp.size());
      }
      for (size_t i = 0; i < mp.size(); ++i) {
        const auto& x = mp[i];
        const auto& y = sp[i];
        if (x.param != y.param || x.gbuf_world != y.gbuf_world ||
            x.gbuf_world_in_bucket != y.gbuf_world_in_bucket || x.gbuf_local != y.gbuf_local ||
            x.param_range != y.param_range) {
          return str(where(plan), " buffer ", b, " bucket ", k, " entry ", i, ": ", tested_side(), " p", y.param,
                     " world ", y.gbuf_world, " in_bucket ", y.gbuf_world_in_bucket, " local ",
                     y.gbuf_local, " param ", y.param_range, "; model p", x.param, " world ",
                     x.gbuf_world, " in_bucket ", x.gbuf_world_in_bucket, " local ", x.gbuf_local,
                     " param ", x.param_range);
        }
      }
    }
  }
  return std::nullopt;
}

Violation check_installed(const model::CaseSpec& spec, const model::RankPlan& plan,
                          const rig::RankObservation& obs) {
  if (plan.groups.size() != obs.groups.size()) {
    return str(where(plan), ": ", tested_side(), " has ", obs.groups.size(), " groups, model ",
               plan.groups.size());
  }
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const auto& want = plan.groups[g].installed;
    const auto& have = obs.groups[g];
    if (want.size() != have.size()) {
      return str(where(plan), " group ", g, ": ", have.size(), " tensors installed, plan ",
                 want.size());
    }
    for (size_t i = 0; i < want.size(); ++i) {
      const model::ShardEntry& w = want[i];
      const rig::ObservedTensor& h = have[i];
      const std::string at =
          str(where(plan), " group ", g, " position ", i, " (", spec.params[w.param].name, "): ");
      if (h.param != w.param) return str(at, "holds a piece of ", spec.params[h.param].name);
      if (h.is_leaf != w.leaf || h.has_grad_fn) {
        return str(at, "is_leaf=", h.is_leaf, " requires_grad=", h.requires_grad,
                   " grad_fn=", h.has_grad_fn, "; every optimizer tensor must be a leaf");
      }
      if (h.numel != w.param_range.size()) return str(at, "numel ", h.numel, " not ", w.param_range.size());
      if (h.dtype != w.dtype) return str(at, "dtype ", model::dtype_name(h.dtype), " not ", model::dtype_name(w.dtype));
      if (h.aliases_model != w.aliases_model) {
        return str(at, w.aliases_model ? "does not alias" : "aliases", " the model parameter");
      }
      if (w.aliases_model && h.alias_offset != w.alias_offset) {
        return str(at, "aliases at element ", h.alias_offset, " not ", w.alias_offset);
      }
      if (h.model_has_main_param != w.fresh_fp32_main) {
        return str(at, "model_param.main_param is ", h.model_has_main_param ? "" : "not ",
                   "this tensor");
      }
    }
  }
  if (obs.index_map != plan.index_map) {
    for (const auto& [p, pos] : plan.index_map) {
      auto it = obs.index_map.find(p);
      if (it == obs.index_map.end() || it->second != pos) {
        return str(where(plan), ": model_param_group_index_map[", spec.params[p].name, "] is (",
                   it == obs.index_map.end() ? -1 : it->second.first, ",",
                   it == obs.index_map.end() ? -1 : it->second.second, ") not (", pos.first, ",",
                   pos.second, ")");
      }
    }
    return str(where(plan), ": model_param_group_index_map has extra entries");
  }
  if (!obs.error && !obs.final_groups_match) {
    return str(where(plan), ": the optimizer's groups are not the installed tensors");
  }
  return std::nullopt;
}

Violation check_constructed(const rig::RankObservation& obs) {
  if (!obs.error) return std::nullopt;
  return str(obs.instance == model::Instance::kExpert ? "expert" : "dense", " rank ", obs.rank,
             ": construction failed: ", obs.error_type, ": ", *obs.error);
}

Violation check_failing_ranks(const std::vector<int64_t>& predicted,
                              const std::vector<rig::RankObservation>& observed) {
  std::vector<int64_t> failed;
  for (const auto& o : observed) {
    if (!o.error) continue;
    if (*o.error != "can't optimize a non-leaf Tensor") {
      return str("rank ", o.rank, " failed with another error: ", *o.error);
    }
    failed.push_back(o.rank);
  }
  // Only the observed ranks can be compared.
  std::vector<int64_t> expected;
  for (const auto& o : observed) {
    if (std::binary_search(predicted.begin(), predicted.end(), o.rank)) expected.push_back(o.rank);
  }
  if (failed == expected) return std::nullopt;
  std::ostringstream os;
  os << "failing ranks {";
  for (auto r : failed) os << " " << r;
  os << " } but the model predicts {";
  for (auto r : expected) os << " " << r;
  os << " }";
  return os.str();
}

Violation check_offload_laws(const std::vector<std::vector<model::HdoTensor>>& groups, double lo,
                             double hi, Planner planner) {
  int64_t total = 0;
  for (const auto& g : groups) {
    for (const auto& t : g) total += t.numel;
  }
  auto prefix = [&](double fraction) -> std::pair<int64_t, Violation> {
    model::HdoConfig config;
    config.offload_fraction = fraction;
    const model::OffloadPlan plan = planner(groups, config);
    int64_t count = 0, numel = 0;
    bool ended = false;
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t i = 0; i < groups[g].size(); ++i) {
        if (!plan.placements[g][i].offloaded) {
          ended = true;
          continue;
        }
        if (ended) return {0, str("fraction ", fraction, ": offloaded set is not a prefix")};
        // Shortest prefix: before adding this tensor the running numel was below the target.
        if (!(static_cast<double>(numel) < fraction * static_cast<double>(total))) {
          return {0, str("fraction ", fraction, ": tensor ", g, "/", i, " offloaded past the target")};
        }
        ++count;
        numel += groups[g][i].numel;
      }
    }
    if (static_cast<double>(numel) < fraction * static_cast<double>(total)) {
      return {0, str("fraction ", fraction, ": offloaded ", numel, " of ", total, ", short of target")};
    }
    return {count, std::nullopt};
  };
  const auto [a, va] = prefix(lo);
  if (va) return va;
  const auto [b, vb] = prefix(hi);
  if (vb) return vb;
  if (a > b) return str("fraction ", lo, " offloads ", a, " tensors, more than ", b, " at ", hi);
  size_t n = 0;
  for (const auto& g : groups) n += g.size();
  if (prefix(0.0).first != 0) return str("fraction 0 offloads something");
  if (prefix(1.0).first != static_cast<int64_t>(n)) return str("fraction 1 keeps a tensor");
  return std::nullopt;
}

std::vector<int64_t> ranks_to_check(const model::CaseSpec& spec,
                                    const std::vector<model::BufferLayout>& ls,
                                    model::Instance instance) {
  const int64_t dp = model::instance_dp(spec, instance);
  std::vector<int64_t> out;
  if (dp <= 8) {
    for (int64_t r = 0; r < dp; ++r) out.push_back(r);
    return out;
  }
  std::vector<int64_t> owners, others;
  for (int64_t r = 0; r < dp; ++r) {
    (model::owns_fp32_piece(spec, model::plan_rank(spec, ls, instance, r)) ? owners : others)
        .push_back(r);
  }
  out = {0, dp - 1};
  for (size_t i = 0; i < 3 && i < owners.size(); ++i) out.push_back(owners[i * owners.size() / 3]);
  for (size_t i = 0; i < 3 && i < others.size(); ++i) out.push_back(others[i * others.size() / 3]);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace sc::props
