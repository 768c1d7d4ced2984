#include "sim/app/multiprocess.h"

#include <torch/cuda.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "shardcheck/config.h"
#include "sim/app/c10d_world.h"
#include "sim/app/in_process.h"
#include "sim/app/jobs.h"
#include "sim/app/launcher.h"
#include "sim/app/options.h"
#include "sim/port/behaviour.h"
#include "sim/port/device.h"
#include "sim/port/param_buffer.h"
#include "sim/rig/free_port.h"
#include "sim/rig/grad_parts.h"
#include "sim/rig/rank_rig.h"
#if SC_TORCH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace sc::app {

namespace {

using std::chrono::milliseconds;

// What the options make of the world, checked once.
struct Setup {
  CliOptions o;  // the options with the checked world (the model's layout applied)
  ResolvedWorld world;
  sut::Behaviour behaviour;
};

std::variant<Setup, std::string> prepare(const CliOptions& options) {
  if (auto why = check_multi_process_options(options)) return *why;
  auto resolved = resolve_world(options, options.scale > 0 ? options.scale : 64);
  if (auto* why = std::get_if<std::string>(&resolved)) return *why;
  Setup setup;
  setup.o = options;
  setup.world = std::move(std::get<ResolvedWorld>(resolved));
  setup.o.world = setup.world.sizes;
  setup.behaviour = *sut::behaviour_by_name(options.variants.front());
  return setup;
}

std::string hex(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

void emit(std::ostream& os, const std::string& line) {
  os.write(line.data(), static_cast<std::streamsize>(line.size()));
  os.put('\n');
  os.flush();
}

}  // namespace

std::optional<std::string> check_multi_process_options(const CliOptions& options) {
  if (options.processes > 0 && options.multi_process) {
    return "--processes and --multi-process exclude each other (--processes starts the ranks, "
           "each with --multi-process)";
  }
  if (options.variants.size() != 1) {
    return "the multi-process mode runs one variant; pass --variant=NAME";
  }
  if (options.layout_only) return "--layout-only has no tensors to communicate; drop it";
  if (options.check_determinism) return "--check-determinism runs in-process only";
  if (options.json) return "--json is not available in the multi-process mode";
  const int64_t world = static_cast<int64_t>(options.world.pp) * options.world.dp;
  if (options.processes > 0 && options.processes != world) {
    return "--processes=" + std::to_string(options.processes) +
           " but --pp=" + std::to_string(options.world.pp) +
           " --dp=" + std::to_string(options.world.dp) + " make " + std::to_string(world) +
           " ranks";
  }
  if (options.fault_rank >= world) {
    return "--fault names rank " + std::to_string(options.fault_rank) + " of a world of " +
           std::to_string(world);
  }
  return std::nullopt;
}

std::variant<std::vector<std::vector<uint64_t>>, std::string> in_process_param_digests(
    const CliOptions& options) {
  auto setup_or = prepare(options);
  if (auto* why = std::get_if<std::string>(&setup_or)) return *why;
  const Setup& setup = std::get<Setup>(setup_or);
  const input::WorldSizes& w = setup.o.world;
  std::vector<std::vector<uint64_t>> by_rank(static_cast<size_t>(w.pp * w.dp));
  for (int stage = 0; stage < w.pp; ++stage) {
    for (int ep_rank = 0; ep_rank < w.ep; ++ep_rank) {
      auto digests = stage_digests(setup.o, setup.world, setup.behaviour, stage, ep_rank);
      if (auto* why = std::get_if<std::string>(&digests)) return *why;
      for (int d = ep_rank; d < w.dp; d += w.ep) {
        by_rank[static_cast<size_t>(stage * w.dp + d)] = std::get<StageDigests>(digests).params;
      }
    }
  }
  return by_rank;
}

namespace {

// One rank of the multi-process mode: its place in the world and what it is checked with.
struct Worker {
  Env env;
  int world = 0;  // pp * dp of the options as given
  Setup setup;    // the checked options, the model and this rank's device
  int dp = 1, ep = 1, expert_dp = 1;
  int stage = 0, dp_rank = 0;
  // Megatron's order of the expert groups (EP before expert DP): EP rank dp_rank % ep, expert-DP
  // rank dp_rank / ep, as in the in-process mode's rows.
  int ep_rank = 0, edp_rank = 0;
  std::string me;             // "rank R stage S dp D [ep E]": the start of its lines
  milliseconds timeout{0};    // of the collectives and the store
  std::vector<int> replicas;  // the ranks of its stage that hold the same model

