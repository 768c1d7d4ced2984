// Half-open element ranges, as Megatron's `Range` in distrib_optimizer.py.
//
// A Range [start, end) never has end < start; size() is end - start. normalize(s) moves the range
// so that it starts at s and keeps its size. Ranges compare by value.
#pragma once

#include <cstdint>
#include <ostream>

namespace sc::model {

// Half-open range [start, end) of element indices.
struct Range {
  int64_t start = 0;
  int64_t end = 0;

  // Number of elements in the range.
  int64_t size() const { return end - start; }
  // The same-size range that starts at `new_start` (Megatron's Range.normalize).
  Range normalize(int64_t new_start) const { return Range{new_start, new_start + size()}; }
  // True when the range holds no element.
  bool empty() const { return end <= start; }

  friend bool operator==(const Range& a, const Range& b) {
    return a.start == b.start && a.end == b.end;
  }
  friend bool operator!=(const Range& a, const Range& b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& os, const Range& r) {
    return os << "[" << r.start << "," << r.end << ")";
  }
};

}  // namespace sc::model
