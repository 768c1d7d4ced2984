// Gradients cut into exact per-rank parts, so that a SUM over any data-parallel group in any order
// gives back the reduced gradient bit for bit: what every multi-process check (the port's ranks
// over c10d, the real code's ranks over torch.distributed) feeds each rank.
#pragma once

namespace sc::rig {

// The part of gradient value `grad` that DP rank `rank` of `ranks` contributes. The parts cut
// grad's significand into disjoint bit fields (rank 0 takes the leading bits; zeros, subnormals,
// infinities and NaN go whole to rank 0, the others add a zero of grad's sign), so the sum of any
// subset is exactly representable and every summation order yields exactly grad (a NaN comes
// back a NaN, quieted if it was signalling).
float grad_part(float grad, int rank, int ranks);

}  // namespace sc::rig