  const CliOptions& options() const { return setup.o; }
  // Whether --fault=KIND[@RANK] perturbs this rank.
  bool fault_here(const char* kind) const {
    return setup.o.fault == kind && (setup.o.fault_rank < 0 || setup.o.fault_rank == env.rank);
  }
};

// The worker of rank env.rank in `setup`'s world, on the CUDA device of its local rank when the
// setup picked CUDA.
Worker make_worker(const Env& env, int world, Setup setup) {
  Worker worker;
  worker.env = env;
  worker.world = world;
  worker.setup = std::move(setup);
  const CliOptions& o = worker.setup.o;
  worker.dp = o.world.dp;
  worker.ep = o.world.ep;
  worker.expert_dp = worker.dp / worker.ep;
  worker.stage = env.rank / worker.dp;
  worker.dp_rank = env.rank % worker.dp;
  worker.ep_rank = worker.dp_rank % worker.ep;
  worker.edp_rank = worker.dp_rank / worker.ep;
  worker.me = "rank " + std::to_string(env.rank) + " stage " + std::to_string(worker.stage) +
              " dp " + std::to_string(worker.dp_rank) +
              (worker.ep > 1 ? " ep " + std::to_string(worker.ep_rank) : std::string());
#if SC_TORCH_CUDA
  if (worker.setup.world.device.is_cuda()) {
    worker.setup.world.device =
        torch::Device(torch::kCUDA, static_cast<int>(env.local_rank % torch::cuda::device_count()));
  }
#endif
  worker.timeout = milliseconds(static_cast<int64_t>(o.collective_timeout_s * 1000));
  // The ranks of this stage that hold the same model (dense and experts): its DP group when
  // EP is 1, the ranks of its EP rank otherwise.
  for (int d = worker.ep_rank; d < worker.dp; d += worker.ep) {
    worker.replicas.push_back(worker.stage * worker.dp + d);
  }
  return worker;
}

// The rendezvous store, and the prefix of this run's keys.
struct Rendezvous {
  c10::intrusive_ptr<c10d::Store> store;
  std::string run;  // keys of this run only, should the store outlive it (an agent's store)
};

// Says that this rank is done; rank 0 hosts the store, so it waits for every rank's word and
// leaves last. Returns `status`.
int finish(const Worker& worker, Rendezvous& rendezvous, int status) {
  const Env& env = worker.env;
  store_set(*rendezvous.store, rendezvous.run + "done/" + std::to_string(env.rank), "1");
  if (env.rank == 0 && !env.agent_store) {
    for (int r = 0; r < worker.world; ++r) {
      store_get(*rendezvous.store, rendezvous.run + "done/" + std::to_string(r),
                "end report from rank " + std::to_string(r), worker.options().collective_timeout_s);
    }
  }
  return status;
}

// One model instance of this rank (dense or expert) and the DP group that reduces it.
struct RankInstance {
  model::Instance inst;
  int rank = 0, size = 1;  // in its DP group: dense DP, or expert DP
  std::unique_ptr<JobRank> port;
  std::vector<int> params;  // case parameters, in the rig's order

