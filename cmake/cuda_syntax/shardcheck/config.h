// Build configuration for the compile-only check of the CUDA stream code (sim/CMakeLists.txt):
// as with a LibTorch that has CUDA.
#pragma once
#define SC_HAVE_CUDA 1
#define SC_TORCH_CUDA 1
