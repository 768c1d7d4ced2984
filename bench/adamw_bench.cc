// One fp32 AdamW step over the same two inputs (one tensor of 2^25 parameters; the realistic
// shard of 688 tensors, the same 2^25 in all), with the same threads, samples and statistic for
// every row: the fused host AdamW (engines::FusedHostAdamW, the hdo-fused-host-adamw variant,
// through its C++ API) and the peers a user offloading an optimizer would pick, run by the
// harness bench/peers/adamw_peers.py in the peers' environment (SC_PEERS_PYTHON; scripts/bench
// sets it): torch 2.11's torch.optim.AdamW single-tensor (the default), foreach=True and
// fused=True (as Megatron's factory configures its host AdamW), and DeepSpeed's
// DeepSpeedCPUAdam.
//
// Each row measures its own limit: AdamW's traffic over tensors of the row's sizes, made as the
// rows make theirs, walked as the fused pass walks them, one pass before each of the row's
// kSamples steps and one after the last, so that the limit meets the machine as the row does. A
// row's time is the median of its steps (each timed alone: the step call only, after a step
// that made the state and a warm one); its fraction is its rate at that median over the best
// of its limit's passes. An attempt whose steps spread more than kMaxRowSpread
// (median over best) is run again, up to kAttempts, and the one with the least spread is kept.
// Between any two timed calls the benchmark waits kSettle, so that the OpenMP threads of one
// (which spin a while after their work before they sleep) never share the cores with the next:
// a Python row's step and the limit pass after it run in two processes, each with its own pool.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <thread>

#include "bench_support.h"
#include "sim/engines/adamw_kernel.h"
#include "sim/engines/fused_host_adamw.h"
#include "sim/engines/parallel.h"
#include "sim/port/behaviour.h"
#include "sim/port/torch_adamw.h"
#include "sim/port/torch_pch.h"

#ifndef SC_PEERS_HARNESS
#define SC_PEERS_HARNESS "bench/peers/adamw_peers.py"
#endif

namespace {

using sc::bench::kAdamWBytesPerParam;

constexpr int kSamples = 10;
constexpr int kAttempts = 3;
constexpr double kMaxRowSpread = 1.10;
constexpr auto kSettle = std::chrono::milliseconds(30);

const std::vector<int64_t>& input_sizes(bool shard) {
  static const std::vector<int64_t> one{sc::bench::kStreamElements};
  static const std::vector<int64_t> many = sc::bench::realistic_shard_sizes(one[0]);
  return shard ? many : one;
}

// fp32 tensors of `sizes`, each drawn from U(-bound, bound) (0: zeros), as the rows make theirs.
std::vector<torch::Tensor> make_tensors(const std::vector<int64_t>& sizes, double bound) {
  std::vector<torch::Tensor> out;
  for (int64_t n : sizes) {
    out.push_back(bound > 0 ? torch::empty({n}, torch::kFloat).uniform_(-bound, bound)
                            : torch::zeros({n}, torch::kFloat));
  }
  return out;
}

// A row under measurement: its label, and one step timed alone (seconds).
class Row {
 public:
  virtual ~Row() = default;
  virtual std::string label() const = 0;
  virtual double step() = 0;
};
using RowFactory = std::function<std::unique_ptr<Row>(const std::vector<int64_t>& sizes)>;

// The parameters of a C++ row, each with its grad.
std::vector<torch::Tensor> make_params(const std::vector<int64_t>& sizes) {
  std::vector<torch::Tensor> params = make_tensors(sizes, 1.0);
  const std::vector<torch::Tensor> grads = make_tensors(sizes, 1e-2);
  for (size_t k = 0; k < params.size(); ++k) params[k].mutable_grad() = grads[k];
  return params;
}

const auto kOptions = torch::optim::AdamWOptions(1e-3).weight_decay(0.01);

// A C++ optimizer's step, after one that makes the state and a warm one.
class CppRow : public Row {
 public:
  CppRow(std::unique_ptr<torch::optim::Optimizer> opt, std::string label)
      : opt_(std::move(opt)), label_(std::move(label)) {
    torch::NoGradGuard no_grad;
    opt_->step();
    opt_->step();
  }
  std::string label() const override { return label_; }
  double step() override {
    torch::NoGradGuard no_grad;
    const auto t0 = std::chrono::steady_clock::now();
    opt_->step();
    return sc::bench::seconds_since(t0);
  }
  torch::optim::Optimizer& optimizer() { return *opt_; }