  rig::RankRig& rig() const { return port->rig(); }
  DpGroup* group = nullptr;
};

// Builds this rank's instances of `spec`; `outcome` becomes "OK" or the first one's error.
std::vector<RankInstance> build_instances(const Worker& worker, const model::CaseSpec& spec,
                                          std::string& outcome) {
  std::vector<RankInstance> instances;
  outcome = "OK";
  for (model::Instance inst : instances_of(spec)) {
    RankInstance i;
    i.inst = inst;
    const bool expert = inst == model::Instance::kExpert;
    i.rank = expert ? worker.edp_rank : worker.dp_rank;
    i.size = expert ? worker.expert_dp : worker.dp;
    i.port = std::make_unique<JobRank>(spec, inst, i.rank, worker.setup.behaviour,
                                       worker.setup.world.device, worker.options().seed);
    i.params = i.port->case_params();
    if (outcome == "OK") outcome = i.port->outcome();
    instances.push_back(std::move(i));
  }
  return instances;
}

// Publishes this rank's construction outcome and reads every rank's; false, once `err` has the
// report, when some rank failed.
bool every_rank_constructed(const Worker& worker, Rendezvous& rendezvous,
                            const std::string& outcome, std::ostream& err) {
  const int world = worker.world, dp = worker.dp;
  store_set(*rendezvous.store, rendezvous.run + "construction/" + std::to_string(worker.env.rank),
            outcome);
  std::vector<std::string> failed;
  for (int r = 0; r < world; ++r) {
    const std::string theirs =
        store_get(*rendezvous.store, rendezvous.run + "construction/" + std::to_string(r),
                  "construction report from rank " + std::to_string(r),
                  worker.options().collective_timeout_s);
    if (theirs != "OK") {
      failed.push_back("rank " + std::to_string(r) + " (stage " + std::to_string(r / dp) + ", dp " +
                       std::to_string(r % dp) + ") failed construction: " + theirs);
    }
  }
  if (failed.empty()) return true;
  std::string report = worker.me + ": " + std::to_string(failed.size()) + " of " +
                       std::to_string(world) + " ranks failed construction; no step runs";
  for (const auto& f : failed) report += "\n  " + f;
  emit(err, report);
  return false;
}

// The DP group `name` of `size` ranks, this one `rank`, over the store keys `key` of this run:
// NCCL for CUDA tensors where LibTorch has CUDA, else Gloo.
std::unique_ptr<DpGroup> make_group(const Worker& worker, const Rendezvous& rendezvous,
                                    const std::string& name, const std::string& key, int rank,
                                    int size) {
  auto group = std::make_unique<DpGroup>();
  group->name = name;
  group->size = size;
  group->rank = rank;
  group->timeout_s = worker.options().collective_timeout_s;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(rendezvous.run + key, rendezvous.store);
#if SC_TORCH_CUDA
  if (worker.setup.world.device.is_cuda()) {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = worker.timeout;
    group->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, size, opts);
  }
  if (!group->nccl)
#endif
  {
    auto opts = c10d::ProcessGroupGloo::Options::create(worker.timeout);
    const std::string& addr = worker.env.addr;
    const bool loopback = addr == "localhost" || addr.rfind("127.", 0) == 0;
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    opts->devices.push_back(
        ifname && *ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
        : loopback        ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                          : c10d::ProcessGroupGloo::createDefaultDevice());
    try {
      group->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, opts);
    } catch (const std::exception& e) {
      throw std::runtime_error("cannot form " + name + ": " + short_what(e));
    }
  }
  return group;
}

// The process groups of a stage (the expert group is destroyed before the dense one).
struct Groups {
  std::unique_ptr<DpGroup> dense;
  std::unique_ptr<DpGroup> expert;
};

