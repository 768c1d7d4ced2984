#include "sim/app/launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "sim/rig/free_port.h"

extern char** environ;

namespace sc::app {

namespace {

// The variables a launcher sets; inherited values of them are dropped.
const char* const kLauncherVars[] = {"RANK=",          "WORLD_SIZE=",  "LOCAL_RANK=",
                                     "LOCAL_WORLD_SIZE=", "GROUP_RANK=", "MASTER_ADDR=",
                                     "MASTER_PORT=",   "TORCHELASTIC_USE_AGENT_STORE="};

bool is_launcher_var(const char* entry) {
  for (const char* v : kLauncherVars) {
    if (std::strncmp(entry, v, std::strlen(v)) == 0) return true;
  }
  return false;
}

}  // namespace

bool LaunchResult::ok() const {
  if (!error.empty() || timed_out || ranks.empty()) return false;
  for (const RankExit& r : ranks) {
    if (r.signaled || r.code != 0) return false;
  }
  return true;
}

namespace {

using Clock = std::chrono::steady_clock;

// Null-terminated pointers to `strings`, for argv or envp; `strings` must outlive them.
std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (auto& text : strings) pointers.push_back(text.data());
  pointers.push_back(nullptr);
  return pointers;
}

// The environment of every rank: this one's less the launcher variables, then the world's.
std::vector<std::vector<std::string>> rank_environments(const LaunchSpec& spec, int master_port) {
  std::vector<std::string> base_env;
  for (char** entry = environ; *entry; ++entry) {
    if (!is_launcher_var(*entry)) base_env.emplace_back(*entry);
  }
  base_env.push_back("WORLD_SIZE=" + std::to_string(spec.processes));
  base_env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(spec.processes));
  base_env.push_back("MASTER_ADDR=" + spec.master_addr);
  base_env.push_back("MASTER_PORT=" + std::to_string(master_port));
  base_env.push_back("GROUP_RANK=0");
  std::vector<std::vector<std::string>> env_s(spec.processes, base_env);
  for (int r = 0; r < spec.processes; ++r) {
    env_s[r].push_back("RANK=" + std::to_string(r));
    env_s[r].push_back("LOCAL_RANK=" + std::to_string(r));
  }
  return env_s;
}

// Forks and execs every rank (argv, envp[rank]); records each started one in `result`, or the
// fork error. Returns, per started rank, that it is running.
std::vector<bool> start_ranks(const LaunchSpec& spec, const std::vector<char*>& argv,
                              const std::vector<std::vector<char*>>& envp, LaunchResult& result) {
  const pid_t launcher = getpid();
  std::vector<bool> running;
  for (int r = 0; r < spec.processes; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(126);  // the launcher died before prctl took effect
      execve(argv[0], argv.data(), envp[r].data());
      static const char msg[] = "shardcheck launcher: exec failed\n";
      (void)!write(2, msg, sizeof msg - 1);
      _exit(127);
    }
    if (pid < 0) {
      result.error = std::string("fork failed: ") + std::strerror(errno);
      break;
    }
    result.ranks.push_back(RankExit{r, static_cast<int>(pid)});
    running.push_back(true);
  }
  return running;
}

// The launcher's watch over the started ranks while it waits for them.
struct Watch {
  std::vector<bool> running;  // per started rank: not reaped yet
  Clock::time_point start;
  std::optional<Clock::time_point> stopping;   // when SIGTERM went out
  std::optional<Clock::time_point> failed_at;  // when the first rank failed
  bool killed = false;
};

// Sends SIGTERM to every rank still running (once for the world) and marks it stopped.
void stop_all(Watch& watch, LaunchResult& result) {
  if (watch.stopping) return;
  watch.stopping = Clock::now();
  for (size_t i = 0; i < result.ranks.size(); ++i) {
    if (!watch.running[i]) continue;
    result.ranks[i].stopped_by_launcher = true;
    kill(result.ranks[i].pid, SIGTERM);
  }
}

