// Shared plumbing of the property files: the variant under test and the device.
//
// The variant comes from the environment variable SC_VARIANT (default: the fully patched one),
// so that one binary checks upstream, fixes and mutants alike.
#pragma once

#include "sim/port/behaviour.h"
#include "sim/port/torch_pch.h"

namespace sc::props {

// The behaviour named by SC_VARIANT, or the fully patched one; aborts on an unknown name.
const sut::Behaviour& variant_under_test();
// The accelerator for diff properties (sut::pick_device()).
torch::Device device();

}  // namespace sc::props
