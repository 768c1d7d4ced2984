#include "sim/app/cli.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <sstream>

#include "model/memory.h"
#include "model/reference.h"
#include "model/shard.h"
#include "sim/rig/fma_probe.h"
#include "sim/input/inventory_file.h"
#include "sim/app/in_process.h"
#include "sim/app/jobs.h"
#include "sim/app/multiprocess.h"
#include "sim/picture/picture.h"
#include "sim/rig/rng.h"
#include "sim/input/args.h"
#include "sim/port/behaviour.h"
#include "sim/port/device.h"
#include "sim/rig/rank_rig.h"

namespace sc::app {

using picture::draw_html;
using picture::draw_svg;
using picture::PictureInput;
using picture::PictureStage;
using picture::RankOutcome;
using picture::write_text_file;

namespace {

std::string json_escape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

// Marks `row` failed with `outcome` and the parameter it fails on (-1: none), unless it failed
// already.
void fail_row(const model::CaseSpec& spec, const std::string& outcome, int param, RankOutcome& row) {
  if (!row.ok) return;
  row.ok = false;
  row.outcome = outcome;
  if (param >= 0) row.failing_param = spec.params[param].name;
}

// The layout-only mode's outcome: the model predicts the leaf check (the first fp32 view
// installed is a non-leaf).
void predict_outcome(const sut::Behaviour& behaviour, const model::CaseSpec& spec,
                     const model::RankPlan& plan, RankOutcome& row) {
  if (!behaviour.has(sut::Deviation::kPr6982) && spec.cpu_offload &&
      model::owns_fp32_piece(spec, plan)) {
    for (const auto& g : plan.groups) {
      for (const auto& e : g.installed) {
        if (e.kind == model::ShardKind::kFp32View) {
          fail_row(spec,
                   "ValueError: can't optimize a non-leaf Tensor (first: " +
                       spec.params[e.param].name + ") [predicted]",
                   e.param, row);
        }
      }
    }
  }
}

// With steps, steps `rank` and the reference alike and adds to `row` the digest and the largest
// difference between them (per parameter too with --heat).
void compare_with_reference(const CliOptions& options, torch::Device device,
                            const model::CaseSpec& spec, const model::RankPlan& plan,
                            JobRank& rank, RankOutcome& row) {
  const auto kernels = rig::torch_cpu_kernels();
  if (options.steps == 0 || !kernels) return;
  rig::RankRig& rig = rank.rig();
  model::RankReference ref(spec, plan, rig.initial_values(), *kernels, device.is_cuda());
  for (int k = 0; k < options.steps; ++k) ref.step(rank.step(k));
  row.max_diff = 0.0;
  row.digest = row.digest * 0x9E3779B97F4A7C15ull ^ rig.digest();
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
      const std::vector<float> got = rig.model_piece(g, i);
      const std::vector<float>& want = ref.model_piece(g, i);
      double piece_diff = 0;
      for (size_t e = 0; e < got.size(); ++e) {
        const double d = std::fabs(static_cast<double>(got[e]) - want[e]);
        if (!(d <= *row.max_diff)) row.max_diff = std::isnan(d) ? INFINITY : d;
        if (!(d <= piece_diff)) piece_diff = std::isnan(d) ? INFINITY : d;
      }
      if (options.heat) {
        row.param_diff.emplace_back(spec.params[plan.groups[g].installed[i].param].name,
                                    piece_diff);
      }
    }
  }
}

