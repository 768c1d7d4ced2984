// Behaviour sets of the port: upstream Megatron-Core (d8b71082) and named deviations from it.
//
// Every deviation from upstream is one named flag here and one named variant; the port consults
// only these flags. `upstream` has every flag at its upstream value.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sc::sut {

// One variant of the port.
struct Behaviour {
  std::string name;
  // PR #6982: `_build_model_and_main_param_groups` detaches fp32 model params before slicing.
  bool detach_fp32_shard = false;
};

// Every named variant, `upstream` first.
const std::vector<Behaviour>& all_behaviours();
// The variant called `name`, or nullopt.
std::optional<Behaviour> behaviour_by_name(std::string_view name);
// Megatron-Core at d8b71082 as it is.
Behaviour upstream();
// The fully patched variant: every proposed fix applied.
Behaviour fully_patched();

}  // namespace sc::sut
