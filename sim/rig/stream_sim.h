// The simulator's streams on a machine without a GPU: every operation the port enqueues is
// recorded in a model::streams::Program with the storage regions it reads and writes, and run in
// an order chosen by a policy and a seed among those that happens-before allows. A tensor's region
// is the byte range of its view in its storage; storages are named for reports.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/streams.h"
#include "sim/rig/rng.h"
#include "sim/port/streams.h"

namespace sc::rig {

class SimulatedStreams : public sut::Streams {
 public:
  explicit SimulatedStreams(model::streams::Policy policy = model::streams::Policy::kEager,
                            uint64_t seed = 0);
  int new_stream(const std::string& name) override;
  void enqueue(int stream, const std::string& what, const std::vector<torch::Tensor>& reads,
               const std::vector<torch::Tensor>& writes, std::function<void()> fn,
               bool host_synchronous = false) override;
  int record_event(int stream) override;
  void wait_event(int stream, int event) override;
  void synchronize_event(int event) override;
  void synchronize() override;
  void name(const torch::Tensor& tensor, const std::string& label) override;

  const model::streams::Program& program() const { return program_; }
  // Every race of the program so far, described.
  std::vector<std::string> race_reports() const;

 private:
  model::streams::Region region(const torch::Tensor& tensor);
  // Runs pending operations until every one the host must have seen has run; the policy decides
  // which others run too, and in which order.
  void run_required();
  void run(size_t i);
  bool ready(size_t i) const;

  model::streams::Policy policy_;
  SplitMix64 rng_;
  model::streams::Program program_;
  std::vector<std::function<void()>> fns_;
  std::vector<bool> done_;
  std::map<const void*, std::string> names_;
  // Every storage named so far, kept alive: a freed storage's address, reused by a new tensor,
  // would otherwise make two tensors one buffer.
  std::vector<c10::Storage> keep_;
};

}  // namespace sc::rig