// Adds one instance of one rank to `row`: counts, bytes, outcome and, with steps, the largest
// difference from the reference.
void evaluate(const CliOptions& options, const sut::Behaviour& behaviour, torch::Device device,
              const model::CaseSpec& spec, model::Instance inst, int64_t rank, RankOutcome& row) {
  const auto layouts = model::full_param_layout(spec);
  const model::RankPlan plan = model::plan_rank(spec, layouts, inst, rank);
  for (const auto& g : plan.groups) {
    for (const auto& e : g.installed) {
      ++row.pieces;
      row.pieces_fp32 += spec.params[e.param].dtype == model::DType::kFloat32 ? 1 : 0;
    }
  }
  const model::RankBytes bytes = model::rank_bytes(spec, layouts, plan, device.is_cuda());
  row.bytes += bytes;
  if (options.layout_only) {
    row.accel_bytes += bytes.accelerator.at_construction();
    row.host_bytes += bytes.host.at_construction();
    predict_outcome(behaviour, spec, plan, row);
    return;
  }
  JobRank port(spec, inst, rank, behaviour, device, options.seed);
  const rig::RankObservation& obs = port.rig().construction();
  row.accel_bytes += obs.accel_bytes;
  row.host_bytes += obs.host_bytes;
  if (!port.ok()) {
    fail_row(spec, port.outcome(), obs.failing_param, row);
    return;
  }
  compare_with_reference(options, device, spec, plan, port, row);
}

std::string fmt_diff(double diff) {
  std::ostringstream os;
  os << std::setprecision(3) << diff;
  return os.str();
}

}  // namespace

namespace {

// Wall time of the run, CPU time and peak resident memory of the process.
struct RunStats {
  double wall_s = 0, cpu_s = 0;
  int64_t peak_rss_bytes = 0;
};

RunStats measure(std::chrono::steady_clock::time_point start) {
  RunStats s;
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) == 0) {
    s.cpu_s = static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
              static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
    s.peak_rss_bytes = static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
  }
  return s;
}

std::string side_json(const model::SideBytes& side) {
  return "{\"param_buffer\": " + std::to_string(side.param_buffer) +
         ", \"grad_buffer\": " + std::to_string(side.grad_buffer) +
         ", \"main_params\": " + std::to_string(side.main_params) +
         ", \"grad_copies\": " + std::to_string(side.grad_copies) +
         ", \"optimizer_state\": " + std::to_string(side.optimizer_state) + "}";
}

std::string bytes_json(const model::RankBytes& bytes) {
  return "{\"accelerator\": " + side_json(bytes.accelerator) +
         ", \"host\": " + side_json(bytes.host) +
         ", \"host_pinned\": " + std::to_string(bytes.host_pinned) + "}";
}

void print_json(std::ostream& out, const std::string& header, const std::vector<RankOutcome>& rows,
                const std::optional<RunStats>& stats) {
  out << "{\"config\": \"" << json_escape(header) << "\", \"ranks\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const RankOutcome& r = rows[i];
    out << (i ? ",\n  " : "\n  ") << "{\"variant\": \"" << r.variant << "\", \"rank\": " << r.rank
        << ", \"stage\": " << r.stage << ", \"dp_rank\": " << r.dp_rank
        << ", \"ep_rank\": " << r.ep_rank << ", \"params\": " << r.params
        << ", \"params_fp32_kept\": " << r.params_fp32_kept << ", \"pieces\": " << r.pieces
        << ", \"pieces_fp32\": " << r.pieces_fp32 << ", \"ok\": " << (r.ok ? "true" : "false")
        << ", \"accel_bytes\": " << (r.ok ? std::to_string(r.accel_bytes) : "null")
        << ", \"host_bytes\": " << (r.ok ? std::to_string(r.host_bytes) : "null")
        << ", \"bytes\": " << (r.ok ? bytes_json(r.bytes) : "null")
        << ", \"max_diff\": " << (r.max_diff ? fmt_diff(*r.max_diff) : "null")
        << ", \"outcome\": \"" << json_escape(r.outcome) << "\"}";
  }
  out << "\n]";
  if (stats) {
    out << ", \"stats\": {\"wall_s\": " << stats->wall_s << ", \"cpu_s\": " << stats->cpu_s
        << ", \"peak_rss_bytes\": " << stats->peak_rss_bytes << "}";
  }
  out << "}\n";
}

