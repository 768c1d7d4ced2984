// The initial values of a case's parameters: drawn from a seed, or given, and held as fp32 values
// that are exactly representable in each parameter's dtype. Every system under test starts a
// case from these very values, so the port and the real code can be compared bit for bit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/spec.h"

namespace sc::rig {

// Per case parameter (both instances, case order), its flattened values.
using ParamValues = std::vector<std::vector<float>>;

// Values from `seed`: each element uniform in [-1, 1) (splitmix64, 24 bits), rounded to the
// parameter's dtype. The same seed gives the same values on every machine and device.
ParamValues initial_values(const model::CaseSpec& spec, uint64_t seed);

// Empty when `values` has one vector per parameter of `spec`, of its element count, each value
// representable in its dtype; else a message naming the first mismatch.
std::optional<std::string> check_initial_values(const model::CaseSpec& spec,
                                                const ParamValues& values);

}  // namespace sc::rig
