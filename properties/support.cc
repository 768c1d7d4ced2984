#include "properties/support.h"

#include <cstdlib>
#include <iostream>

#include "sim/port/device.h"

namespace sc::props {

const sut::Behaviour& variant_under_test() {
  static const sut::Behaviour kVariant = [] {
    const char* name = std::getenv("SC_VARIANT");
    if (name == nullptr || *name == '\0') return sut::fully_patched();
    auto b = sut::behaviour_by_name(name);
    if (!b) {
      std::cerr << "SC_VARIANT=" << name << " names no variant\n";
      std::exit(2);
    }
    return *b;
  }();
  return kVariant;
}

torch::Device device() {
  static const torch::Device kDevice = sut::pick_device();
  return kDevice;
}

}  // namespace sc::props