void print_table(std::ostream& out, const CliOptions& options, int64_t scale,
                 const std::string& header, const std::vector<RankOutcome>& rows) {
  out << header << "\n";
  out << "stage: pipeline stage; params/fp32: parameters held (fp32-kept); pieces/fp32: shard\n"
         "pieces this rank owns and hands to the optimizer (of fp32 parameters); bytes at scale "
      << scale << ":\n"
      << "accel_bytes/host_bytes after construction, accel_step/host_step once the optimizer has\n"
      << "stepped (optimizer state and grad copies added; the model's accounting, split by kind\n"
      << "in --json); max_diff: largest |port - reference| over owned elements after "
      << (options.layout_only ? 0 : options.steps) << " steps,\n0 = bit-identical"
      << (options.layout_only ? "; outcomes predicted by the model" : "") << "\n";
  if (options.world.tp > 1) {
    out << "tp=" << options.world.tp
        << ": the rows are TP rank 0 of each stage and DP rank; every TP "
        << "rank of a stage holds the same structure\n";
  }
  out << std::left << std::setw(9) << "variant" << std::right << std::setw(5) << "rank"
      << std::setw(6) << "stage" << std::setw(4) << "dp" << std::setw(4) << "ep" << std::setw(8)
      << "params" << std::setw(6) << "fp32" << std::setw(8) << "pieces" << std::setw(6) << "fp32"
      << std::setw(13) << "accel_bytes" << std::setw(13) << "host_bytes" << std::setw(14)
      << "accel_step" << std::setw(14) << "host_step" << std::setw(10) << "max_diff"
      << "  outcome\n";
  auto bytes = [](const RankOutcome& r, int64_t n) { return r.ok ? std::to_string(n) : "-"; };
  for (const RankOutcome& r : rows) {
    out << std::left << std::setw(9) << r.variant << std::right << std::setw(5) << r.rank
        << std::setw(6) << r.stage << std::setw(4) << r.dp_rank << std::setw(4) << r.ep_rank
        << std::setw(8) << r.params << std::setw(6) << r.params_fp32_kept << std::setw(8)
        << r.pieces << std::setw(6) << r.pieces_fp32 << std::setw(13) << bytes(r, r.accel_bytes)
        << std::setw(13) << bytes(r, r.host_bytes) << std::setw(14)
        << bytes(r, r.bytes.accelerator.after_step()) << std::setw(14)
        << bytes(r, r.bytes.host.after_step()) << std::setw(10)
        << (r.max_diff ? fmt_diff(*r.max_diff) : "-") << "  " << r.outcome << "\n";
  }
  for (const std::string& vname : options.variants) {
    int total = 0, failed = 0;
    for (const RankOutcome& r : rows) {
      if (r.variant != vname) continue;
      ++total;
      failed += r.ok ? 0 : 1;
    }
    out << vname << ": " << failed << " of " << total << " ranks fail construction\n";
  }
}

// The pipeline split in the header: " layout=L", " first_stage_layers=N ...", or nothing (even).
std::string pipeline_split(const input::WorldSizes& world) {
  std::string s;
  if (!world.pipeline_layout.empty()) s += " pipeline_layout=" + world.pipeline_layout;
  if (world.first_stage_layers > 0) {
    s += " first_stage_layers=" + std::to_string(world.first_stage_layers);
  }
  if (world.last_stage_layers > 0) {
    s += " last_stage_layers=" + std::to_string(world.last_stage_layers);
  }
  return s;
}

std::string stats_line(const RunStats& stats) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2) << "stats: wall " << stats.wall_s << " s, cpu "
     << stats.cpu_s << " s, peak resident memory "
     << static_cast<double>(stats.peak_rss_bytes) / (1 << 20) << " MiB";
  return os.str();
}

// The main job's world, resolved, and in tensor mode checked against the memory budget before
// any tensor is built; or the message.
std::variant<ResolvedWorld, std::string> prepare_world(const CliOptions& options) {
  const int64_t scale = options.scale > 0 ? options.scale : (options.layout_only ? 1 : 64);
  auto resolved = resolve_world(options, scale);
  if (auto* why = std::get_if<std::string>(&resolved)) return *why;
  const ResolvedWorld& world = std::get<ResolvedWorld>(resolved);
  if (!options.layout_only) {
    const int64_t budget =
        options.memory_budget > 0 ? options.memory_budget : default_memory_budget();
    if (auto why = memory_budget_refusal(options, world.model, world.sizes, world.scale, budget)) {
      return *why;
    }
  }
  return resolved;
}

