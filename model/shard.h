// Per-rank ownership and the shard plan of Megatron's DistributedOptimizer
// (`_build_model_gbuf_range`, `_build_model_gbuf_param_range_map`, `_build_optimizer_group_ranges`,
// `_build_model_and_main_param_groups` and the index-map rebuild in `__init__`).
//
// Invariants: per bucket, the dp world ranges tile the padded bucket; a parameter appears in a
// rank's map only when it owns a non-empty piece; the four ranges of an entry have equal sizes;
// every installed optimizer tensor is, as intended, a leaf.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/layout.h"

namespace sc::model {

// The two distributed-optimizer instances of a world: dense parameters, expert parameters.
enum class Instance { kDense, kExpert };

// The four ranges of one locally owned parameter piece.
struct ParamRanges {
  int param;                   // index into CaseSpec::params
  Range gbuf_world;            // absolute in the buffer
  Range gbuf_world_in_bucket;  // relative to the bucket start
  Range gbuf_local;            // relative to this rank's shard of the bucket
  Range param_range;           // inside the flattened parameter (`"param"`)
};

// One bucket as seen by one rank.
struct BucketRanges {
  Range world;                        // this rank's world range
  std::vector<ParamRanges> param_map; // layout order
  // Every parameter of the bucket (not only this rank's) and its range relative to the bucket
  // start, aligned as the buffer lays it out (`_ParamAndGradBucket.param_to_index`), in order of
  // start. Empty where the system under test has no such index (a tree older than it).
  std::vector<std::pair<int, Range>> param_index;
};

// `gbuf_range_map` of one buffer for one rank.
struct BufferRanges {
  BufferKey key;
  std::vector<BucketRanges> buckets;
};

// Rank `rank`'s world range of `bucket` in `layout` (asserts the bucket divides by dp).
Range rank_world_range(const BufferLayout& layout, int bucket, int64_t rank);
// `_build_gbuf_range_map` for `rank` over one buffer.
BufferRanges buffer_ranges(const BufferLayout& layout, int64_t rank);

// What the optimizer receives for one owned piece.
enum class ShardKind {
  kFp32View,      // branch B: 1-D view of an fp32 model parameter
  kFloat16View,   // branch A: 1-D view of a bf16/fp16 model parameter (precision-aware)
  kFp32MainCopy,  // branch A: fresh fp32 clone of the 16-bit view (not precision-aware)
};

// One installed optimizer tensor.
struct ShardEntry {
  int param;              // model parameter index
  Range param_range;      // the piece of the flattened parameter
  ShardKind kind;
  DType dtype;            // dtype of the installed tensor
  bool leaf = true;       // intended: every optimizer tensor is a leaf
  bool aliases_model;     // shares the model parameter's storage
  int64_t alias_offset;   // element offset into the model parameter when aliasing
  bool fresh_fp32_main;   // the model parameter gets a fresh fp32 main param for this piece
};

// One optimizer param group on one rank, in installed order: fp32 views, then 16-bit derived.
struct GroupPlan {
  int group;                        // CaseSpec group index
  std::vector<ShardEntry> installed;
};

// Everything the model predicts for one rank of one optimizer instance.
struct RankPlan {
  Instance instance;
  int64_t rank;
  std::vector<BufferRanges> ranges;          // the instance's buffers, in buffer order
  std::vector<GroupPlan> groups;             // the instance's groups, in group-index order
  std::map<int, std::pair<int, int>> index_map;  // param -> (group position, installed position)
  std::optional<std::string> type_error;     // a parameter of an unsupported dtype is owned
};

// DP size of `instance` in `spec`.
int64_t instance_dp(const CaseSpec& spec, Instance instance);
// True when `spec` has at least one parameter in `instance`.
bool instance_present(const CaseSpec& spec, Instance instance);
// The plan for `rank` of `instance`, given `layouts` = full_param_layout(spec).
RankPlan plan_rank(const CaseSpec& spec, const std::vector<BufferLayout>& layouts,
                   Instance instance, int64_t rank);
// True when the rank owns a non-empty piece of an fp32 parameter.
bool owns_fp32_piece(const CaseSpec& spec, const RankPlan& plan);
// The ranks of `instance` that upstream's HybridDeviceOptimizer rebuild rejects: those that own
// a non-empty fp32 piece, when `spec.cpu_offload`; empty otherwise.
std::vector<int64_t> upstream_failing_ranks(const CaseSpec& spec,
                                            const std::vector<BufferLayout>& layouts,
                                            Instance instance);

}  // namespace sc::model
