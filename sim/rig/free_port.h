// A TCP port for a rendezvous of ranks on this machine (the port's multi-process mode, the real
// code's real ranks).
#pragma once

#include <string>

namespace sc::rig {

// A TCP port on `addr` that was free a moment ago (0 when none could be bound). Another process
// may take it before the rendezvous binds it: callers that can, retry with a fresh one.
int pick_free_port(const std::string& addr);

}  // namespace sc::rig
