#include "sim/rig/megatron_world.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "sim/rig/free_port.h"

namespace sc::rig {

MegatronWorldFailed::MegatronWorldFailed(int r, const std::string& what)
    : std::runtime_error("rank " + std::to_string(r) + ": " + what), rank(r) {}

namespace {

double collective_timeout_s() {
  const char* text = std::getenv("SC_MEGATRON_COLLECTIVE_TIMEOUT");
  if (text == nullptr || *text == '\0') return 60;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds > 0)) {
    throw MegatronUnavailable(std::string("SC_MEGATRON_COLLECTIVE_TIMEOUT must be a positive "
                                          "number of seconds, got '") +
                              text + "'");
  }
  return seconds;
}

// SC_MEGATRON_WORLD_PORT: the port of a world's first rendezvous (tests take one that is busy,
// to see the next try's fresh port); 0, a free one, when unset.
int first_port() {
  const char* text = std::getenv("SC_MEGATRON_WORLD_PORT");
  return text != nullptr ? std::atoi(text) : 0;
}

}  // namespace

MegatronWorld::MegatronWorld(const MegatronTarget& target, int size) {
  if (size < 1) throw std::invalid_argument("a world has at least one rank");
  // The port was free when picked, but another process may bind it before rank 0's store does:
  // a rendezvous that fails is tried again on a fresh port, twice at most.
  for (int attempt = 1;; ++attempt) {
    try {
      join(target, size, attempt == 1 ? first_port() : 0);
      return;
    } catch (const MegatronUnavailable& e) {
      const bool rendezvous = std::string(e.what()).rfind("world_failed:", 0) == 0;
      if (!rendezvous || attempt == 3) throw;
      workers_.clear();
      failed_ = false;
    }
  }
}

void MegatronWorld::join(const MegatronTarget& target, int size, int given_port) {
  const std::string address = "127.0.0.1";
  const int port = given_port > 0 ? given_port : pick_free_port(address);
  if (port == 0) throw MegatronWorldFailed(0, "no free TCP port on " + address);
  for (int r = 0; r < size; ++r) {
    workers_.push_back(std::make_unique<MegatronWorker>(
        target, WorldPlace{r, size, address + ":" + std::to_string(port), collective_timeout_s()}));
  }
  // The rendezvous: every worker starts at once, rank 0 holding the store. Spawned from this
  // thread, which they die with; the threads of on_every_rank only wait for them.
  for (auto& w : workers_) w->spawn();
  on_every_rank([this](int r) { worker(r).hello(); });
}

MegatronWorld& MegatronWorld::of(const MegatronTarget& target, int size) {
  static std::map<std::tuple<std::string, bool, int>, std::unique_ptr<MegatronWorld>> worlds;
  auto& w = worlds[{target.tree, target.cuda, size}];
  if (!w || w->failed()) {
    w.reset();  // the old world's workers go before the new ones start
    w = std::make_unique<MegatronWorld>(target, size);
  }
  return *w;
}

void MegatronWorld::on_every_rank(const std::function<void(int rank)>& fn) {
  if (failed_) throw MegatronWorldFailed(0, "the world was stopped after an earlier failure");
  struct Failure {
    int rank;
    std::exception_ptr error;
    bool lost;  // the rank's worker exited or stopped answering
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Failure> failures;  // those before the world was stopped
  int done = 0;
  bool stopped = false;
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r) {
    threads.emplace_back([&, r] {
      std::optional<Failure> failure;
      try {
        fn(r);
      } catch (const MegatronWorkerLost&) {
        failure = Failure{r, std::current_exception(), true};
      } catch (...) {
        failure = Failure{r, std::current_exception(), false};
      }
      const std::lock_guard<std::mutex> lock(mutex);
      if (failure && !stopped) failures.push_back(*failure);
      ++done;
      changed.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return done == size() || !failures.empty(); });
    // One rank's failure may be another's doing: a rank that dies makes its peers' collectives
    // fail at once. A moment for every rank to report, then the rest are stopped.
    changed.wait_for(lock, std::chrono::seconds(1), [&] { return done == size(); });
    if (done < size()) {
      stopped = true;
      for (auto& w : workers_) w->kill_now();
    }
  }
  for (auto& t : threads) t.join();
  if (failures.empty()) return;
  // The cause: a rank whose worker was lost before one whose collective saw it go.
  const auto lost =
      std::find_if(failures.begin(), failures.end(), [](const Failure& f) { return f.lost; });
  if (stopped || lost != failures.end() || !collectives_in_step()) {
    failed_ = true;
    for (auto& w : workers_) w->kill_now();
  }
  const Failure& cause = lost != failures.end() ? *lost : failures.front();
  try {
    std::rethrow_exception(cause.error);
  } catch (const MegatronUnavailable&) {
    throw;
  } catch (const std::exception& e) {
    throw MegatronWorldFailed(cause.rank, e.what());
  }
}

bool MegatronWorld::collectives_in_step() {
  std::vector<nlohmann::json> counts;
  try {
    for (auto& w : workers_)
      counts.push_back(w->request({{"op", "collective_counts"}}).at("groups"));
  } catch (const std::exception&) {
    return false;  // a worker that cannot say is not trusted to be in step
  }
  return same_collective_counts(counts);
}

bool same_collective_counts(const std::vector<nlohmann::json>& counts_by_rank) {
  std::map<std::string, uint64_t> first_seen;
  for (const nlohmann::json& counts : counts_by_rank) {
    for (const auto& [group, count] : counts.items()) {
      const auto [at, fresh] = first_seen.emplace(group, count.get<uint64_t>());
      if (!fresh && at->second != count.get<uint64_t>()) return false;
    }
  }
  return true;
}

}  // namespace sc::rig
