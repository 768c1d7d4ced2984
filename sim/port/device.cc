#include "sim/port/device.h"

#include <torch/cuda.h>
#include <torch/version.h>

#include "shardcheck/config.h"

namespace sc::sut {

std::string cpu_fallback_reason() {
#if SC_HAVE_CUDA && !SC_TORCH_CUDA
  return "LibTorch built without CUDA (e.g. Debian's libtorch-dev)";
#elif SC_HAVE_CUDA
  if (!torch::cuda::is_available()) return "LibTorch sees no CUDA device";
  return "";
#else
  return "built without CUDA (SC_CUDA=OFF or no CUDA compiler)";
#endif
}

torch::Device pick_device() {
  return cpu_fallback_reason().empty() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
}

std::string megatron_type(const torch::Tensor& tensor, const torch::Device& accelerator) {
  std::string scalar;
  switch (tensor.scalar_type()) {
    case torch::kFloat:
      scalar = "FloatTensor";
      break;
    case torch::kHalf:
      scalar = "HalfTensor";
      break;
    case torch::kBFloat16:
      scalar = "BFloat16Tensor";
      break;
    case torch::kDouble:
      scalar = "DoubleTensor";
      break;
    default:
      scalar = std::string(c10::toString(tensor.scalar_type())) + "Tensor";
  }
  const bool on_accelerator = tensor.device().type() == accelerator.type();
  return (on_accelerator ? "torch.cuda." : "torch.") + scalar;
}

std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

}  // namespace sc::sut
