// Laws of the reference model alone (no LibTorch involved): each draws its inputs and
// RC_ASSERTs one law. Registered in properties/registry.cc.
#pragma once

namespace sc::props {

// Rank ranges tile each padded bucket and each parameter element is owned by exactly one rank.
void shard_ownership_law();
// The layout follows the alignment, order, padding and bucket rules.
void layout_rules_law();
// The offload plan is the shortest prefix reaching the target, monotone in the fraction.
void offload_prefix_law();

}  // namespace sc::props
