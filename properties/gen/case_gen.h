// RapidCheck generators for distributed-optimizer cases, with explicit size limits.
//
// case_spec() draws 1 to 8 parameters (bf16/fp16/fp32 with keep-fp32 marks, 1-D to 4-D, 1 to
// 70,000 elements, sizes rarely multiples of 64, shared embeddings, experts, three weight-decay
// groups, two model chunks) and DP sizes 1 to 256 (odd and prime included), bucket sizes,
// precision-aware on/off and offload on/off. Shrinking goes toward one small bf16 parameter at
// dp 1 with offload on: the seed's configuration is the simplest one.
#pragma once

#include <ostream>

#include <rapidcheck.h>

#include "model/grad_scaler.h"
#include "model/spec.h"

namespace sc::gen {

// One parameter, named `name`.
rc::Gen<model::ParamSpec> param_spec(std::string name);
// A DP size from 1 to 256, biased to small, odd and prime sizes.
rc::Gen<int> dp_size();
// A whole case; every case passes model::validate().
rc::Gen<model::CaseSpec> case_spec();

// Whether drawn cases may need Transformer Engine (precision-aware, or the hybrid optimizer's
// FusedAdam). Real Megatron under test runs without it: then every case is the no-TE
// configuration. On by default: a quarter of the cases are drawn without it anyway.
void set_transformer_engine_available(bool available);

}  // namespace sc::gen

namespace sc::model {
// RapidCheck's printers for counterexamples: a case, one entry per parameter; a loss scaler's
// configuration by its fields.
void showValue(const CaseSpec& spec, std::ostream& os);
void showValue(const GradScalerConfig& config, std::ostream& os);
}  // namespace sc::model
