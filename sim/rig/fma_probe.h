// Which FMA mode LibTorch's CPU AdamW uses on this machine (its AVX2/AVX512 kernels fuse the
// multiply-adds, its default kernel does not), found by stepping a probe tensor and comparing
// with both emulations of the model.
#pragma once

#include <optional>

#include "model/adamw.h"

namespace sc::sim {

// The mode whose emulation reproduces LibTorch bit for bit on a 1037-element probe over three
// steps, or nullopt when neither does (then the CPU comparison cannot be exact: a finding).
std::optional<model::FmaMode> torch_cpu_fma_mode();

}  // namespace sc::sim
