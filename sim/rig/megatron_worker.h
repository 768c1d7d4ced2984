// The process that runs real Megatron-Core code: sim/megatron/worker.py, started once per tree
// and device and fed requests one JSON line at a time (docs/megatron-worker.md).
//
// Every wait on the worker is bounded (SC_MEGATRON_TIMEOUT seconds, default 300). A worker that
// exits or stops answering is killed with its whole process group and started again on the next
// request; a worker also dies with the process that started it. The Python interpreter is
// SC_PYTHON (default /usr/bin/python3, Debian's, which python3-torch serves); the script is
// SC_MEGATRON_WORKER, else the one in this source tree.
#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace sc::rig {

// A worker's place in a world of real ranks (sim/rig/megatron_world.h); size 0: no world.
struct WorldPlace {
  int rank = 0, size = 0;
  std::string master;  // ADDR:PORT of the rendezvous
  double collective_timeout_s = 60;
};

// Which Megatron tree, on which device.
struct MegatronTarget {
  std::string tree;   // a directory holding megatron/core
  bool cuda = false;  // real CUDA (a GPU machine) instead of the host-memory device layer
};

// The worker cannot serve the tree at all: not a Megatron tree, an API that moved (named), an
// import that failed, no Python. One line.
class MegatronUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The worker exited, or gave no answer in time, while serving a request.
class MegatronWorkerLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Python raised while serving a request: "Type: message", then the traceback.
class MegatronRaised : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class MegatronWorker {
 public:
  // The worker of `target`, started on first use and kept until the process ends.
  static MegatronWorker& of(const MegatronTarget& target);

  // `world`: a real rank of a world of workers; the default serves one process.
  explicit MegatronWorker(MegatronTarget target, WorldPlace world = {});
  ~MegatronWorker();
  MegatronWorker(const MegatronWorker&) = delete;
  MegatronWorker& operator=(const MegatronWorker&) = delete;

  // Sends `request` (its "id" is set here) and returns the reply; throws MegatronRaised on an
  // `ok: false` reply, MegatronWorkerLost or MegatronUnavailable as above.
  nlohmann::json request(nlohmann::json request);
  // The worker's start-up line ("ready": true), starting it if needed.
  const nlohmann::json& hello();
  // Starts the worker without waiting for its start-up line (hello() reads it). The worker dies
  // with the thread that started it (PR_SET_PDEATHSIG): a world spawns its workers from the
  // thread that owns it, then waits for their rendezvous on threads of its own.
  void spawn();
  // A fresh rank handle.
  int64_t next_handle() { return ++handles_; }
  // Counts the starts: a handle is valid only in the generation that made it.
  uint64_t generation() const { return generation_; }
  // Kills the worker's process group now, from any thread: a request another thread waits on
  // ends with MegatronWorkerLost (a world whose rank failed stops its other ranks this way).
  void kill_now();
  // The worker's process id, -1 when none runs.
  int pid() const { return pid_.load(); }

 private:
  void start();
  void read_hello();
  void start_if_stopped();
  void stop();
  void write_all(const std::string& bytes);
  // Reads from the worker into buffer_ until `done()` holds; throws on timeout or exit.
  template <typename Done>
  void fill_until(const std::string& waiting_for, Done done);
  std::string read_line(const std::string& waiting_for);
  std::string read_bytes(size_t n, const std::string& waiting_for);

  MegatronTarget target_;
  WorldPlace world_;
  std::atomic<int> pid_{-1};
  int to_worker_ = -1, from_worker_ = -1;
  std::string buffer_;
  nlohmann::json hello_;
  int64_t handles_ = 0, ids_ = 0;
  uint64_t generation_ = 0;
};

// fp32 values as their little-endian bytes (a JSON binary value, sent after the request's line:
// the protocol's `binary` encoding), and back from that, from base64 text or from a list of bit
// patterns (its other two encodings). Little-endian hosts only.
nlohmann::json to_bits(const std::vector<float>& values);
std::vector<float> from_bits(const nlohmann::json& bits);

}  // namespace sc::rig
