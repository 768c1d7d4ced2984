#include "sim/app/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

extern char** environ;

namespace sc::sim {

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

int pick_free_port(const std::string& addr) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1 ||
      bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    close(fd);
    return 0;
  }
  socklen_t len = sizeof sa;
  const int ok = getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  close(fd);
  return ok == 0 ? ntohs(sa.sin_port) : 0;
}

LaunchResult launch_local(const LaunchSpec& spec) {
  using Clock = std::chrono::steady_clock;
  LaunchResult result;
  result.master_port = spec.master_port > 0 ? spec.master_port : pick_free_port(spec.master_addr);
  if (result.master_port == 0) {
    result.error = "no free TCP port on " + spec.master_addr;
    return result;
  }
  // Everything the children need is built before the first fork: between fork and exec a child
  // only calls async-signal-safe functions.
  std::vector<std::string> argv_s{spec.program};
  argv_s.insert(argv_s.end(), spec.args.begin(), spec.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> base_env;
  for (char** e = environ; *e; ++e) {
    if (!is_launcher_var(*e)) base_env.emplace_back(*e);
  }
  base_env.push_back("WORLD_SIZE=" + std::to_string(spec.processes));
  base_env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(spec.processes));
  base_env.push_back("MASTER_ADDR=" + spec.master_addr);
  base_env.push_back("MASTER_PORT=" + std::to_string(result.master_port));
  base_env.push_back("GROUP_RANK=0");
  std::vector<std::vector<std::string>> env_s(spec.processes, base_env);
  std::vector<std::vector<char*>> envp(spec.processes);
  for (int r = 0; r < spec.processes; ++r) {
    env_s[r].push_back("RANK=" + std::to_string(r));
    env_s[r].push_back("LOCAL_RANK=" + std::to_string(r));
    for (auto& e : env_s[r]) envp[r].push_back(e.data());
    envp[r].push_back(nullptr);
  }

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

  const auto start = Clock::now();
  std::optional<Clock::time_point> stopping;   // when SIGTERM went out
  std::optional<Clock::time_point> failed_at;  // when the first rank failed
  bool killed = false;
  auto stop_all = [&] {
    if (stopping) return;
    stopping = Clock::now();
    for (size_t i = 0; i < result.ranks.size(); ++i) {
      if (!running[i]) continue;
      result.ranks[i].stopped_by_launcher = true;
      kill(result.ranks[i].pid, SIGTERM);
    }
  };
  if (!result.error.empty()) stop_all();
  size_t alive = result.ranks.size();
  while (alive > 0) {
    bool reaped = false;
    for (size_t i = 0; i < result.ranks.size(); ++i) {
      if (!running[i]) continue;
      int status = 0;
      const pid_t got = waitpid(result.ranks[i].pid, &status, WNOHANG);
      if (got != result.ranks[i].pid) continue;
      running[i] = false;
      --alive;
      reaped = true;
      RankExit& e = result.ranks[i];
      e.signaled = WIFSIGNALED(status);
      e.code = e.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
      if ((e.signaled || e.code != 0) && !e.stopped_by_launcher && !result.first_failure) {
        result.first_failure = e.rank;
        failed_at = Clock::now();  // the others get a grace period to report and exit
      }
    }
    if (alive == 0) break;
    const auto now = Clock::now();
    if (!stopping && failed_at &&
        now - *failed_at > std::chrono::duration<double>(spec.grace_s)) {
      stop_all();
    }
    if (!stopping && now - start > std::chrono::duration<double>(spec.timeout_s)) {
      result.timed_out = true;
      stop_all();
    }
    if (stopping && !killed && now - *stopping > std::chrono::duration<double>(spec.grace_s)) {
      killed = true;
      for (size_t i = 0; i < result.ranks.size(); ++i) {
        if (running[i]) kill(result.ranks[i].pid, SIGKILL);
      }
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return result;
}

std::vector<std::string> describe_failures(const LaunchResult& r, double timeout_s) {
  std::vector<std::string> lines;
  if (!r.error.empty()) lines.push_back("launcher: " + r.error);
  if (r.timed_out) {
    std::string still;
    for (const RankExit& e : r.ranks) {
      if (e.stopped_by_launcher) still += (still.empty() ? "" : ", ") + std::to_string(e.rank);
    }
    lines.push_back("timeout: the world ran past " + std::to_string(static_cast<int>(timeout_s)) +
                    " s; ranks still running then: " + (still.empty() ? "none" : still));
  }
  for (const RankExit& e : r.ranks) {
    if (!e.signaled && e.code == 0) continue;
    std::string line = "rank " + std::to_string(e.rank) + " (pid " + std::to_string(e.pid) + "): ";
    line += e.signaled ? "killed by signal " + std::to_string(e.code) + " (" +
                             strsignal(e.code) + ")"
                       : "exit status " + std::to_string(e.code);
    if (r.first_failure && e.rank == *r.first_failure) line += " <- failed first";
    if (e.stopped_by_launcher && e.signaled) {
      line += r.timed_out ? " (stopped by the launcher at the timeout)"
                          : " (stopped by the launcher after rank " +
                                (r.first_failure ? std::to_string(*r.first_failure) : "?") +
                                " failed)";
    }
    lines.push_back(line);
  }
  return lines;
}

}  // namespace sc::sim
