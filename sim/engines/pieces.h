// Work over many tensors as one run of elements: a task's range [begin, end) of the run, split
// into the pieces of the tensors it covers, so that tasks of a fixed grain may cross tensor
// boundaries (the fused host AdamW's pass, and the benchmarks' limit that has its traffic).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace sc::engines {

// Calls piece(k, lo, hi) for each tensor k that [begin, end) covers, with [lo, hi) the covered
// elements of tensor k; `ends` holds the running element count after each tensor.
template <typename Piece>
void for_each_piece(const std::vector<int64_t>& ends, int64_t begin, int64_t end, Piece piece) {
  size_t k = std::upper_bound(ends.begin(), ends.end(), begin) - ends.begin();
  int64_t at = begin;
  while (at < end && k < ends.size()) {
    const int64_t start = k == 0 ? 0 : ends[k - 1];
    const int64_t hi = std::min(end, ends[k]) - start;
    piece(k, at - start, hi);
    at = start + hi;
    ++k;
  }
}

}  // namespace sc::engines
