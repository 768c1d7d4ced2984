#include "sim/port/streams.h"

#include <map>

#include "shardcheck/config.h"
#if SC_HAVE_CUDA && SC_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace sc::sut {

int ImmediateStreams::new_stream(const std::string& name) {
  (void)name;
  return streams_++;
}

void ImmediateStreams::enqueue(int stream, const std::string& what,
                               const std::vector<torch::Tensor>& reads,
                               const std::vector<torch::Tensor>& writes, std::function<void()> fn,
                               bool host_synchronous) {
  (void)stream;
  (void)what;
  (void)reads;
  (void)writes;
  (void)host_synchronous;
  fn();
}

int ImmediateStreams::record_event(int stream) {
  (void)stream;
  return events_++;
}

#if SC_HAVE_CUDA && SC_TORCH_CUDA

namespace {

// Stream 1 is the current stream at creation; new ones come from the pool.
class CudaStreams : public Streams {
 public:
  CudaStreams() { streams_.push_back(c10::cuda::getCurrentCUDAStream()); }
  int new_stream(const std::string& name) override {
    (void)name;
    streams_.push_back(c10::cuda::getStreamFromPool());
    return static_cast<int>(streams_.size());
  }
  void enqueue(int s, const std::string& what, const std::vector<torch::Tensor>& reads,
               const std::vector<torch::Tensor>& writes, std::function<void()> fn,
               bool host_synchronous) override {
    (void)what;
    (void)reads;
    (void)writes;
    (void)host_synchronous;
    if (s == kHost) {
      fn();
      return;
    }
    c10::cuda::CUDAStreamGuard guard(stream(s));
    fn();
  }
  int record_event(int s) override {
    events_.push_back(std::make_unique<at::cuda::CUDAEvent>());
    events_.back()->record(stream(s));
    return static_cast<int>(events_.size()) - 1;
  }
  void wait_event(int s, int e) override { events_.at(static_cast<size_t>(e))->block(stream(s)); }
  void synchronize_event(int e) override { events_.at(static_cast<size_t>(e))->synchronize(); }
  void synchronize() override { c10::cuda::device_synchronize(); }

 private:
  c10::cuda::CUDAStream stream(int s) const { return streams_.at(static_cast<size_t>(s - 1)); }
  std::vector<c10::cuda::CUDAStream> streams_;
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events_;
};

}  // namespace

std::unique_ptr<Streams> make_cuda_streams() { return std::make_unique<CudaStreams>(); }

#else

std::unique_ptr<Streams> make_cuda_streams() { return nullptr; }

#endif

}  // namespace sc::sut
