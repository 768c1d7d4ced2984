// LibTorch's intra-op parallel loop, as our code uses it. ATen's parallel_for is a header
// template: with torch's OpenMP backend it expands to a `#pragma omp parallel` inside our own
// translation unit, so a file compiled without OpenMP gets a serial loop while
// at::get_num_threads() still reports the pool's size. The build passes OpenMP to everything that
// links LibTorch (CMakeLists.txt); this header refuses to compile where it did not.
#pragma once

#include <ATen/Parallel.h>

#if AT_PARALLEL_OPENMP && !defined(_OPENMP)
#error "LibTorch's parallel_for uses OpenMP: build this file with OpenMP, or it runs on one thread"
#endif