// The process groups of this stage: the dense DP group (ranks stage * dp ... stage * dp + dp - 1)
// and, with EP above 1, the expert DP group of this EP rank (the ranks of the stage whose DP rank
// is ep_rank modulo ep), as Megatron's parallel_state builds them. With EP 1 the expert DP group
// has the dense group's members, and the dense group serves both. Sets each instance's group
// (--fault=expert-over-dense-group: the expert buffers too get the dense group, the wrong one).
Groups form_groups(const Worker& worker, const Rendezvous& rendezvous,
                   std::vector<RankInstance>& instances) {
  const std::string stage = std::to_string(worker.stage);
  Groups groups;
  groups.dense = make_group(worker, rendezvous, "the DP group of stage " + stage,
                            "dp-stage-" + stage, worker.dp_rank, worker.dp);
  for (RankInstance& i : instances) {
    if (i.inst == model::Instance::kExpert && worker.ep > 1 &&
        !worker.fault_here("expert-over-dense-group")) {
      const std::string ep_rank = std::to_string(worker.ep_rank);
      groups.expert = make_group(
          worker, rendezvous, "the expert DP group of stage " + stage + " EP rank " + ep_rank,
          "edp-stage-" + stage + "-ep-" + ep_rank, worker.edp_rank, worker.expert_dp);
      i.group = groups.expert.get();
    } else {
      i.group = groups.dense.get();
    }
  }
  return groups;
}

// "step K buffer B bucket U": one bucket's collective in messages.
std::string bucket_name(int step, size_t buffer, size_t bucket) {
  return "step " + std::to_string(step) + " buffer " + std::to_string(buffer) + " bucket " +
         std::to_string(bucket);
}

// The local grads of `instance`: this rank's bit field of every reduced gradient within the
// group that reduces it, so that the SUM over the group is the in-process mode's gradient
// exactly, in whatever order the collective adds. (Megatron's pre-scaling by 1/dp is exact only
// for some values and orders; the local grads stand for the already-scaled contributions.)
// Zeros for the parameters it does not hold, and everywhere with --fault=drop-grads.
std::vector<std::vector<float>> local_grads(const Worker& worker, const RankInstance& instance,
                                            const model::StepInputs& in) {
  std::vector<std::vector<float>> local(in.grads.size());
  for (int p : instance.params) {
    local[p].resize(in.grads[p].size());
    for (size_t e = 0; e < in.grads[p].size(); ++e) {
      local[p][e] = worker.fault_here("drop-grads")
                        ? 0.0f
                        : rig::grad_part(in.grads[p][e], instance.rank, instance.size);
    }
  }
  for (size_t p = 0; p < local.size(); ++p) {
    if (local[p].empty()) local[p].assign(in.grads[p].size(), 0.0f);
  }
  return local;
}

// Step `step` of `instance`: its local grads reduce-scattered bucket by bucket over its group,
// the optimizer step, and the param buckets all-gathered (the faults die and skip-all-gather
// strike here).
void step_instance(const Worker& worker, RankInstance& instance, const model::StepInputs& in,
                   int step, std::ostream& err) {
  instance.rig().write_main_grads(local_grads(worker, instance, in));
  const auto buffers = instance.rig().buffers();
  for (size_t b = 0; b < buffers.size(); ++b) {
    for (size_t u = 0; u < buffers[b]->buckets().size(); ++u) {
      reduce_scatter(*instance.group, buffers[b]->buckets()[u].grad_data, bucket_name(step, b, u));
    }
  }
  instance.rig().step_with_main_grads(in);
  if (step == 0 && worker.fault_here("die")) {
    // Mid-step: its DP group has reduced the grads and waits for its all-gather.
    emit(err, worker.me + ": killing itself with SIGKILL mid-step (--fault=die)");
    std::raise(SIGKILL);
  }
  if (worker.options().fault == "skip-all-gather") return;
  for (size_t b = 0; b < buffers.size(); ++b) {
    for (size_t u = 0; u < buffers[b]->buckets().size(); ++u) {
      all_gather(*instance.group, buffers[b]->buckets()[u].param_data, bucket_name(step, b, u));
    }
  }
}

