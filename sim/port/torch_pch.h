// The LibTorch headers the port needs, in one place so that they can be precompiled.
//
// Only the tensor library and the optimizers: the port needs no modules, data or serialization.
#pragma once

#include <ATen/ATen.h>
#include <torch/optim.h>
#include <torch/types.h>
