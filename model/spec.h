// The inputs of one distributed-optimizer case: parameters (in named_parameters() order), the
// data-parallel sizes, and the DDP and optimizer switches that change the layout or the shards.
//
// Invariants (checked by validate()): every parameter has at least one element and a group index
// below num_groups(); dp and expert_dp are at least 1; bucket_size, when set, is positive; the
// offload fraction lies in [0, 1].
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/dtype.h"

namespace sc::model {

// One trainable model parameter as the distributed optimizer sees it.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;    // numel() = product of the dimensions
  DType dtype = DType::kBFloat16;
  bool keep_in_fp32 = false;     // marked by mark_keep_in_fp32 (informational; dtype decides)
  bool is_expert = false;        // expert parameter: `allreduce == False`, own buffer, expert DP
  bool shared_embedding = false; // gets a bucket of its own in the distributed-optimizer layout
  int group = 0;                 // index of the optimizer param group (weight-decay group)
  int chunk = 0;                 // model chunk (virtual pipeline stage) holding the parameter

  // Product of the shape (1 for a 0-d shape).
  int64_t numel() const;
};

// Everything that decides one case's layout, shard plan and construction.
struct CaseSpec {
  std::vector<ParamSpec> params;      // named_parameters() order
  int dp = 1;                         // dense data-parallel size (DP x CP)
  int expert_dp = 1;                  // expert data-parallel size
  std::optional<int64_t> bucket_size; // elements; nullopt = one bucket per buffer
  // Megatron's training loop (get_model) turns bucketing off for model chunks after the first
  // (`disable_bucketing`); DDP alone does not. The main job sets this, generated cases do not.
  bool bucket_first_chunk_only = false;
  bool pad_for_high_nccl_busbw = false;
  bool grad_reduce_in_fp32 = false;
  bool precision_aware = false;       // use_precision_aware_optimizer_no_fp8_or_ds_fp8
  // OptimizerConfig.store_param_remainders (Megatron's default): precision-aware without offload
  // keeps bf16 masters as bf16 param + int16 remainder. No effect otherwise.
  bool store_param_remainders = true;
  bool cpu_offload = false;           // HybridDeviceOptimizer, rebuilt by DistributedOptimizer
  double offload_fraction = 1.0;
  // HybridDeviceOptimizer's overlap_cpu_optimizer_d2h_h2d: its own D2H and H2D streams and one
  // host optimizer per tensor (else the current stream and one host optimizer).
  bool overlap_cpu_optimizer_d2h_h2d = true;
  // Whether Transformer Engine is installed. With it (the default), the factory's Adam class is
  // TE's FusedAdam: the hybrid optimizer's accelerator sub-optimizer, and the precision-aware
  // optimizer. Without it (and without Apex) both hybrid sub-optimizers are torch.optim.AdamW and
  // the precision-aware optimizer cannot be built.
  bool transformer_engine = true;
  // Whether the DDP buffers are built by a direct caller without a pg_collection, their
  // data-parallel and tensor-parallel groups then read from parallel_state (DDP itself always
  // hands its own). The groups are the same either way: the model and the port read nothing of
  // it; Megatron's code takes another path. Set by the property that builds a case both ways
  // (properties/buffer_groups_props.h), not by the case generator.
  bool buffers_from_parallel_state = false;

  // One more than the largest group index (0 when there are no parameters).
  int num_groups() const;
};

// The bucket size of model chunk `chunk`'s buffers: spec.bucket_size, or nullopt for a chunk after
// the first when spec.bucket_first_chunk_only.
std::optional<int64_t> chunk_bucket_size(const CaseSpec& spec, int chunk);

// The dtype of `param`'s grad buffer, and so of its `main_grad`: fp32 with grad_reduce_in_fp32,
// else the parameter's own.
DType grad_buffer_dtype(const CaseSpec& spec, const ParamSpec& param);

// Empty when `spec` satisfies the invariants above, else a message naming the first violation.
std::optional<std::string> validate(const CaseSpec& spec);

}  // namespace sc::model