// The digests of this rank's parameters after a step.
struct ParamDigests {
  uint64_t full = 0;  // of every parameter of the case, in case order
  std::string dense;  // hex, of the dense instance's parameters, in the rig's order
};

// This rank's digests after a step, from the model values of its instances.
ParamDigests param_digests(const model::CaseSpec& spec,
                           const std::vector<RankInstance>& instances) {
  std::vector<std::vector<float>> full(spec.params.size()), dense;
  for (const RankInstance& i : instances) {
    auto values = i.rig().model_values();
    for (size_t j = 0; j < values.size(); ++j) {
      if (i.inst == model::Instance::kDense) dense.push_back(values[j]);
      full[i.params[j]] = std::move(values[j]);
    }
  }
  ParamDigests digests;
  digests.full = digest_params(full);
  digests.dense = hex(digest_params(dense));
  return digests;
}

// After step `step`: how this rank's parameters differ from those of its replicas and (with EP
// above 1) its dense parameters from those of its dense DP group, read under `key`; "" when
// they do not.
std::string replica_problem(const Worker& worker, Rendezvous& rendezvous, const std::string& key,
                            int step, const ParamDigests& mine) {
  const double timeout_s = worker.options().collective_timeout_s;
  const std::string after = "after step " + std::to_string(step + 1);
  for (int r : worker.replicas) {
    const std::string theirs = store_get(
        *rendezvous.store, key + std::to_string(r),
        "step " + std::to_string(step) + " digest from rank " + std::to_string(r), timeout_s);
    if (theirs != hex(mine.full)) {
      return after + " its parameters (" + hex(mine.full) + ") differ from those of rank " +
             std::to_string(r) + " (" + theirs +
             (worker.ep > 1 ? "), same stage and EP rank" : "), same DP group");
    }
  }
  for (int d = 0; d < worker.dp && worker.ep > 1; ++d) {
    const int r = worker.stage * worker.dp + d;
    const std::string theirs = store_get(
        *rendezvous.store, key + "dense/" + std::to_string(r),
        "step " + std::to_string(step) + " dense digest from rank " + std::to_string(r), timeout_s);
    if (theirs != mine.dense) {
      return after + " its dense parameters (" + mine.dense + ") differ from those of rank " +
             std::to_string(r) + " (" + theirs + "), same DP group";
    }
  }
  return "";
}

// After step `step`: how this rank's parameters (digest `full`) and optimizer state differ from
// the in-process mode's; "" when they do not.
std::string in_process_problem(const Worker& worker, const std::vector<RankInstance>& instances,
                               const StageDigests& expected, int step, uint64_t full) {
  const std::string after = "after step " + std::to_string(step + 1);
  if (full != expected.params[step]) {
    return after + " its parameters (" + hex(full) + ") differ from the in-process mode's (" +
           hex(expected.params[step]) + ")";
  }
  // The fp32 main params and the moments see every bit of the reduced gradient, which 16-bit
  // model params may round away.
  for (const RankInstance& i : instances) {
    const bool is_expert = i.inst == model::Instance::kExpert;
    const uint64_t want = expected.state[step][is_expert ? worker.dp + i.rank : i.rank];
    const uint64_t got = i.rig().digest();
    if (got != want) {
      return after + " the optimizer state of its " + (is_expert ? "expert" : "dense") +
             " instance (owned pieces, main params, " + "moments: " + hex(got) +
             ") differs from the in-process mode's (" + hex(want) + ")";
    }
  }
  return "";
}