 private:
  std::unique_ptr<torch::optim::Optimizer> opt_;
  std::string label_;
};

std::unique_ptr<Row> fused_host_adamw_row(const std::vector<int64_t>& sizes) {
  auto row = std::make_unique<CppRow>(
      std::make_unique<sc::engines::FusedHostAdamW>(make_params(sizes), kOptions),
      std::string("shardcheck engines::FusedHostAdamW (C++), kernel ") +
          sc::engines::adamw_kernel_isa());
  if (!static_cast<sc::engines::FusedHostAdamW&>(row->optimizer()).last_step_was_fused()) {
    throw std::runtime_error("the fused AdamW fell back to torch's step");
  }
  return row;
}

// The port's host AdamW: at::_fused_adamw_ called from C++ as torch.optim.AdamW(fused=True)
// calls it, so that the torch-fused row's kernel is timed outside Python too.
std::unique_ptr<Row> port_torch_fused_row(const std::vector<int64_t>& sizes) {
  return std::make_unique<CppRow>(
      std::make_unique<sc::sut::TorchAdamW>(
          std::vector<torch::optim::OptimizerParamGroup>{{make_params(sizes)}}, /*fused=*/true,
          sc::sut::fully_patched(), kOptions),
      "shardcheck sut::TorchAdamW(fused) (C++): at::_fused_adamw_");
}

// A Python peer: the harness in a process of its own, asked for one step at a time. Every wait
// on it is bounded (kPeerTimeoutMs); its standard error is kept for the message of a failure.
class PeerRow : public Row {
 public:
  PeerRow(const std::string& peer, const std::vector<int64_t>& sizes);
  ~PeerRow() override;
  std::string label() const override { return label_; }
  double step() override;

 private:
  std::string read_line();
  [[noreturn]] void fail(const std::string& what);

  static constexpr int kPeerTimeoutMs = 300000;
  std::string dir_, label_, buffer_;
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
};

std::string required_env(const char* name, const char* why) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') throw std::runtime_error(std::string(name) + why);
  return value;
}

