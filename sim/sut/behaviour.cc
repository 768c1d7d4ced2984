#include "sim/sut/behaviour.h"

namespace sc::sut {

const std::vector<Behaviour>& all_behaviours() {
  static const std::vector<Behaviour> kAll = [] {
    Behaviour up{"upstream"};
    Behaviour pr6982 = up;
    pr6982.name = "pr6982";
    pr6982.detach_fp32_shard = true;
    return std::vector<Behaviour>{up, pr6982};
  }();
  return kAll;
}

std::optional<Behaviour> behaviour_by_name(std::string_view name) {
  for (const Behaviour& b : all_behaviours()) {
    if (b.name == name) return b;
  }
  return std::nullopt;
}

Behaviour upstream() { return all_behaviours().front(); }

Behaviour fully_patched() { return *behaviour_by_name("pr6982"); }

}  // namespace sc::sut