// The configuration line that heads the output.
std::string run_header(const CliOptions& options, const ResolvedWorld& world) {
  const input::WorldSizes& w = world.sizes;
  std::ostringstream fraction;
  fraction << options.offload_fraction;
  return "SEED=" + std::to_string(options.seed) + " model=" + world.model.name +
         (options.model_file.empty() ? "" : " model_file=" + options.model_file) +
         " scale=" + std::to_string(world.scale) +
         " mode=" + (options.layout_only ? "layout-only" : "tensors") +
         " steps=" + std::to_string(options.layout_only ? 0 : options.steps) +
         " tp=" + std::to_string(w.tp) + (w.tp > 1 ? " tp_rank=0" : "") +
         " pp=" + std::to_string(w.pp) + " vpp=" + std::to_string(w.vpp) + pipeline_split(w) +
         " ep=" + std::to_string(w.ep) + " dp=" + std::to_string(w.dp) +
         " expert_dp=" + std::to_string(w.dp / w.ep) +
         " offload=" + (options.offload ? "on" : "off") + " offload_fraction=" + fraction.str() +
         " precision_aware=" + (options.precision_aware ? "on" : "off") +
         " device=" + (world.device.is_cuda() ? "cuda" : "cpu") + " torch=" + sut::torch_version() +
         " variants=" + input::join(options.variants, ",");
}

// The message when a picture file (--svg, --html) cannot be opened for writing, else nothing.
std::optional<std::string> unwritable_picture_file(const CliOptions& options) {
  for (const std::string* path : {&options.svg, &options.html}) {
    if (path->empty()) continue;
    std::ofstream probe(*path, std::ios::app);
    if (!probe) return "cannot write " + *path + ": " + std::strerror(errno);
  }
  return std::nullopt;
}

// The main job's rows: every variant, stage and DP rank, each instance evaluated.
std::vector<RankOutcome> compute_rows(const CliOptions& options, const ResolvedWorld& world) {
  const input::WorldSizes& w = world.sizes;
  std::vector<RankOutcome> rows;
  for (const std::string& vname : options.variants) {
    const sut::Behaviour behaviour = *sut::behaviour_by_name(vname);
    for (int stage = 0; stage < w.pp; ++stage) {
      for (int d = 0; d < w.dp; ++d) {
        const int ep_rank = d % w.ep;
        const model::CaseSpec c = world.stage_case(options, stage, ep_rank);
        RankOutcome row;
        row.variant = vname;
        row.rank = stage * w.dp + d;
        row.stage = stage;
        row.dp_rank = d;
        row.ep_rank = ep_rank;
        for (const auto& p : c.params) {
          ++row.params;
          row.params_fp32_kept += p.keep_in_fp32 ? 1 : 0;
        }
        for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
          if (!model::instance_present(c, inst)) continue;
          const int64_t rank = inst == model::Instance::kExpert ? d / w.ep : d;
          evaluate(options, behaviour, world.device, c, inst, rank, row);
        }
        if (row.ok) row.outcome = "OK";
        rows.push_back(row);
      }
    }
  }
  return rows;
}

// --check-determinism: computes the rows again and compares the digests of all final states.
// Returns 0 with the line to print in `line`, or the exit status once `err` has the failure.
int check_determinism(const CliOptions& options, const ResolvedWorld& world,
                      const std::vector<RankOutcome>& rows, std::ostream& err, std::string& line) {
  if (options.layout_only || options.steps == 0) {
    err << "shardcheck-sim: --check-determinism needs tensor mode with --steps above 0\n";
    return 2;
  }
  const std::vector<RankOutcome> again = compute_rows(options, world);
  uint64_t all = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].digest != again[i].digest) {
      err << "shardcheck-sim: determinism check failed: " << rows[i].variant << " rank "
          << rows[i].rank << " digests " << std::hex << rows[i].digest << " and " << again[i].digest
          << std::dec << "\n"
          << "reproduce: shardcheck-sim --seed=" << options.seed << " --check-determinism\n";
      return 1;
    }
    all = all * 0x100000001b3ull ^ rows[i].digest;
  }
  std::ostringstream os;
  os << "determinism: two runs, identical digests of all final states (" << std::hex << all << ")";
  line = os.str();
  return 0;
}

