// A cache of large host memory blocks behind LibTorch's CPU allocator. A case with a large DP
// size zero-allocates parameter and grad buffers of tens to hundreds of MB (the 2^16 busbw
// padding times dp); glibc maps every such block afresh and unmaps it when the case ends, so
// each case paid page faults on every page and a slow munmap, and property runs spent most of
// their time in the kernel. Freed blocks of 1 MiB and more are kept (up to 2 GiB in all) and
// handed out again for the same size. What is allocated, and when, does not change.
#pragma once

#include <cstdint>

namespace sc::rig {

// Installs the cache as LibTorch's CPU allocator, once per process. Not under AddressSanitizer,
// which must see every block freed, nor with SC_HOST_BLOCK_CACHE=0 in the environment.
void keep_large_host_blocks();

// Blocks handed out again from the cache so far (a check that it is in use).
int64_t host_blocks_reused();

}  // namespace sc::rig
