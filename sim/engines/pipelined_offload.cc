#include "sim/engines/pipelined_offload.h"

#include <algorithm>
#include <string>

#include "sim/port/placement.h"
#include "sim/port/streams.h"

namespace sc::engines {

namespace {

// Staging buffers per pool: one in flight while one is worked on.
constexpr int kStagingSlots = 2;

}  // namespace

std::unique_ptr<sut::HostOffloadEngine> PipelinedOffload::fresh() const {
  return std::make_unique<PipelinedOffload>(chunk_);
}

std::unique_ptr<torch::optim::Optimizer> PipelinedOffload::make_host_optimizer(
    std::vector<torch::optim::OptimizerParamGroup> groups) const {
  return std::make_unique<FusedHostAdamW>(std::move(groups));
}

bool PipelinedOffload::takes_host_step(const sut::HybridDeviceOptimizer& hdo) const {
  if (chunk_ <= 0 || hdo.host_optimizers().empty()) return false;
  auto has_grad = [&hdo](const torch::Tensor& inner) {
    return hdo.host_grad_source(inner).defined();
  };
  for (const auto& opt : hdo.host_optimizers()) {
    const auto* fused = dynamic_cast<const FusedHostAdamW*>(opt.get());
    if (!fused || !fused->external_step_applies(has_grad)) return false;
  }
  return true;
}

int64_t PipelinedOffload::transfer_buffer_bytes() const {
  int64_t bytes = 0;
  for (const auto& [k, t] : staging_) bytes += t.numel() * t.element_size();
  return bytes;
}

torch::Tensor PipelinedOffload::staging(const sut::HybridDeviceOptimizer& hdo, int pool, int slot,
                                        torch::ScalarType dtype) {
  torch::Tensor& t = staging_[{pool, slot, static_cast<int>(dtype)}];
  if (!t.defined() || t.numel() < chunk_) {
    t = sut::mark_host(torch::empty({chunk_}, torch::TensorOptions().dtype(dtype)),
                       hdo.accelerator());
    if (hdo.accelerator().is_cuda()) t = t.pin_memory();
    hdo.streams().name(t, pool == 1 ? "parameter staging buffer " + std::to_string(slot)
                          : slot < kStagingSlots ? "grad staging buffer " + std::to_string(slot)
                                                 : std::string("grad widening buffer"));
  }
  return t;
}

std::vector<FusedHostAdamW::Span> PipelinedOffload::begin_step(sut::HybridDeviceOptimizer& hdo) {
  std::vector<FusedHostAdamW::Span> spans;
  for (const auto& opt : hdo.host_optimizers()) {
    auto more = static_cast<FusedHostAdamW&>(*opt).begin_external_step(
        [&hdo](const torch::Tensor& inner) { return hdo.host_grad_source(inner).defined(); });
    for (auto& span : more) {
      // State made now is made like its parameter (`zeros_like`): on the host.
      if (span.fresh) {
        sut::mark_host(span.exp_avg, hdo.accelerator());
        sut::mark_host(span.exp_avg_sq, hdo.accelerator());
      }
      spans.push_back(std::move(span));
    }
  }
  return spans;
}

std::vector<PipelinedOffload::Tensors> PipelinedOffload::flat_views(
    const sut::HybridDeviceOptimizer& hdo, const std::vector<FusedHostAdamW::Span>& spans) {
  std::vector<Tensors> tensors;
  tensors.reserve(spans.size());
  for (const auto& span : spans) {
    const torch::Tensor gpu_param = hdo.accelerator_param_of(span.param);
    for (const torch::Tensor& t : {span.param, span.exp_avg, span.exp_avg_sq}) {
      sut::require_place(t, sut::Place::kHost, hdo.accelerator(), "the pipelined host AdamW",
                         [&] { return "a tensor of " + hdo.label(gpu_param); });
    }
    tensors.push_back({&span, gpu_param, hdo.host_grad_source(span.param).detach().reshape({-1}),
                       gpu_param.detach().reshape({-1}), span.param.reshape({-1}),
                       span.exp_avg.reshape({-1}), span.exp_avg_sq.reshape({-1})});
  }
  return tensors;
}

int PipelinedOffload::copy_grad_chunk(sut::HybridDeviceOptimizer& hdo, const Piece& piece,
                                      size_t k) {
  const int64_t n = piece.hi - piece.lo;
  // In the grad's own dtype: a 16-bit grad crosses the link as 16 bits.
  const torch::Tensor src = piece.tensors->grad.narrow(0, piece.lo, n);
  const int slot = static_cast<int>(k % kStagingSlots);
  const torch::Tensor dst = staging(hdo, 0, slot, src.scalar_type()).narrow(0, 0, n);
  hdo.streams().enqueue(hdo.d2h_stream(), "D2H grad chunk", {src}, {dst},
                        [dst, src]() mutable { dst.copy_(src, true); });
  return hdo.streams().record_event(hdo.d2h_stream());
}

int PipelinedOffload::step_chunk(sut::HybridDeviceOptimizer& hdo, const Piece& piece, size_t k,
                                 const std::vector<int>& h2d_done) {
  sut::Streams& st = hdo.streams();
  const Tensors& t = *piece.tensors;
  const int64_t lo = piece.lo, n = piece.hi - piece.lo;
  const int slot = static_cast<int>(k % kStagingSlots);
  const torch::Tensor grad = staging(hdo, 0, slot, t.grad.scalar_type()).narrow(0, 0, n);
  const torch::Tensor master = t.master.narrow(0, lo, n);
  const torch::Tensor m = t.exp_avg.narrow(0, lo, n);
  const torch::Tensor v = t.exp_avg_sq.narrow(0, lo, n);
  // A 16-bit accelerator parameter: the host casts into a staging buffer, which the H2D copy
  // of the chunk two before may still be reading.
  const bool narrow_copy = t.gpu_param.scalar_type() != torch::kFloat;
  torch::Tensor out;
  if (narrow_copy) {
    if (k >= kStagingSlots && !hdo.behaviour().has(sut::Deviation::kPipeNoStagingWait)) {
      st.synchronize_event(h2d_done[k - kStagingSlots]);
    }
    out = staging(hdo, 1, slot, t.gpu_param.scalar_type()).narrow(0, 0, n);
  }
  std::vector<torch::Tensor> writes{master, m, v};
  if (narrow_copy) writes.push_back(out);
  const FusedHostAdamW::Span* span = t.span;
  // Where a 16-bit grad is widened (host work only, so one buffer serves every chunk).
  const torch::Tensor scratch = grad.scalar_type() == torch::kFloat
                                    ? torch::Tensor()
                                    : staging(hdo, 0, kStagingSlots, torch::kFloat).narrow(0, 0, n);
  st.enqueue(sut::Streams::kHost, "host AdamW chunk", {grad, master, m, v}, writes,
             [span, lo, n, grad, scratch, master, out]() mutable {
               // A 16-bit grad widened on the host: exact, every 16-bit value is an fp32 one.
               if (grad.scalar_type() != torch::kFloat) scratch.copy_(grad);
               const float* g = grad.scalar_type() == torch::kFloat ? grad.data_ptr<float>()
                                                                    : scratch.data_ptr<float>();
               FusedHostAdamW::step_span(*span, g, lo, lo + n);
               if (out.defined()) out.copy_(master);  // round to nearest even, as on a device
             });
  const torch::Tensor src = narrow_copy ? out : master;
  const torch::Tensor dst = t.gpu_param.narrow(0, lo, n);
  st.enqueue(hdo.h2d_stream(), "H2D parameter chunk", {src}, {dst},
             [dst, src]() mutable { dst.copy_(src, true); },
             !narrow_copy && hdo.pageable_host_copy(span->param, t.gpu_original));
  return st.record_event(hdo.h2d_stream());
}

void PipelinedOffload::host_step(sut::HybridDeviceOptimizer& hdo) {
  sut::Streams& st = hdo.streams();
  const std::vector<FusedHostAdamW::Span> spans = begin_step(hdo);
  const std::vector<Tensors> tensors = flat_views(hdo, spans);
  std::vector<Piece> pieces;
  for (const Tensors& t : tensors) {
    // PIPE-first-dim: the first dimension's length taken for the element count.
    const int64_t numel =
        hdo.behaviour().has(sut::Deviation::kPipeFirstDimOnly) && t.gpu_original.dim() > 0
            ? t.gpu_original.size(0)
            : t.master.numel();
    for (int64_t lo = 0; lo < numel; lo += chunk_) {
      pieces.push_back({&t, lo, std::min(numel, lo + chunk_)});
    }
  }
  std::vector<int> d2h_done(pieces.size()), h2d_done(pieces.size());
  // The copies back run after the current stream's work, as the port's do.
  st.wait_stream(hdo.h2d_stream(), sut::Streams::kCurrent);
  if (!pieces.empty()) d2h_done[0] = copy_grad_chunk(hdo, pieces[0], 0);
  for (size_t k = 0; k < pieces.size(); ++k) {
    // The next chunk's copy runs during this pass.
    if (k + 1 < pieces.size()) d2h_done[k + 1] = copy_grad_chunk(hdo, pieces[k + 1], k + 1);
    if (!hdo.behaviour().has(sut::Deviation::kPipeNoChunkWait)) st.synchronize_event(d2h_done[k]);
    h2d_done[k] = step_chunk(hdo, pieces[k], k, h2d_done);
  }
  st.wait_stream(sut::Streams::kCurrent, hdo.h2d_stream());
}

}  // namespace sc::engines
