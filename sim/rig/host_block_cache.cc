#include "sim/rig/host_block_cache.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace sc::rig {

namespace {

constexpr size_t kAlignment = 64;  // LibTorch's CPU alignment
constexpr size_t kSmallest = size_t{1} << 20;
constexpr size_t kMostKept = size_t{2} << 30;

std::atomic<int64_t> g_reused{0};

// The data pointer is the DataPtr's context (so raw_allocate works too); the sizes of the large
// blocks handed out are kept beside them.
class HostBlockCache final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    void* data = take(bytes);
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  static HostBlockCache& instance() {
    static HostBlockCache* cache = new HostBlockCache();  // never destroyed: blocks outlive main
    return *cache;
  }

 private:
  void* take(size_t bytes) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes >= kSmallest) {
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* data = it->second.back();
        it->second.pop_back();
        kept_ -= bytes;
        in_use_[data] = bytes;
        g_reused.fetch_add(1, std::memory_order_relaxed);
        return data;
      }
    }
    void* data = nullptr;
    if (posix_memalign(&data, kAlignment, bytes == 0 ? kAlignment : bytes) != 0) {
      throw std::bad_alloc();
    }
    if (bytes >= kSmallest) in_use_[data] = bytes;
    return data;
  }

  static void release(void* data) { instance().give_back(data); }

  void give_back(void* data) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = in_use_.find(data);
    if (it != in_use_.end()) {
      const size_t bytes = it->second;
      in_use_.erase(it);
      if (kept_ + bytes <= kMostKept) {
        free_[bytes].push_back(data);
        kept_ += bytes;
        return;
      }
    }
    std::free(data);
  }

  mutable std::mutex mutex_;
  mutable std::map<size_t, std::vector<void*>> free_;  // by size
  mutable std::map<void*, size_t> in_use_;             // large blocks handed out
  mutable size_t kept_ = 0;
};

}  // namespace

void keep_large_host_blocks() {
#if defined(__SANITIZE_ADDRESS__)
  return;
#else
  static std::once_flag once;
  std::call_once(once, [] {
    const char* off = std::getenv("SC_HOST_BLOCK_CACHE");
    if (off != nullptr && std::strcmp(off, "0") == 0) return;
    c10::SetCPUAllocator(&HostBlockCache::instance(), /*priority=*/1);
  });
#endif
}

int64_t host_blocks_reused() { return g_reused.load(std::memory_order_relaxed); }

}  // namespace sc::rig
