#include "sim/port/cuda/fused_adam_kernel.h"

#include <cuda_runtime.h>

namespace sc::sut::cuda {

namespace {

// Tensors per launch and elements per block: every block handles one chunk of one tensor.
constexpr int kTensorsPerLaunch = 64;
constexpr int kChunk = 4096;
constexpr int kThreads = 256;

struct LaunchTable {
  AdamTensor t[kTensorsPerLaunch];
  int64_t first_chunk[kTensorsPerLaunch + 1];  // prefix sums of chunk counts
  int count;
};

__global__ void adam_kernel(LaunchTable table, AdamArgs a) {
  const int64_t chunk = blockIdx.x;
  int k = 0;
  while (k + 1 < table.count && table.first_chunk[k + 1] <= chunk) ++k;
  const AdamTensor& t = table.t[k];
  const int64_t begin = (chunk - table.first_chunk[k]) * kChunk;
  const int64_t end = begin + kChunk < t.n ? begin + kChunk : t.n;
  const float one_minus_b1 = __fsub_rn(1.0f, a.beta1);
  const float one_minus_b2 = __fsub_rn(1.0f, a.beta2);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float g = t.g[i];
    const float m = __fadd_rn(__fmul_rn(a.beta1, t.m[i]), __fmul_rn(one_minus_b1, g));
    const float v =
        __fadd_rn(__fmul_rn(a.beta2, t.v[i]), __fmul_rn(__fmul_rn(one_minus_b2, g), g));
    const float m_hat = __fdiv_rn(m, a.bc1);
    const float v_hat = __fdiv_rn(v, a.bc2);
    const float denom = __fadd_rn(__fsqrt_rn(v_hat), a.eps);
    const float update = __fadd_rn(__fdiv_rn(m_hat, denom), __fmul_rn(a.weight_decay, t.p[i]));
    t.p[i] = __fsub_rn(t.p[i], __fmul_rn(a.lr, update));
    t.m[i] = m;
    t.v[i] = v;
  }
}

}  // namespace

std::string fused_adam_launch(const std::vector<AdamTensor>& tensors, const AdamArgs& args,
                              void* stream) {
  LaunchTable table{};
  auto flush = [&]() -> std::string {
    if (table.count == 0) return "";
    const int64_t blocks = table.first_chunk[table.count];
    if (blocks > 0) {
      adam_kernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                    static_cast<cudaStream_t>(stream)>>>(table, args);
    }
    table = LaunchTable{};
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? "" : cudaGetErrorString(e);
  };
  for (const AdamTensor& t : tensors) {
    if (t.n == 0) continue;  // no chunks: must not hold back the tensors before it (PT-01)
    table.t[table.count] = t;
    table.first_chunk[table.count + 1] = table.first_chunk[table.count] + (t.n + kChunk - 1) / kChunk;
    if (++table.count == kTensorsPerLaunch) {
      if (std::string err = flush(); !err.empty()) return err;
    }
  }
  return flush();
}

}  // namespace sc::sut::cuda
