// A malformed case file: what() names the field.
#pragma once

#include <stdexcept>

namespace sc::props {

struct CaseFileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace sc::props
