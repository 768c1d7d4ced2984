#include "sim/app/c10d_world.h"

#include <cstdlib>
#include <vector>

namespace sc::app {

std::string short_what(const std::exception& error) {
  const auto* c10e = dynamic_cast<const c10::Error*>(&error);
  std::string s = c10e ? c10e->what_without_backtrace() : error.what();
  const size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

std::variant<Env, std::string> read_env() {
  Env env;
  std::vector<std::string> missing;
  auto get = [&](const char* name) -> const char* {
    const char* v = std::getenv(name);
    if (!v || !*v) missing.push_back(name);
    return v;
  };
  const char* rank = get("RANK");
  const char* world = get("WORLD_SIZE");
  const char* addr = get("MASTER_ADDR");
  const char* port = get("MASTER_PORT");
  if (!missing.empty()) {
    std::string m;
    for (const auto& n : missing) m += (m.empty() ? "" : ", ") + n;
    return "--multi-process needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the "
           "environment (missing: " + m + "); use --processes=N to start a local world";
  }
  auto to_int = [](const char* s, int lo, int hi, int& out) {
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > hi) return false;
    out = static_cast<int>(v);
    return true;
  };
  if (!to_int(world, 1, 65536, env.world)) return std::string("bad WORLD_SIZE='") + world + "'";
  if (!to_int(rank, 0, env.world - 1, env.rank)) {
    return std::string("bad RANK='") + rank + "' for WORLD_SIZE=" + world;
  }
  if (!to_int(port, 1, 65535, env.port)) return std::string("bad MASTER_PORT='") + port + "'";
  const char* local = std::getenv("LOCAL_RANK");
  if (!local || !to_int(local, 0, 65535, env.local_rank)) env.local_rank = env.rank;
  env.addr = addr;
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent && std::string(agent) == "True";
  return env;
}

// Gloo adds in an order of its own; the grad parts (grad_part) sum to the same bits in any order.
void reduce_scatter(DpGroup& group, const torch::Tensor& bucket_grad, const std::string& what) {
  TORCH_CHECK(bucket_grad.scalar_type() == torch::kFloat,
              "the multi-process mode reduces fp32 grad buffers only");
  const int64_t shard = bucket_grad.numel() / group.size;
  TORCH_CHECK(shard * group.size == bucket_grad.numel(), "bucket not divisible by the DP size");
  torch::Tensor input = bucket_grad;
  torch::Tensor reduced = torch::empty({shard}, bucket_grad.options());
  group.run("reduce-scatter of " + what,
            [&](auto& pg) { pg._reduce_scatter_base(reduced, input)->wait(); });
  bucket_grad.slice(0, group.rank * shard, (group.rank + 1) * shard).copy_(reduced);
}

// The shard is copied out first, since it is a view of the buffer it is gathered into.
void all_gather(DpGroup& group, const torch::Tensor& bucket_param, const std::string& what) {
  torch::Tensor bytes = bucket_param.view(torch::kByte);
  const int64_t shard = bytes.numel() / group.size;
  torch::Tensor mine = bytes.slice(0, group.rank * shard, (group.rank + 1) * shard).clone();
  group.run("all-gather of " + what, [&](auto& pg) { pg._allgather_base(bytes, mine)->wait(); });
}

std::string store_get(c10d::Store& store, const std::string& key, const std::string& what,
                      double timeout_s) {
  try {
    const std::vector<uint8_t> v = store.get(key);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    std::ostringstream os;
    os << "no " << what << " within " << timeout_s << " s (" << short_what(e) << ")";
    throw StoreError(os.str());
  }
}

void store_set(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

c10::intrusive_ptr<c10d::Store> connect_store(const Env& env, std::chrono::milliseconds timeout,
                                              double timeout_s) {
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.port);
    so.isServer = env.rank == 0 && !env.agent_store;
    so.numWorkers = env.agent_store ? c10::nullopt : c10::optional<size_t>(env.world);
    so.waitWorkers = false;
    so.timeout = timeout;
    so.useLibUV = true;  // the server torch.distributed starts by default on 2.x, named here
    return c10::make_intrusive<c10d::TCPStore>(env.addr, so);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot reach the rendezvous store at " + env.addr + ":" +
                             std::to_string(env.port) + " within " +
                             std::to_string(timeout_s) +
                             " s: " + short_what(e));
  }
}

}  // namespace sc::app
