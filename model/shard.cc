#include "model/shard.h"

#include <algorithm>
#include <cassert>

namespace sc::model {

Range rank_world_range(const BufferLayout& layout, int bucket, int64_t rank) {
  const Range& b = layout.buckets.at(bucket);
  assert(b.size() % layout.dp == 0);
  const int64_t shard = b.size() / layout.dp;
  return Range{b.start + rank * shard, b.start + (rank + 1) * shard};
}

namespace {

// Each bucket's `param_to_index`: every placement of the bucket, less the bucket's start.
void add_param_index(const BufferLayout& layout, BufferRanges& out) {
  for (const ParamPlacement& pl : layout.placements) {
    const int64_t offset = layout.buckets.at(pl.bucket).start;
    out.buckets.at(pl.bucket).param_index.push_back(
        {pl.param, Range{pl.range.start - offset, pl.range.end - offset}});
  }
  for (BucketRanges& b : out.buckets) {
    std::sort(b.param_index.begin(), b.param_index.end(),
              [](const auto& x, const auto& y) { return x.second.start < y.second.start; });
  }
}

}  // namespace

BufferRanges buffer_ranges(const BufferLayout& layout, int64_t rank) {
  BufferRanges out{layout.key, {}};
  const std::vector<ParamPlacement>& all = layout.placements;
  // `_build_model_gbuf_param_range_map` walks every parameter of the buffer for every bucket;
  // the pieces outside the rank's world range are empty and dropped. With the placements in
  // ascending buffer order (as every layout builds them) only those that can overlap the range
  // are visited: the same pieces in the same order, in time linear in the parameters.
  bool ascending = true;
  for (size_t k = 1; k < all.size() && ascending; ++k) {
    ascending = all[k].range.start >= all[k - 1].range.start &&
                all[k].range.end >= all[k - 1].range.end;
  }
  for (int b = 0; b < static_cast<int>(layout.buckets.size()); ++b) {
    BucketRanges br{rank_world_range(layout, b, rank), {}, {}};
    const int64_t shard = br.world.size();
    const int64_t bucket_offset = layout.buckets[b].start;
    auto first = all.begin();
    if (ascending) {
      first = std::partition_point(all.begin(), all.end(), [&](const ParamPlacement& pl) {
        return pl.range.end <= br.world.start;
      });
    }
    for (auto it = first; it != all.end(); ++it) {
      const ParamPlacement& pl = *it;
      if (ascending && pl.range.start >= br.world.end) break;
      const int64_t local_start = std::max<int64_t>(0, pl.range.start - br.world.start);
      const int64_t local_end = std::min(shard, pl.range.end - br.world.start);
      if (local_end <= local_start) continue;
      ParamRanges r;
      r.param = pl.param;
      r.gbuf_local = Range{local_start, local_end};
      r.gbuf_world = r.gbuf_local.normalize(local_start + br.world.start);
      r.gbuf_world_in_bucket =
          Range{r.gbuf_world.start - bucket_offset, r.gbuf_world.end - bucket_offset};
      r.param_range =
          r.gbuf_local.normalize(std::max<int64_t>(0, br.world.start - pl.range.start));
      br.param_map.push_back(r);
    }
    out.buckets.push_back(std::move(br));
  }
  add_param_index(layout, out);
  return out;
}

int64_t instance_dp(const CaseSpec& spec, Instance instance) {
  return instance == Instance::kExpert ? spec.expert_dp : spec.dp;
}

bool instance_present(const CaseSpec& spec, Instance instance) {
  const bool expert = instance == Instance::kExpert;
  return std::any_of(spec.params.begin(), spec.params.end(),
                     [&](const ParamSpec& p) { return p.is_expert == expert; });
}

RankPlan plan_rank(const CaseSpec& spec, const std::vector<BufferLayout>& layouts,
                   Instance instance, int64_t rank) {
  const bool expert = instance == Instance::kExpert;
  RankPlan plan{instance, rank, {}, {}, {}, std::nullopt};
  for (const BufferLayout& l : layouts) {
    if (l.key.is_expert == expert) plan.ranges.push_back(buffer_ranges(l, rank));
  }
  // The instance's param groups: the distinct group indices of its parameters, ascending.
  std::vector<int> group_ids;
  for (const ParamSpec& p : spec.params) {
    if (p.is_expert == expert) group_ids.push_back(p.group);
  }
  std::sort(group_ids.begin(), group_ids.end());
  group_ids.erase(std::unique(group_ids.begin(), group_ids.end()), group_ids.end());
  for (int g : group_ids) plan.groups.push_back(GroupPlan{g, {}});

  // Group-range order (buffer, bucket, layout order), split into fp32 and 16-bit parts, which
  // `_build_model_and_main_param_groups` installs as [fp32..., 16-bit...].
  std::vector<std::vector<ShardEntry>> fp32(plan.groups.size()), half(plan.groups.size());
  for (const BufferRanges& br : plan.ranges) {
    for (const BucketRanges& bucket : br.buckets) {
      for (const ParamRanges& r : bucket.param_map) {
        const ParamSpec& p = spec.params[r.param];
        const size_t gpos = std::lower_bound(group_ids.begin(), group_ids.end(), p.group) -
                            group_ids.begin();
        if (p.dtype == DType::kFloat32) {
          fp32[gpos].push_back(ShardEntry{r.param, r.param_range, ShardKind::kFp32View,
                                          DType::kFloat32, true, true, r.param_range.start,
                                          false});
        } else if (is_float16(p.dtype)) {
          if (spec.precision_aware) {
            half[gpos].push_back(ShardEntry{r.param, r.param_range, ShardKind::kFloat16View,
                                            p.dtype, true, true, r.param_range.start, false});
          } else {
            half[gpos].push_back(ShardEntry{r.param, r.param_range, ShardKind::kFp32MainCopy,
                                            DType::kFloat32, true, false, 0, true});
          }
        } else if (!plan.type_error) {
          plan.type_error = "parameter '" + p.name + "' has unsupported dtype " +
                            dtype_name(p.dtype);
        }
      }
    }
  }
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    auto& inst = plan.groups[g].installed;
    inst = fp32[g];
    inst.insert(inst.end(), half[g].begin(), half[g].end());
    for (size_t i = 0; i < inst.size(); ++i) {
      plan.index_map[inst[i].param] = {static_cast<int>(g), static_cast<int>(i)};
    }
  }
  return plan;
}

bool owns_fp32_piece(const CaseSpec& spec, const RankPlan& plan) {
  for (const GroupPlan& g : plan.groups) {
    for (const ShardEntry& e : g.installed) {
      if (spec.params[e.param].dtype == DType::kFloat32 && !e.param_range.empty()) return true;
    }
  }
  return false;
}

std::vector<int64_t> upstream_failing_ranks(const CaseSpec& spec,
                                            const std::vector<BufferLayout>& layouts,
                                            Instance instance) {
  std::vector<int64_t> out;
  if (!spec.cpu_offload || !instance_present(spec, instance)) return out;
  for (int64_t r = 0; r < instance_dp(spec, instance); ++r) {
    if (owns_fp32_piece(spec, plan_rank(spec, layouts, instance, r))) out.push_back(r);
  }
  return out;
}

}  // namespace sc::model
