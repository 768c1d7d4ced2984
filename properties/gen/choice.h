// Weighted choices that shrink toward their first entry.
//
// RapidCheck 0~1033's gen::element, gen::weightedElement and the choice inside
// gen::weightedOneOf do not shrink at all, which leaves counterexamples unminimised; these draw
// an index from gen::inRange, which shrinks toward 0, so list the simplest entry first.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include <rapidcheck.h>

namespace sc::gen {

// Index i with probability weights[i] / sum; shrinks toward 0.
inline rc::Gen<size_t> weighted_index(std::vector<size_t> weights) {
  size_t total = 0;
  for (size_t w : weights) total += w;
  return rc::gen::map(rc::gen::inRange<size_t>(0, total), [weights](size_t x) {
    size_t i = 0;
    while (x >= weights[i]) x -= weights[i++];
    return i;
  });
}

// One of the values, by weight; shrinks toward the first.
template <typename T>
rc::Gen<T> weighted_choice(std::vector<std::pair<size_t, T>> entries) {
  std::vector<size_t> weights;
  for (const auto& e : entries) weights.push_back(e.first);
  return rc::gen::map(weighted_index(weights),
                      [entries](size_t i) { return entries[i].second; });
}

// A value from one of the generators, by weight; shrinks toward the first generator, then
// within it.
template <typename T>
rc::Gen<T> weighted_one_of(std::vector<std::pair<size_t, rc::Gen<T>>> entries) {
  std::vector<size_t> weights;
  for (const auto& e : entries) weights.push_back(e.first);
  return rc::gen::mapcat(weighted_index(weights),
                         [entries](size_t i) { return entries[i].second; });
}

}  // namespace sc::gen
