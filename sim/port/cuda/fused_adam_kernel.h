// The project's multi-tensor FusedAdam kernel (AdamW mode, fp32 params, grads and moments):
// the arithmetic of sut::fused_adam_cpu, one rounding per operation (no contraction), so that
// CUDA and CPU results are bit-identical. Plain C++ interface: no LibTorch types cross it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sc::sut::cuda {

// One tensor's device pointers and element count.
struct AdamTensor {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
};

// Hyper-parameters of one launch (bias corrections already computed for the group's step).
struct AdamArgs {
  float lr, beta1, beta2, eps, weight_decay, bc1, bc2;
};

// Steps every tensor on `stream` (a cudaStream_t, nullptr for the legacy default stream).
// Zero-size tensors are skipped. Returns "" or the CUDA error text.
std::string fused_adam_launch(const std::vector<AdamTensor>& tensors, const AdamArgs& args,
                              void* stream);

}  // namespace sc::sut::cuda