// Runs the steps, checking after each that every rank's full parameters equal its replicas'
// and the in-process mode's, and its dense parameters every rank's of its dense DP group.
// Returns the exit status.
int run_steps(const Worker& worker, Rendezvous& rendezvous, const model::CaseSpec& spec,
              std::vector<RankInstance>& instances, const StageDigests& expected, std::ostream& out,
              std::ostream& err) {
  const CliOptions& o = worker.options();
  uint64_t last = 0;
  for (int k = 0; k < o.steps; ++k) {
    const model::StepInputs in = main_job_step(spec, o.seed, k);
    if (k == 0 && worker.fault_here("stall")) {
      emit(err, worker.me + ": stalling before its first collective (--fault=stall)");
      std::this_thread::sleep_for(std::chrono::hours(1));
    }
    for (RankInstance& i : instances) step_instance(worker, i, in, k, err);
    const ParamDigests mine = param_digests(spec, instances);
    last = mine.full;
    const std::string key = rendezvous.run + "digest/" + std::to_string(k) + "/";
    store_set(*rendezvous.store, key + std::to_string(worker.env.rank), hex(last));
    store_set(*rendezvous.store, key + "dense/" + std::to_string(worker.env.rank), mine.dense);
    std::string problem = replica_problem(worker, rendezvous, key, k, mine);
    if (problem.empty()) problem = in_process_problem(worker, instances, expected, k, last);
    if (!problem.empty()) {
      emit(err, worker.me + ": FAILED: " + problem);
      return finish(worker, rendezvous, 1);
    }
  }
  emit(out, worker.me + ": " + std::to_string(o.steps) +
                " steps; after every step its parameters equal its DP group's and the "
                "in-process mode's, and its optimizer state the in-process rank's, bit for "
                "bit (params_digest=" + hex(last) + ")");
  return finish(worker, rendezvous, 0);
}

// The rank's run: rendezvous, construction (every rank learns every rank's outcome), process
// groups, then the steps. Returns the exit status; throws when the store or a collective fails.
int run_rank(const Worker& worker, std::ostream& out, std::ostream& err) {
  const CliOptions& o = worker.options();
  const Setup& setup = worker.setup;
  Rendezvous rendezvous{
      connect_store(worker.env, worker.timeout, worker.options().collective_timeout_s),
      "shardcheck/" + std::to_string(o.seed) + "/"};
  const model::CaseSpec spec = setup.world.stage_case(o, worker.stage, worker.ep_rank);
  std::string outcome;
  std::vector<RankInstance> instances = build_instances(worker, spec, outcome);
  // The in-process mode's digests, computed before the first collective so that its time
  // does not count against the collective timeout.
  StageDigests expected;
  if (outcome == "OK") {
    auto digests = stage_digests(o, setup.world, setup.behaviour, worker.stage, worker.ep_rank);
    if (auto* why = std::get_if<std::string>(&digests)) throw std::runtime_error(*why);
    expected = std::get<StageDigests>(digests);
  }
  if (!every_rank_constructed(worker, rendezvous, outcome, err)) {
    return finish(worker, rendezvous, 1);
  }
  const Groups groups = form_groups(worker, rendezvous, instances);
  if (worker.fault_here("exit")) {
    emit(err, worker.me + ": exiting with status 3 (--fault=exit)");
    std::_Exit(3);
  }
  return run_steps(worker, rendezvous, spec, instances, expected, out, err);
}

}  // namespace

int run_worker(const CliOptions& options, std::ostream& out, std::ostream& err) {
  auto env_or = read_env();
  if (auto* why = std::get_if<std::string>(&env_or)) {
    emit(err, "shardcheck-sim: " + *why);
    return 2;
  }
  const Env env = std::get<Env>(env_or);
  const int world = options.world.pp * options.world.dp;
  if (env.world != world) {
    emit(err, "shardcheck-sim: WORLD_SIZE=" + std::to_string(env.world) + " but --pp=" +
                  std::to_string(options.world.pp) + " --dp=" +
                  std::to_string(options.world.dp) + " make " + std::to_string(world) +
                  " ranks");
    return 2;
  }
  auto setup_or = prepare(options);
  if (auto* why = std::get_if<std::string>(&setup_or)) {
    emit(err, "shardcheck-sim: " + *why);
    return 2;
  }
  const Worker worker = make_worker(env, world, std::move(std::get<Setup>(setup_or)));
  try {
    return run_rank(worker, out, err);
  } catch (const std::exception& e) {
    emit(err, worker.me + ": FAILED: " + short_what(e));
    return 1;
  }
}

