// The stateful property (rc::state): a case with the hybrid optimizer, a dense DP rank and a
// sequence of commands (Step, SetLr, SetWd, ZeroGrad, SaveState, Rebuild+LoadState,
// ReloadModelParams), drawn; and the sequence run against the reference, compared bit for bit
// after every command.
#pragma once

#include "properties/case_file.h"
#include "sim/port/behaviour.h"

namespace sc::props {

CaseInputs draw_hybrid_state_case();
void check_hybrid_state_case(const CaseInputs& in, const sut::Behaviour& behaviour);

}  // namespace sc::props
