// Round-to-nearest-even from fp32 to bf16 and fp16, returned as the fp32 value of the result.
//
// These are the roundings of `tensor.to(bfloat16)` and `tensor.to(float16)` (LibTorch's
// c10::BFloat16 and c10::Half conversions): NaN stays NaN, overflow goes to infinity, fp16
// subnormals are kept.
#pragma once

#include "model/dtype.h"

namespace sc::model {

// `value` rounded to bf16 (8 exponent, 7 mantissa bits), ties to even.
float round_to_bf16(float value);
// `value` rounded to IEEE binary16, ties to even.
float round_to_fp16(float value);
// `value` rounded to `dtype` (fp32 and fp64: unchanged).
float round_to(DType dtype, float value);

// The bf16 half of an fp32 master kept as "bf16 parameter + int16 remainder" (Transformer
// Engine's FusedAdam with store_param_remainders): the high 16 bits of `value`, plus one when the
// low 16 bits are 0x8000 or more. Ties round away from zero in magnitude, not to even: the format
// must rebuild the master from the two halves alone, and a tie rounded to even leaves the high
// half ambiguous (it could be p or p - 1), so the format cannot round ties to even. NaN payloads
// are not preserved.
float bf16_half_of_split_master(float value);

}  // namespace sc::model