PeerRow::PeerRow(const std::string& peer, const std::vector<int64_t>& sizes) {
  const std::string python = required_env(
      "SC_PEERS_PYTHON", " is not set: scripts/bench makes the peers' environment and sets it");
  char dir[] = "/tmp/shardcheck-peers.XXXXXX";
  if (mkdtemp(dir) == nullptr) throw std::runtime_error("cannot make a temporary folder");
  dir_ = dir;
  {
    std::ofstream f(dir_ + "/sizes.txt");
    for (int64_t n : sizes) f << n << '\n';
  }
  const std::string threads = std::to_string(at::get_num_threads());
  const std::vector<std::string> argv = {python, SC_PEERS_HARNESS, "time", "--peer", peer,
                                         "--sizes", dir_ + "/sizes.txt", "--threads", threads};
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string errors = dir_ + "/stderr";
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) fail("cannot make pipes");
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int err = open(errors.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    if (err >= 0) dup2(err, STDERR_FILENO);
    setenv("OMP_NUM_THREADS", threads.c_str(), 1);
    execv(args[0], args.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  to_ = in[1];
  from_ = out[0];
  if (pid_ < 0) fail("cannot start the harness");
  const std::string hello = read_line();
  if (hello.rfind("peer ", 0) != 0) fail("the harness did not start");
  label_ = hello.substr(5);
}

PeerRow::~PeerRow() {
  if (to_ >= 0) close(to_);
  if (from_ >= 0) close(from_);
  if (pid_ > 0) {
    int status = 0;
    for (int k = 0; k < 200 && waitpid(pid_, &status, WNOHANG) == 0; ++k) usleep(10000);
    if (waitpid(pid_, &status, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
  }
  std::remove((dir_ + "/sizes.txt").c_str());
  std::remove((dir_ + "/stderr").c_str());
  rmdir(dir_.c_str());
}

void PeerRow::fail(const std::string& what) {
  std::ifstream err(dir_ + "/stderr");
  std::string why((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  throw std::runtime_error(what + ": " + why.substr(why.size() > 600 ? why.size() - 600 : 0));
}

std::string PeerRow::read_line() {
  for (;;) {
    const size_t newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return line;
    }
    pollfd p{from_, POLLIN, 0};
    const int ready = poll(&p, 1, kPeerTimeoutMs);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) fail("the peer harness gave no answer in " +
                         std::to_string(kPeerTimeoutMs / 1000) + " s");
    char chunk[4096];
    const ssize_t n = read(from_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("the peer harness exited");
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

double PeerRow::step() {
  const std::string request = "step\n";
  if (write(to_, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    fail("the peer harness closed its input");
  }
  const std::string line = read_line();
  char* end = nullptr;
  const double seconds = std::strtod(line.c_str(), &end);
  if (end == line.c_str() || *end != '\0') fail("the peer harness answered '" + line + "'");
  return seconds;
}

// The limit's tensors: four streams per parameter of the row's sizes.
struct LimitTensors {
  std::vector<torch::Tensor> p, g, m, v;
  std::vector<sc::bench::AdamWStreams> streams;
  explicit LimitTensors(const std::vector<int64_t>& sizes)
      : p(make_tensors(sizes, 1.0)), g(make_tensors(sizes, 1e-2)), m(make_tensors(sizes, 0)),
        v(make_tensors(sizes, 0)) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      streams.push_back({p[k].data_ptr<float>(), g[k].data_ptr<float>(), m[k].data_ptr<float>(),
                         v[k].data_ptr<float>(), sizes[k]});
    }
  }
  double sample() const { return sc::bench::run_adamw_traffic_once(streams); }
};

// One attempt: a fresh row, then kSamples times a pass of the limit and a step of the row, and
// a last pass of the limit, so that the limit sees the machine as the row does.
struct Attempt {
  std::string label;
  std::vector<double> steps, limit;
};
Attempt attempt(const RowFactory& make_row, const std::vector<int64_t>& sizes) {
  const LimitTensors limit(sizes);
  const std::unique_ptr<Row> row = make_row(sizes);
  Attempt a{row->label(), {}, {}};
  for (int k = 0; k < kSamples; ++k) {
    std::this_thread::sleep_for(kSettle);
    a.limit.push_back(limit.sample());
    std::this_thread::sleep_for(kSettle);
    a.steps.push_back(row->step());
  }
  std::this_thread::sleep_for(kSettle);
  a.limit.push_back(limit.sample());
  return a;
}

void set_row_counters(benchmark::State& state, const Attempt& a, int attempts, int64_t total,
                      size_t tensors) {
  const auto row = sc::bench::sample_stats(a.steps);
  const auto limit = sc::bench::sample_stats(a.limit);
  const double bytes = kAdamWBytesPerParam * static_cast<double>(total);
  state.counters["median_ms"] = row.median * 1e3;
  state.counters["best_ms"] = row.best * 1e3;
  state.counters["spread"] = row.spread;
  state.counters["attempts"] = attempts;
  state.counters["limit_GBps"] = bytes / limit.best / 1e9;
  state.counters["limit_spread"] = limit.spread;
  state.counters["frac_of_adamw_limit"] = limit.best / row.median;
  state.counters["best_frac_of_adamw_limit"] = limit.best / row.best;
  state.counters["tensors"] = static_cast<double>(tensors);
  state.counters["threads"] = at::get_num_threads();
  state.counters["loadavg_1m"] = sc::bench::load_average_1m();
  state.SetLabel(a.label);
}

void run_row(benchmark::State& state, bool shard, const RowFactory& make_row) {
  const std::vector<int64_t>& sizes = input_sizes(shard);
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  for (auto _ : state) {
    try {
      Attempt kept = attempt(make_row, sizes);
      int attempts = 1;
      const auto spread = [](const Attempt& a) { return sc::bench::sample_stats(a.steps).spread; };
      while (spread(kept) > kMaxRowSpread && attempts < kAttempts) {
        Attempt again = attempt(make_row, sizes);
        ++attempts;
        if (spread(again) < spread(kept)) kept = std::move(again);
      }
      state.SetIterationTime(sc::bench::sample_stats(kept.steps).median);
      set_row_counters(state, kept, attempts, total, sizes.size());
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * total);
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(kAdamWBytesPerParam * static_cast<double>(total)));
}

// The rows, in the order they run on each input: ours, the port's, then the Python peers.
const std::vector<std::pair<std::string, RowFactory>>& rows() {
  static const std::vector<std::pair<std::string, RowFactory>> table = [] {
    std::vector<std::pair<std::string, RowFactory>> t{{"fused-host-adamw", fused_host_adamw_row},
                                                      {"port-torch-fused", port_torch_fused_row}};
    for (const char* peer : {"torch-single", "torch-foreach", "torch-fused", "deepspeed-cpu-adam"}) {
      t.emplace_back(peer, [peer](const std::vector<int64_t>& sizes) {
        return std::make_unique<PeerRow>(peer, sizes);
      });
    }
    return t;
  }();
  return table;
}

const bool registered = [] {
  for (const bool shard : {false, true}) {
    for (const auto& [name, make_row] : rows()) {
      benchmark::RegisterBenchmark(
          ("BM_AdamWPeers/" + std::string(shard ? "shard" : "one_tensor") + "/" + name).c_str(),
          [shard, make_row = make_row](benchmark::State& state) { run_row(state, shard, make_row); })
          ->Iterations(1)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  return true;
}();

}  // namespace