// Draws the world (--svg) and writes the report (--html); the message when a file cannot be
// written, else nothing.
std::optional<std::string> write_pictures(const CliOptions& options, const ResolvedWorld& world,
                                          const std::string& header, const std::vector<RankOutcome>& rows) {
  const input::WorldSizes& w = world.sizes;
  PictureInput pic;
  pic.title = "shardcheck-sim: " + world.model.name + ", TP " + std::to_string(w.tp) + " PP " +
              std::to_string(w.pp) + " VPP " + std::to_string(w.vpp) + " EP " +
              std::to_string(w.ep) + " DP " + std::to_string(w.dp) +
              (options.offload ? ", offload on" : ", offload off") +
              (options.layout_only ? ", layout only (outcomes predicted)" : "");
  pic.header = header;
  pic.pp = w.pp;
  pic.dp = w.dp;
  pic.ep = w.ep;
  pic.steps = options.heat ? options.steps : 0;
  pic.variants = options.variants;
  for (int stage = 0; stage < w.pp; ++stage) {
    PictureStage st;
    st.stage = stage;
    st.c = world.stage_case(options, stage, 0);
    pic.stages.push_back(std::move(st));
  }
  pic.ranks = rows;
  const std::string svg = draw_svg(pic);
  std::optional<std::string> why;
  if (!options.svg.empty()) why = write_text_file(options.svg, svg);
  if (!why && !options.html.empty()) why = write_text_file(options.html, draw_html(pic, svg));
  return why;
}

}  // namespace

int run_cli(const CliOptions& options, std::ostream& out, std::ostream& err) {
  if (options.help) {
    out << cli_usage();
    return 0;
  }
  if (options.processes > 0 || options.multi_process) {
    if (auto why = check_multi_process_options(options)) {
      err << "shardcheck-sim: " << *why << "\n";
      return 2;
    }
    return options.processes > 0 ? run_local_launcher(options, out, err)
                                 : run_worker(options, out, err);
  }
  const auto start = std::chrono::steady_clock::now();
  auto prepared = prepare_world(options);
  if (auto* why = std::get_if<std::string>(&prepared)) {
    err << "shardcheck-sim: " << *why << "\n";
    return 2;
  }
  const ResolvedWorld& world = std::get<ResolvedWorld>(prepared);
  const std::string header = run_header(options, world);
  // The pictures' files are checked before the run, which may take a while.
  if (auto why = unwritable_picture_file(options)) {
    err << "shardcheck-sim: " << *why << "\n";
    return 2;
  }
  std::vector<RankOutcome> rows = compute_rows(options, world);
  std::string determinism;
  if (options.check_determinism) {
    if (const int status = check_determinism(options, world, rows, err, determinism)) {
      return status;
    }
  }
  if (!options.svg.empty() || !options.html.empty()) {
    if (auto why = write_pictures(options, world, header, rows)) {
      err << "shardcheck-sim: " << *why << "\n";
      return 2;
    }
  }
  const std::optional<RunStats> stats =
      options.stats ? std::optional<RunStats>(measure(start)) : std::nullopt;
  if (options.json) {
    print_json(out, header, rows, stats);
  } else {
    print_table(out, options, world.scale, header, rows);
    if (!determinism.empty()) out << determinism << "\n";
    if (stats) out << stats_line(*stats) << "\n";
  }
  return 0;
}

int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  auto parsed = parse_cli(args);
  if (auto* message = std::get_if<std::string>(&parsed)) {
    err << "shardcheck-sim: " << *message << "\n";
    return 2;
  }
  try {
    return run_cli(std::get<CliOptions>(parsed), out, err);
  } catch (const std::exception& e) {
    err << "shardcheck-sim: internal error: " << e.what() << "\n";
    return 3;
  }
}

}  // namespace sc::app