// Reaps the ranks that have exited and records the first failure; returns how many it reaped.
size_t reap_exited(Watch& watch, LaunchResult& result) {
  size_t reaped = 0;
  for (size_t i = 0; i < result.ranks.size(); ++i) {
    if (!watch.running[i]) continue;
    int status = 0;
    const pid_t got = waitpid(result.ranks[i].pid, &status, WNOHANG);
    if (got != result.ranks[i].pid) continue;
    watch.running[i] = false;
    ++reaped;
    RankExit& e = result.ranks[i];
    e.signaled = WIFSIGNALED(status);
    e.code = e.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
    if ((e.signaled || e.code != 0) && !e.stopped_by_launcher && !result.first_failure) {
      result.first_failure = e.rank;
      watch.failed_at = Clock::now();  // the others get a grace period to report and exit
    }
  }
  return reaped;
}

// Stops the world a grace period after the first failure or at the timeout, and sends SIGKILL
// to the ranks still running a grace period after SIGTERM.
void enforce_deadlines(const LaunchSpec& spec, Watch& watch, LaunchResult& result) {
  const auto now = Clock::now();
  if (!watch.stopping && watch.failed_at &&
      now - *watch.failed_at > std::chrono::duration<double>(spec.grace_s)) {
    stop_all(watch, result);
  }
  if (!watch.stopping && now - watch.start > std::chrono::duration<double>(spec.timeout_s)) {
    result.timed_out = true;
    stop_all(watch, result);
  }
  if (watch.stopping && !watch.killed &&
      now - *watch.stopping > std::chrono::duration<double>(spec.grace_s)) {
    watch.killed = true;
    for (size_t i = 0; i < result.ranks.size(); ++i) {
      if (watch.running[i]) kill(result.ranks[i].pid, SIGKILL);
    }
  }
}

}  // namespace

LaunchResult launch_local(const LaunchSpec& spec) {
  LaunchResult result;
  result.master_port =
      spec.master_port > 0 ? spec.master_port : rig::pick_free_port(spec.master_addr);
  if (result.master_port == 0) {
    result.error = "no free TCP port on " + spec.master_addr;
    return result;
  }
  // Everything the children need is built before the first fork: between fork and exec a child
  // only calls async-signal-safe functions.
  std::vector<std::string> argv_s{spec.program};
  argv_s.insert(argv_s.end(), spec.args.begin(), spec.args.end());
  const std::vector<char*> argv = c_strings(argv_s);
  std::vector<std::vector<std::string>> env_s = rank_environments(spec, result.master_port);
  std::vector<std::vector<char*>> envp;
  for (auto& env : env_s) envp.push_back(c_strings(env));

  Watch watch;
  watch.running = start_ranks(spec, argv, envp, result);
  watch.start = Clock::now();
  if (!result.error.empty()) stop_all(watch, result);
  size_t alive = result.ranks.size();
  while (alive > 0) {
    const size_t reaped = reap_exited(watch, result);
    alive -= reaped;
    if (alive == 0) break;
    enforce_deadlines(spec, watch, result);
    if (reaped == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return result;
}

std::vector<std::string> describe_failures(const LaunchResult& result, double timeout_s) {
  std::vector<std::string> lines;
  if (!result.error.empty()) lines.push_back("launcher: " + result.error);
  if (result.timed_out) {
    std::string still;
    for (const RankExit& e : result.ranks) {
      if (e.stopped_by_launcher) still += (still.empty() ? "" : ", ") + std::to_string(e.rank);
    }
    lines.push_back("timeout: the world ran past " + std::to_string(static_cast<int>(timeout_s)) +
                    " s; ranks still running then: " + (still.empty() ? "none" : still));
  }
  for (const RankExit& e : result.ranks) {
    if (!e.signaled && e.code == 0) continue;
    std::string line = "rank " + std::to_string(e.rank) + " (pid " + std::to_string(e.pid) + "): ";
    line += e.signaled ? "killed by signal " + std::to_string(e.code) + " (" +
                             strsignal(e.code) + ")"
                       : "exit status " + std::to_string(e.code);
    if (result.first_failure && e.rank == *result.first_failure) line += " <- failed first";
    if (e.stopped_by_launcher && e.signaled) {
      line += result.timed_out
                  ? " (stopped by the launcher at the timeout)"
                  : " (stopped by the launcher after rank " +
                        (result.first_failure ? std::to_string(*result.first_failure) : "?") +
                        " failed)";
    }
    lines.push_back(line);
  }
  return lines;
}

}  // namespace sc::app