namespace {

// The ranks' arguments: this run's less the launcher's own (--name=value or --name value), and
// --multi-process.
std::vector<std::string> rank_args(const std::vector<std::string>& args) {
  std::vector<std::string> out = cli_args_without(args, {"processes", "launch-timeout"});
  out.push_back("--multi-process");
  return out;
}

// The configuration line that heads the launcher's output.
std::string launcher_header(const CliOptions& options, const Setup& setup, const LaunchSpec& spec) {
  std::ostringstream header;
  const input::WorldSizes& w = setup.o.world;
  header << "SEED=" << options.seed << " model=" << setup.world.model.name
         << (options.model_file.empty() ? "" : " model_file=" + options.model_file)
         << " scale=" << (options.scale > 0 ? options.scale : 64)
         << " mode=multi-process processes=" << options.processes << " pp=" << w.pp
         << " vpp=" << w.vpp
         << (w.pipeline_layout.empty() ? "" : " pipeline_layout=" + w.pipeline_layout)
         << " ep=" << w.ep << " dp=" << w.dp << " expert_dp=" << w.dp / w.ep << " tp=" << w.tp
         << (w.tp > 1 ? " tp_rank=0" : "") << " steps=" << options.steps
         << " offload=" << (options.offload ? "on" : "off")
         << " offload_fraction=" << options.offload_fraction
         << " precision_aware=" << (options.precision_aware ? "on" : "off")
         << " device=" << (setup.world.device.is_cuda() ? "cuda backend=nccl" : "cpu backend=gloo")
         << " variant=" << options.variants.front() << " master=" << spec.master_addr << ":"
         << spec.master_port << " collective_timeout=" << options.collective_timeout_s << "s";
  if (!options.fault.empty()) {
    header << " fault=" << options.fault
           << (options.fault_rank >= 0 ? "@" + std::to_string(options.fault_rank) : std::string());
  }
  return header.str();
}

}  // namespace

int run_local_launcher(const CliOptions& options, std::ostream& out, std::ostream& err) {
  auto setup_or = prepare(options);
  if (auto* why = std::get_if<std::string>(&setup_or)) {
    emit(err, "shardcheck-sim: " + *why);
    return 2;
  }
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    emit(err, "shardcheck-sim: cannot find this program's path (/proc/self/exe)");
    return 2;
  }
  const Setup& setup = std::get<Setup>(setup_or);
  LaunchSpec spec;
  spec.program.assign(exe, static_cast<size_t>(n));
  spec.args = rank_args(options.args);
  spec.processes = options.processes;
  spec.timeout_s = options.launch_timeout_s;
  // When a rank fails, the others get the collective timeout (and a little) to see it and exit
  // with their own error before the launcher stops them.
  spec.grace_s = options.collective_timeout_s + 2;
  spec.master_port = rig::pick_free_port(spec.master_addr);
  emit(out, launcher_header(options, setup, spec));
  const LaunchResult result = launch_local(spec);
  if (result.ok()) {
    emit(out, "multi-process: " + std::to_string(options.processes) + " of " +
                  std::to_string(options.processes) +
                  " ranks passed: after every step each rank's parameters equal its DP group's "
                  "and the in-process mode's, bit for bit");
    return 0;
  }
  std::string report = "multi-process: the world failed";
  for (const std::string& line : describe_failures(result, spec.timeout_s)) report += "\n  " + line;
  std::string args;
  for (const std::string& a : options.args) args += " " + a;
  report += "\nreproduce: shardcheck-sim" + args;
  emit(err, report);
  return 1;
}

}  // namespace sc::app
