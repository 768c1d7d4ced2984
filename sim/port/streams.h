// The streams the port's hybrid optimizer and distributed optimizer use for every copy, kernel
// and synchronisation (torch.cuda.Stream, Event, wait_stream, record_event, synchronize).
//
// Each operation names the tensors it reads and writes, so that an implementation can check or
// reorder it: on CUDA the real streams and events run it (the names are not needed there); on
// the CPU the default runs everything at once, in program order, and the simulator's
// implementation (sim/rig/stream_sim.h) records the program and runs it in an order chosen from a
// seed among those that the streams and events allow.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sim/port/torch_pch.h"

namespace sc::sut {

class Streams {
 public:
  static constexpr int kHost = 0;     // work the host thread does itself
  static constexpr int kCurrent = 1;  // torch.cuda.current_stream()

  virtual ~Streams() = default;
  // torch.cuda.Stream(): a new stream, named for reports.
  virtual int new_stream(const std::string& name) = 0;
  // Runs `fn` on stream `stream` (kHost: the host runs it now), after what the stream waits for.
  // `host_synchronous`: the host waits for it (a copy with pageable host memory).
  virtual void enqueue(int stream, const std::string& what, const std::vector<torch::Tensor>& reads,
                       const std::vector<torch::Tensor>& writes, std::function<void()> fn,
                       bool host_synchronous = false) = 0;
  // stream.record_event(); returns the event.
  virtual int record_event(int stream) = 0;
  // event.wait(stream): what `stream` runs from now on waits for event `event`.
  virtual void wait_event(int stream, int event) = 0;
  // waiter.wait_stream(waited).
  void wait_stream(int waiter, int waited) { wait_event(waiter, record_event(waited)); }
  // event.synchronize(): the host waits for event `event`.
  virtual void synchronize_event(int event) = 0;
  // torch.cuda.synchronize(): the host waits for everything.
  virtual void synchronize() = 0;
  // Names the storage of `tensor` in reports (the first name given to a storage sticks).
  virtual void name(const torch::Tensor& tensor, const std::string& label) {
    (void)tensor;
    (void)label;
  }
};

// Everything at once, in program order: the CPU standing in for a device.
class ImmediateStreams : public Streams {
 public:
  int new_stream(const std::string& name) override;
  void enqueue(int stream, const std::string& what, const std::vector<torch::Tensor>& reads,
               const std::vector<torch::Tensor>& writes, std::function<void()> fn,
               bool host_synchronous = false) override;
  int record_event(int stream) override;
  void wait_event(int stream, int event) override {
    (void)stream;
    (void)event;
  }
  void synchronize_event(int event) override { (void)event; }
  void synchronize() override {}

 private:
  int streams_ = 2;
  int events_ = 0;
};

// Torch's CUDA streams and events; nullptr when this build's LibTorch has no CUDA.
std::unique_ptr<Streams> make_cuda_streams();

}  // namespace sc::sut
