// Overloaded{lambda...}: one visitor for std::visit from a lambda per alternative.
#pragma once

namespace sc::props {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace sc::props
