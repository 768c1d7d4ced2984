#include "sim/rig/megatron_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>

#ifndef SC_MEGATRON_WORKER_SCRIPT
#define SC_MEGATRON_WORKER_SCRIPT "sim/megatron/worker.py"
#endif

namespace sc::rig {

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::chrono::milliseconds timeout() {
  const std::string text = env_or("SC_MEGATRON_TIMEOUT", "300");
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(seconds > 0)) {
    throw MegatronUnavailable("SC_MEGATRON_TIMEOUT must be a positive number of seconds, got '" +
                              text + "'");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// In the child (only async-signal-safe calls: everything was prepared before the fork): stdin
// and stdout on the pipes, its own process group, killed with its parent.
[[noreturn]] void exec_worker(int in, int out, char* const* argv, const std::string& failure) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  dup2(in, STDIN_FILENO);
  dup2(out, STDOUT_FILENO);
  execvp(argv[0], argv);
  (void)!write(STDOUT_FILENO, failure.data(), failure.size());
  _exit(2);
}

}  // namespace

namespace {

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::vector<unsigned char> unbase64(const std::string& text) {
  int value[256];
  std::fill(std::begin(value), std::end(value), -1);
  for (int k = 0; k < 64; ++k) value[static_cast<unsigned char>(kBase64[k])] = k;
  std::vector<unsigned char> out;
  uint32_t acc = 0;
  int bits = 0;
  for (const char c : text) {
    if (c == '=') break;
    const int v = value[static_cast<unsigned char>(c)];
    if (v < 0) throw MegatronWorkerLost("the Megatron worker sent a value that is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<unsigned char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

// The `binary` encoding: each JSON binary value of `message` becomes {"blob": [offset, length]}
// into the bytes that follow the line (appended to `blob`).
void move_blobs_out(nlohmann::json& message, std::string& blob) {
  if (message.is_binary()) {
    const auto& bytes = message.get_binary();
    const nlohmann::json span = {{"blob", {blob.size(), bytes.size()}}};
    blob.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    message = span;
  } else if (message.is_structured()) {
    for (auto& item : message) move_blobs_out(item, blob);
  }
}

// The reverse: each {"blob": [offset, length]} of a reply becomes those bytes of `blob`.
void move_blobs_in(nlohmann::json& message, const std::string& blob) {
  if (message.is_object() && message.size() == 1 && message.contains("blob")) {
    const auto span = message.at("blob").get<std::vector<size_t>>();
    if (span.size() != 2 || span[0] > blob.size() || span[1] > blob.size() - span[0]) {
      throw MegatronWorkerLost("the Megatron worker sent a blob span outside its bytes");
    }
    const auto* first = reinterpret_cast<const uint8_t*>(blob.data()) + span[0];
    message = nlohmann::json::binary(std::vector<uint8_t>(first, first + span[1]));
  } else if (message.is_structured()) {
    for (auto& item : message) move_blobs_in(item, blob);
  }
}

}  // namespace

nlohmann::json to_bits(const std::vector<float>& values) {
  const auto* first = reinterpret_cast<const uint8_t*>(values.data());
  return nlohmann::json::binary(
      std::vector<uint8_t>(first, first + values.size() * sizeof(float)));
}

std::vector<float> from_bits(const nlohmann::json& bits) {
  std::vector<float> out;
  if (bits.is_binary() || bits.is_string()) {
    const std::vector<uint8_t> decoded = bits.is_string() ? unbase64(bits.get<std::string>())
                                                          : std::vector<uint8_t>();
    const std::vector<uint8_t>& raw = bits.is_string() ? decoded : bits.get_binary();
    if (raw.size() % sizeof(float) != 0) {
      throw MegatronWorkerLost("the Megatron worker sent a value of a ragged byte count");
    }
    out.resize(raw.size() / sizeof(float));
    if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
    return out;
  }
  const auto words = bits.get<std::vector<uint32_t>>();
  out.resize(words.size());
  if (!words.empty()) std::memcpy(out.data(), words.data(), words.size() * sizeof(float));
  return out;
}

MegatronWorker& MegatronWorker::of(const MegatronTarget& target) {
  static std::map<std::pair<std::string, bool>, std::unique_ptr<MegatronWorker>> workers;
  auto& w = workers[{target.tree, target.cuda}];
  if (!w) w = std::make_unique<MegatronWorker>(target);
  return *w;
}

MegatronWorker::MegatronWorker(MegatronTarget target, WorldPlace world)
    : target_(std::move(target)), world_(std::move(world)) {
  signal(SIGPIPE, SIG_IGN);  // a dead worker is an error reply, not the end of this process
}

MegatronWorker::~MegatronWorker() { stop(); }

void MegatronWorker::start() {
  spawn();
  read_hello();
}

void MegatronWorker::spawn() {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
    throw MegatronUnavailable(std::string("cannot make pipes: ") + std::strerror(errno));
  }
  std::vector<std::string> argv = {env_or("SC_PYTHON", SC_DEFAULT_PYTHON),
                                   env_or("SC_MEGATRON_WORKER", SC_MEGATRON_WORKER_SCRIPT),
                                   "--tree",
                                   target_.tree,
                                   "--device",
                                   target_.cuda ? "cuda" : "cpu",
                                   "--values",
                                   "binary"};
  if (const WorldPlace& w = world_; w.size > 0) {
    argv.insert(argv.end(), {"--world-size", std::to_string(w.size), "--world-rank",
                             std::to_string(w.rank), "--master", w.master, "--collective-timeout",
                             std::to_string(w.collective_timeout_s)});
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const nlohmann::json failure = {{"ready", false},
                                  {"kind", "import_failed"},
                                  {"error", "cannot run the Python interpreter " + argv[0] +
                                                " (SC_PYTHON)"}};
  const std::string failure_line = failure.dump() + "\n";
  const pid_t pid = fork();
  if (pid == 0) exec_worker(in[0], out[1], args.data(), failure_line);
  close(in[0]);
  close(out[1]);
  if (pid < 0) {
    close(in[1]);
    close(out[0]);
    throw MegatronUnavailable(std::string("cannot start the worker: ") + std::strerror(errno));
  }
  pid_ = pid;
  to_worker_ = in[1];
  from_worker_ = out[0];
  buffer_.clear();
  hello_ = nlohmann::json();
  ++generation_;
}

void MegatronWorker::read_hello() {
  nlohmann::json hello;
  try {
    hello = nlohmann::json::parse(read_line("its start-up line"));
  } catch (const std::exception& e) {
    stop();
    throw MegatronUnavailable(std::string("the Megatron worker did not start: ") + e.what());
  }
  if (!hello.value("ready", false)) {
    stop();
    throw MegatronUnavailable(hello.value("kind", std::string("error")) + ": " +
                              hello.value("error", std::string("no reason given")));
  }
  hello_ = std::move(hello);
}

void MegatronWorker::kill_now() {
  const int pid = pid_.load();
  if (pid > 0) kill(-pid, SIGKILL);
}

void MegatronWorker::stop() {
  if (pid_ < 0) return;
  if (to_worker_ >= 0) {
    const std::string quit = "{\"id\": 0, \"op\": \"quit\"}\n";
    (void)!write(to_worker_, quit.data(), quit.size());
    close(to_worker_);
  }
  // A second to leave on its own; then the whole process group goes.
  int status = 0;
  const int pid = pid_.load();
  for (int k = 0; k < 100 && waitpid(pid, &status, WNOHANG) == 0; ++k) usleep(10000);
  kill(-pid, SIGKILL);
  waitpid(pid, &status, WNOHANG) == 0 ? (void)waitpid(pid, &status, 0) : (void)0;
  if (from_worker_ >= 0) close(from_worker_);
  pid_ = -1;
  to_worker_ = from_worker_ = -1;
}

void MegatronWorker::write_all(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(to_worker_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw MegatronWorkerLost("the Megatron worker closed its input");
    done += static_cast<size_t>(n);
  }
}

template <typename Done>
void MegatronWorker::fill_until(const std::string& waiting_for, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + timeout();
  while (!done()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{from_worker_, POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      stop();
      throw MegatronWorkerLost("the Megatron worker gave no answer in " +
                               std::to_string(timeout().count() / 1000) + " s while serving " +
                               waiting_for + " (SC_MEGATRON_TIMEOUT); it was killed");
    }
    char chunk[1 << 16];
    const ssize_t n = read(from_worker_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      stop();
      throw MegatronWorkerLost("the Megatron worker exited while serving " + waiting_for);
    }
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

std::string MegatronWorker::read_line(const std::string& waiting_for) {
  size_t scanned = 0, newline = std::string::npos;
  fill_until(waiting_for, [&] {
    newline = buffer_.find('\n', scanned);
    scanned = buffer_.size();
    return newline != std::string::npos;
  });
  std::string line = buffer_.substr(0, newline);
  buffer_.erase(0, newline + 1);
  return line;
}

std::string MegatronWorker::read_bytes(size_t n, const std::string& waiting_for) {
  fill_until(waiting_for, [&] { return buffer_.size() >= n; });
  std::string bytes = buffer_.substr(0, n);
  buffer_.erase(0, n);
  return bytes;
}

void MegatronWorker::start_if_stopped() {
  if (pid_ >= 0) return;
  // A real rank alone would wait out the rendezvous: its world starts afresh instead.
  if (world_.size > 0 && generation_ > 0) {
    throw MegatronWorkerLost("real rank " + std::to_string(world_.rank) +
                             "'s worker is gone; "
                             "a rank of a world is not restarted on its own");
  }
  start();
}

const nlohmann::json& MegatronWorker::hello() {
  start_if_stopped();
  if (hello_.is_null()) read_hello();
  return hello_;
}

nlohmann::json MegatronWorker::request(nlohmann::json request) {
  start_if_stopped();
  if (hello_.is_null()) read_hello();
  request["id"] = ++ids_;
  const std::string op = request.value("op", std::string("?"));
  nlohmann::json reply;
  try {
    std::string blob;
    move_blobs_out(request, blob);
    if (!blob.empty()) request["blob_bytes"] = blob.size();
    write_all(request.dump() + "\n" + blob);
    const std::string waiting_for = "a '" + op + "' request";
    reply = nlohmann::json::parse(read_line(waiting_for));
    const auto size = reply.is_object() ? reply.value("blob_bytes", size_t{0}) : size_t{0};
    if (size > 0) move_blobs_in(reply, read_bytes(size, waiting_for));
  } catch (const MegatronWorkerLost&) {
    stop();  // it broke the protocol: what it sends next cannot be trusted
    throw;
  } catch (const nlohmann::json::exception& e) {
    stop();
    throw MegatronWorkerLost("the Megatron worker answered a '" + op + "' request with " +
                             "something that is not JSON: " + e.what());
  }
  if (reply.value("id", int64_t{-1}) != ids_) {
    stop();
    throw MegatronWorkerLost("the Megatron worker answered out of order");
  }
  if (!reply.value("ok", false)) {
    std::string what = reply.value("error", std::string("(no message)"));
    const std::string trace = reply.value("traceback", std::string());
    throw MegatronRaised(what + (trace.empty() ? "" : "\n" + trace));
  }
  return reply;
}

}  // namespace sc::rig
