#include "sim/rig/stream_sim.h"

#include <utility>

namespace sc::rig {

using model::streams::Policy;
using model::streams::Program;

SimulatedStreams::SimulatedStreams(Policy policy, uint64_t seed)
    : policy_(policy), rng_(seed) {
  program_.add_stream("current");
}

int SimulatedStreams::new_stream(const std::string& name) { return program_.add_stream(name); }

void SimulatedStreams::name(const torch::Tensor& tensor, const std::string& label) {
  if (!tensor.defined() || !tensor.has_storage()) return;
  if (names_.emplace(tensor.storage().unsafeGetStorageImpl(), label).second)
    keep_.push_back(tensor.storage());
}

model::streams::Region SimulatedStreams::region(const torch::Tensor& tensor) {
  const void* storage = tensor.storage().unsafeGetStorageImpl();
  auto it = names_.find(storage);
  if (it == names_.end()) {
    it = names_.emplace(storage, "tensor " + std::to_string(names_.size())).first;
    keep_.push_back(tensor.storage());
  }
  const int64_t begin = tensor.storage_offset() * static_cast<int64_t>(tensor.element_size());
  return model::streams::Region{
      it->second, begin, begin + tensor.numel() * static_cast<int64_t>(tensor.element_size())};
}

bool SimulatedStreams::ready(size_t i) const {
  for (int p : program_.predecessors(static_cast<int>(i))) {
    if (!done_[static_cast<size_t>(p)]) return false;
  }
  return true;
}

void SimulatedStreams::run(size_t i) {
  done_[i] = true;
  fns_[i]();
  fns_[i] = nullptr;
}

void SimulatedStreams::run_required() {
  const std::vector<bool> required = program_.required_by_host();
  for (;;) {
    bool missing = false;
    std::vector<size_t> candidates;
    for (size_t i = 0; i < done_.size(); ++i) {
      if (done_[i]) continue;
      missing = missing || required[i];
      if (!ready(i)) continue;
      // Adversarial: only what the host needs; the others wait as long as they legally can.
      if (policy_ == Policy::kAdversarial && !required[i]) continue;
      candidates.push_back(i);
    }
    if (!missing) {
      // Random: sometimes run a few ready operations early.
      if (policy_ != Policy::kRandom || candidates.empty() || rng_.below(2) == 0) return;
    }
    if (candidates.empty()) return;
    size_t pick = candidates.front();
    if (policy_ == Policy::kAdversarial) pick = candidates.back();  // the newest first
    if (policy_ == Policy::kRandom) pick = candidates[rng_.below(candidates.size())];
    run(pick);
  }
}

void SimulatedStreams::enqueue(int stream, const std::string& what,
                               const std::vector<torch::Tensor>& reads,
                               const std::vector<torch::Tensor>& writes, std::function<void()> fn,
                               bool host_synchronous) {
  model::streams::Op op;
  op.stream = stream;
  op.what = what;
  for (const auto& t : reads) {
    if (t.defined()) op.reads.push_back(region(t));
  }
  for (const auto& t : writes) {
    if (t.defined()) op.writes.push_back(region(t));
  }
  op.host_synchronous = host_synchronous;
  program_.enqueue(std::move(op));
  fns_.push_back(std::move(fn));
  done_.push_back(false);
  if (policy_ == Policy::kEager || stream == Program::kHost || host_synchronous) {
    // Host work and synchronous copies are required by the host now, so run_required runs them
    // after what they depend on. Eager: everything earlier has already run, so this one runs.
    run_required();
    if (!done_.back()) run(done_.size() - 1);
  }
}

int SimulatedStreams::record_event(int stream) { return program_.record_event(stream); }

void SimulatedStreams::wait_event(int stream, int event) { program_.wait_event(stream, event); }

void SimulatedStreams::synchronize_event(int event) {
  program_.synchronize_event(event);
  run_required();
}

void SimulatedStreams::synchronize() {
  program_.synchronize_all();
  run_required();
}

std::vector<std::string> SimulatedStreams::race_reports() const {
  std::vector<std::string> out;
  for (const auto& r : program_.races()) out.push_back(model::streams::describe(program_, r));
  return out;
}

}  // namespace sc::rig
