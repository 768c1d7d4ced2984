// The model's byte accounting (model/memory.h) against hand computations on one small case, in
// each optimizer configuration: plain, precision-aware, offloaded in part, kept on the
// accelerator, with a CUDA accelerator (pinned host memory).
#include "model/memory.h"

#include <gtest/gtest.h>

namespace sc::model {
namespace {

// Two parameters, DP 2, 16-bit grads (grad_reduce_in_fp32 off, so that grad copies appear):
//   w     bf16 [64, 2] = 128 elements, group 0 (weight decay)
//   alpha fp32 [64]    =  64 elements, group 1 (1-D)
// Buffers (one bucket each, padded to lcm(2, 128) = 128 elements):
//   bf16 buffer: w at [0, 128)              -> 128 elements: params 256 B, grads 256 B
//   fp32 buffer: alpha at [0, 64), pad to 128 -> 128 elements: params 512 B, grads 512 B
//   param_buffer = 256 + 512 = 768, grad_buffer = 256 + 512 = 768
// Rank 0 owns the first 64 elements of each bucket: w[0, 64) and all of alpha[0, 64).
// Rank 1 owns w[64, 128) and only padding of the fp32 bucket.
ParamSpec param(const std::string& name, std::vector<int64_t> shape, DType dtype, int group) {
  ParamSpec p;
  p.name = name;
  p.shape = std::move(shape);
  p.dtype = dtype;
  p.keep_in_fp32 = dtype == DType::kFloat32;
  p.group = group;
  return p;
}

CaseSpec two_param_case() {
  CaseSpec c;
  c.params.push_back(param("w", {64, 2}, DType::kBFloat16, 0));
  c.params.push_back(param("alpha", {64}, DType::kFloat32, 1));
  c.dp = 2;
  c.grad_reduce_in_fp32 = false;
  return c;
}

RankBytes bytes_of(const CaseSpec& c, int64_t rank, bool cuda = false) {
  const auto layouts = full_param_layout(c);
  return rank_bytes(c, layouts, plan_rank(c, layouts, Instance::kDense, rank), cuda);
}

void expect_side(const SideBytes& got, int64_t param_buffer, int64_t grad_buffer,
                 int64_t main_params, int64_t grad_copies, int64_t optimizer_state) {
  EXPECT_EQ(got.param_buffer, param_buffer);
  EXPECT_EQ(got.grad_buffer, grad_buffer);
  EXPECT_EQ(got.main_params, main_params);
  EXPECT_EQ(got.grad_copies, grad_copies);
  EXPECT_EQ(got.optimizer_state, optimizer_state);
}

TEST(MemoryModel, PlainOptimizerKeepsFp32MainsGradCopiesAndStateOnTheAccelerator) {
  const CaseSpec c = two_param_case();
  const RankBytes b = bytes_of(c, 0);
  // Not precision-aware: w's piece gets a fresh fp32 main param, 64 * 4 = 256 B, and its grad
  // `.float()` of the bf16 main grad, 64 * 4 = 256 B; alpha's piece is a view (0 B).
  // State: (64 + 64) installed elements * 8 B = 1024 B.
  expect_side(b.accelerator, 768, 768, 256, 256, 1024);
  expect_side(b.host, 0, 0, 0, 0, 0);
  EXPECT_EQ(b.host_pinned, 0);
  EXPECT_EQ(b.accelerator.at_construction(), 768 + 768 + 256);
  EXPECT_EQ(b.accelerator.after_step(), 768 + 768 + 256 + 256 + 1024);
}

TEST(MemoryModel, PrecisionAwareWithoutOffloadAddsTransformerEngineMasters) {
  CaseSpec c = two_param_case();
  c.precision_aware = true;
  // Views only (no main params, grads read as decoupled views). State: 8 B * 128 elements =
  // 1024 B, plus master_param: w's bf16 piece keeps an int16 remainder (64 * 2 = 128 B), alpha's
  // fp32 piece a full fp32 master (64 * 4 = 256 B): 1024 + 128 + 256 = 1408 B.
  expect_side(bytes_of(c, 0).accelerator, 768, 768, 0, 0, 1408);
  c.store_param_remainders = false;  // w's master in fp32 too: 1024 + 256 + 256 = 1536 B
  expect_side(bytes_of(c, 0).accelerator, 768, 768, 0, 0, 1536);
}

TEST(MemoryModel, OffloadPutsCopiesGradsAndStateOfOffloadedPiecesOnTheHost) {
  CaseSpec c = two_param_case();
  c.precision_aware = true;
  c.cpu_offload = true;
  c.offload_fraction = 0.5;
  // Rank 0 installs [w piece (bf16, 64)] and [alpha piece (fp32, 64)]: 128 elements, threshold
  // 0.5 * 128 = 64. w's piece is offloaded (0 < 64); alpha's is not (64 < 64 is false).
  //   host:  w's fp32 copy 64 * 4 = 256 B, its host grad 256 B, its state 64 * 8 = 512 B
  //   accel: alpha steps in place: state 64 * 8 = 512 B
  RankBytes b = bytes_of(c, 0);
  expect_side(b.accelerator, 768, 768, 0, 0, 512);
  expect_side(b.host, 0, 0, 256, 256, 512);
  EXPECT_EQ(b.host_pinned, 0);  // no pinned memory without CUDA
  // With CUDA the host grad (256 B) and the fp32 clone of w's host copy (256 B, pinned as
  // HDO-02's fix intends) are pinned.
  EXPECT_EQ(bytes_of(c, 0, /*cuda=*/true).host_pinned, 512);
  // Rank 1 installs only w[64, 128): threshold 0.5 * 64 = 32, so it is offloaded.
  b = bytes_of(c, 1);
  expect_side(b.accelerator, 768, 768, 0, 0, 0);
  expect_side(b.host, 0, 0, 256, 256, 512);
}

TEST(MemoryModel, FractionZeroKeepsTheFp32CopyAndItsGradOnTheAccelerator) {
  CaseSpec c = two_param_case();
  c.precision_aware = true;
  c.cpu_offload = true;
  c.offload_fraction = 0.0;
  // w's piece gets an fp32 copy on the accelerator (256 B) and, its decoupled grad being bf16,
  // an fp32 grad copy (256 B). State: (64 + 64) * 8 = 1024 B.
  const RankBytes b = bytes_of(c, 0, /*cuda=*/true);
  expect_side(b.accelerator, 768, 768, 256, 256, 1024);
  expect_side(b.host, 0, 0, 0, 0, 0);
  EXPECT_EQ(b.host_pinned, 0);
  // With fp32 grads the `.to(fp32)` is the view itself: no grad copy.
  c.grad_reduce_in_fp32 = true;
  // Grad buffers now fp32: 128 * 4 + 128 * 4 = 1024 B.
  expect_side(bytes_of(c, 0).accelerator, 768, 1024, 256, 0, 1024);
}

TEST(MemoryModel, OffloadedFp32PieceIsPinnedWithCuda) {
  CaseSpec c = two_param_case();
  c.precision_aware = true;
  c.cpu_offload = true;
  c.offload_fraction = 1.0;
  // Both pieces on the host: w's fp32 clone (256 B, pinned: the intended behaviour, HDO-02's
  // fix) and alpha's fp32 copy (256 B, pinned); both host grads (256 + 256 B, pinned):
  // pinned = 256 + 256 + 512 = 1024 B.
  const RankBytes b = bytes_of(c, 0, /*cuda=*/true);
  expect_side(b.host, 0, 0, 512, 512, 1024);
  expect_side(b.accelerator, 768, 768, 0, 0, 0);
  EXPECT_EQ(b.host_pinned, 1024);
}

TEST(MemoryModel, SumsAddEveryField) {
  RankBytes a, b;
  a.accelerator.param_buffer = 1;
  a.host.optimizer_state = 2;
  b.accelerator.param_buffer = 10;
  b.host.grad_copies = 20;
  b.host_pinned = 30;
  a += b;
  EXPECT_EQ(a.accelerator.param_buffer, 11);
  EXPECT_EQ(a.host.after_step(), 22);
  EXPECT_EQ(a.host_pinned, 30);
}

}  // namespace
}  // namespace sc::model
