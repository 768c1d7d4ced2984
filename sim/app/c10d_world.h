// The c10d plumbing of the multi-process mode: the launcher's environment, the rendezvous store,
// and a DP group's process group with Megatron's two collectives over it (Gloo on CPU; NCCL for
// CUDA tensors where LibTorch has CUDA). The job that uses them is sim/app/multiprocess.cc.
// Include only from files compiled with USE_C10D_GLOO (sim/app/CMakeLists.txt).
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <variant>

#include "shardcheck/config.h"
#if SC_TORCH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace sc::app {

// The first line of an exception's message, without LibTorch's backtrace.
std::string short_what(const std::exception& error);

// The rank's view of the world, from the launcher's environment variables.
struct Env {
  int rank = 0, world = 0, local_rank = 0;
  std::string addr;
  int port = 0;
  bool agent_store = false;  // torchrun's agent hosts the store: rank 0 is a client too
};

// RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and LOCAL_RANK, TORCHELASTIC_USE_AGENT_STORE) read
// and checked, or the message naming what is missing or bad.
std::variant<Env, std::string> read_env();

// The DP group's process group: Gloo on CPU, NCCL for CUDA tensors where LibTorch has CUDA.
struct DpGroup {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#if SC_TORCH_CUDA
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif
  std::string name;
  int size = 1, rank = 0;
  double timeout_s = 0;

  template <class F>
  void run(const std::string& what, F collective) {
    try {
#if SC_TORCH_CUDA
      if (nccl) {
        collective(*nccl);
        return;
      }
#endif
      collective(*gloo);
    } catch (const std::exception& e) {
      std::ostringstream os;
      os << what << " in " << name << " failed (collective timeout " << timeout_s
         << " s): " << short_what(e);
      throw std::runtime_error(os.str());
    }
  }
};

// Megatron's reduce-scatter of one bucket's grad buffer into this rank's shard (SUM), as
// `reduce_scatter_tensor` runs it (c10d's `_reduce_scatter_base`, which torch 2.x's Gloo has for
// fp32): the whole bucket in, this rank's shard out; the rest of the bucket keeps the local grads.
void reduce_scatter(DpGroup& group, const torch::Tensor& bucket_grad, const std::string& what);
// Megatron's all-gather of one bucket's param buffer from every rank's shard
// (`all_gather_into_tensor`, c10d's `_allgather_base`), on the buffer's bytes.
void all_gather(DpGroup& group, const torch::Tensor& bucket_param, const std::string& what);

class StoreError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The value of `key`, waiting up to the store's timeout; StoreError naming `what` when none comes.
std::string store_get(c10d::Store& store, const std::string& key, const std::string& what,
                      double timeout_s);
void store_set(c10d::Store& store, const std::string& key, const std::string& value);

// The rendezvous store: rank 0 hosts it unless a torchrun agent does; `timeout` for its
// operations (`timeout_s`, the same, for the message).
c10::intrusive_ptr<c10d::Store> connect_store(const Env& env, std::chrono::milliseconds timeout,
                                              double timeout_s);

}  // namespace sc::app
