#include "sim/port/placement.h"

#include <mutex>
#include <unordered_map>

namespace sc::sut {

namespace {

// The storages that play host memory while the CPU stands in for the accelerator. Each entry
// holds a weak reference: a storage's memory is freed as usual, but its StorageImpl object stays
// allocated while the entry lives, so no new storage can take its address and inherit its
// place. Entries of dead storages are dropped as the table grows.
class HostStorages {
 public:
  void add(const c10::Storage& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (table_.size() >= prune_at_) {
      for (auto it = table_.begin(); it != table_.end();) {
        it = it->second.expired() ? table_.erase(it) : std::next(it);
      }
      prune_at_ = 2 * table_.size() + 1024;
    }
    table_.emplace(s.unsafeGetStorageImpl(), s.getWeakStorageImpl());
  }
  bool contains(const c10::Storage& s) const {
    std::lock_guard<std::mutex> lock(mu_);
    return table_.count(s.unsafeGetStorageImpl()) != 0;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<const c10::StorageImpl*, c10::weak_intrusive_ptr<c10::StorageImpl>> table_;
  size_t prune_at_ = 1024;
};

HostStorages& host_storages() {
  static HostStorages* table = new HostStorages();  // never destroyed: used until exit
  return *table;
}

}  // namespace

const char* place_name(Place place) { return place == Place::kHost ? "host" : "accelerator"; }

Place place_of(const torch::Tensor& tensor, const torch::Device& accelerator) {
  TORCH_CHECK(tensor.defined(), "place_of: an undefined tensor has no place");
  if (accelerator.is_cuda()) return tensor.is_cuda() ? Place::kAccelerator : Place::kHost;
  return tensor.has_storage() && host_storages().contains(tensor.storage()) ? Place::kHost
                                                                            : Place::kAccelerator;
}

const torch::Tensor& mark_host(const torch::Tensor& tensor, const torch::Device& accelerator) {
  TORCH_CHECK(tensor.defined() && tensor.has_storage(), "mark_host: the tensor has no storage");
  if (!accelerator.is_cuda()) host_storages().add(tensor.storage());
  return tensor;
}

torch::Tensor to_place(const torch::Tensor& tensor, Place place, const torch::Device& accelerator) {
  if (accelerator.is_cuda()) {
    return tensor.to(place == Place::kHost ? torch::Device(torch::kCPU) : accelerator);
  }
  if (place_of(tensor, accelerator) == place) return tensor;
  torch::Tensor copy = tensor.clone();
  if (place == Place::kHost) mark_host(copy, accelerator);
  return copy;
}

torch::Tensor clone_in_place(const torch::Tensor& tensor, const torch::Device& accelerator) {
  torch::Tensor copy = tensor.clone();
  if (place_of(tensor, accelerator) == Place::kHost) mark_host(copy, accelerator);
  return copy;
}

void require_place(const torch::Tensor& tensor, Place required, const torch::Device& accelerator,
                   const std::string& kernel, const std::function<std::string()>& what) {
  if (!tensor.defined()) return;
  const Place p = place_of(tensor, accelerator);
  TORCH_CHECK(p == required, "RuntimeError: Expected all tensors to be on the same device: ",
              kernel, " runs on the ", place_name(required), " but ", what(), " is on the ",
              place_name(p));
}

}  // namespace sc::sut
