#include "sim/app/options.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <iomanip>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>

#include "sim/input/args.h"
#include "sim/port/behaviour.h"

namespace sc::app {

namespace {

bool parse_double(const std::string& text, double& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(out);
}

// A decimal seed, or a 40-hex commit hash whose low 64 bits (last 16 hex digits) are the seed.
bool parse_seed(const std::string& text, uint64_t& out) {
  if (text.size() == 40 &&
      text.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos) {
    const std::string low = text.substr(24);
    auto [ptr, ec] = std::from_chars(low.data(), low.data() + low.size(), out, 16);
    return ec == std::errc() && ptr == low.data() + low.size();
  }
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty();
}

bool parse_on_off(const std::string& text, bool& out) {
  if (text == "on" || text == "true" || text == "1") return out = true, true;
  if (text == "off" || text == "false" || text == "0") return out = false, true;
  return false;
}

}  // namespace

std::optional<int64_t> parse_byte_size(const std::string& text) {
  static const std::pair<const char*, double> kUnits[] = {
      {"KiB", 1024.0},          {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3},        {"MB", 1e6},
      {"GB", 1e9},              {"TB", 1e12},       {"B", 1.0}};
  std::string number = text;
  double unit = 1.0;
  for (const auto& [suffix, factor] : kUnits) {
    const size_t n = std::char_traits<char>::length(suffix);
    if (text.size() > n && text.compare(text.size() - n, n, suffix) == 0) {
      number = text.substr(0, text.size() - n);
      unit = factor;
      break;
    }
  }
  if (number.empty() || number.find_first_not_of("0123456789.") != std::string::npos) {
    return std::nullopt;
  }
  double value = 0;
  if (!parse_double(number, value)) return std::nullopt;
  const double bytes = std::floor(value * unit);
  if (!(bytes >= 1.0) || bytes >= 4611686018427387904.0) return std::nullopt;  // [1, 2^62)
  return static_cast<int64_t>(bytes);
}

namespace {

// The options being parsed, with what the checks across options need to know.
struct ParsedCli {
  CliOptions options;
  bool model_named = false;  // --model was given (even with the default model)
};

// --model=NAME: a built-in model.
std::optional<std::string> apply_model(const input::OptionArg& arg, ParsedCli& parsed) {
  bool known = false;
  for (const auto& m : input::inventory_names()) known |= m == arg.value;
  if (!known)
    return arg.bad("unknown model; known: " + input::join(input::inventory_names(), ", "));
  parsed.options.model = arg.value;
  parsed.model_named = true;
  return std::nullopt;
}

// --model-file=FILE.
std::optional<std::string> apply_model_file(const input::OptionArg& arg, ParsedCli& parsed) {
  if (arg.value.empty()) return arg.bad("expected a file name");
  parsed.options.model_file = arg.value;
  return std::nullopt;
}

// --variant=A[,B...] or all.
std::optional<std::string> apply_variant(const input::OptionArg& arg, ParsedCli& parsed) {
  std::vector<std::string>& variants = parsed.options.variants;
  variants.clear();
  if (arg.value == "all") {
    for (const auto& b : sut::all_behaviours()) variants.push_back(b.name);
    return std::nullopt;
  }
  std::stringstream ss(arg.value);
  std::string v;
  while (std::getline(ss, v, ',')) {
    if (!sut::behaviour_by_name(v)) {
      std::vector<std::string> known;
      for (const auto& b : sut::all_behaviours()) known.push_back(b.name);
      return arg.bad("unknown variant '" + v +
                     "': a variant is upstream plus changes joined with '+' (pr6982, F1 ... F9, "
                     "pr4547, pr5077, fused-host-adamw, pipelined; patched: every fix), or a "
                     "mutant; for example: " +
                     input::join(known, ", "));
    }
    variants.push_back(v);
  }
  if (variants.empty()) return arg.bad("no variant named");
  return std::nullopt;
}

// --pp, --vpp, --ep, --dp, --tp: a parallel size.
std::optional<std::string> apply_parallel_size(const input::OptionArg& arg, ParsedCli& parsed) {
  const auto n = input::parse_integer(arg.value, 1, 65536);
  if (!n) return arg.bad("expected an integer from 1 to 65536");
  input::WorldSizes& world = parsed.options.world;
  int& field = arg.name == "pp"    ? world.pp
               : arg.name == "vpp" ? world.vpp
               : arg.name == "ep"  ? world.ep
               : arg.name == "tp"  ? world.tp
                                   : world.dp;
  field = static_cast<int>(*n);
  return std::nullopt;
}

// --first-stage-layers, --last-stage-layers: an uneven pipeline split.
std::optional<std::string> apply_stage_layers(const input::OptionArg& arg, ParsedCli& parsed) {
  const auto n = input::parse_integer(arg.value, 1, 100000);
  if (!n) return arg.bad("expected an integer from 1 to 100000");
  input::WorldSizes& world = parsed.options.world;
  (arg.name == "first-stage-layers" ? world.first_stage_layers : world.last_stage_layers) =
      static_cast<int>(*n);
  return std::nullopt;
}

// --pipeline-layout=L|none.
std::optional<std::string> apply_pipeline_layout(const input::OptionArg& arg, ParsedCli& parsed) {
  if (arg.value.empty()) return arg.bad("expected a layout such as Et|tt|tL, or none");
  if (arg.value != "none") {
    auto layout = input::parse_pipeline_layout(arg.value);
    if (auto* why = std::get_if<std::string>(&layout)) return arg.bad(*why);
  }
  parsed.options.world.pipeline_layout = arg.value;
  return std::nullopt;
}

// --offload=on|off.
std::optional<std::string> apply_offload(const input::OptionArg& arg, ParsedCli& parsed) {
  if (!parse_on_off(arg.value, parsed.options.offload)) return arg.bad("expected on or off");
  return std::nullopt;
}

// --offload-fraction=F in [0, 1].
std::optional<std::string> apply_offload_fraction(const input::OptionArg& arg, ParsedCli& parsed) {
  double& fraction = parsed.options.offload_fraction;
  if (!parse_double(arg.value, fraction) || fraction < 0.0 || fraction > 1.0) {
    return arg.bad("the offload fraction must be a number in [0, 1]");
  }
  return std::nullopt;
}

// --bucket-size=N|none.
std::optional<std::string> apply_bucket_size(const input::OptionArg& arg, ParsedCli& parsed) {
  if (arg.value == "none") {
    parsed.options.bucket_size.reset();
    return std::nullopt;
  }
  parsed.options.bucket_size = input::parse_integer(arg.value, 1, INT64_MAX);
  if (!parsed.options.bucket_size) return arg.bad("expected a positive element count or none");
  return std::nullopt;
}

// --precision-aware=on|off.
std::optional<std::string> apply_precision_aware(const input::OptionArg& arg, ParsedCli& parsed) {
  if (!parse_on_off(arg.value, parsed.options.precision_aware)) {
    return arg.bad("expected on or off");
  }
  return std::nullopt;
}

// --device=auto|cpu|cuda.
std::optional<std::string> apply_device(const input::OptionArg& arg, ParsedCli& parsed) {
  if (arg.value != "auto" && arg.value != "cpu" && arg.value != "cuda") {
    return arg.bad("expected auto, cpu or cuda");
  }
  parsed.options.device = arg.value;
  return std::nullopt;
}

// --seed=N|HASH.
std::optional<std::string> apply_seed(const input::OptionArg& arg, ParsedCli& parsed) {
  if (!parse_seed(arg.value, parsed.options.seed)) {
    return arg.bad("expected a decimal seed or a 40-hex hash");
  }
  return std::nullopt;
}

// --steps=N from 0 to 100.
std::optional<std::string> apply_steps(const input::OptionArg& arg, ParsedCli& parsed) {
  const auto n = input::parse_integer(arg.value, 0, 100);
  if (!n) return arg.bad("expected an integer from 0 to 100");
  parsed.options.steps = static_cast<int>(*n);
  return std::nullopt;
}

// --scale=N, positive.
std::optional<std::string> apply_scale(const input::OptionArg& arg, ParsedCli& parsed) {
  const auto n = input::parse_integer(arg.value, 1, INT64_MAX);
  if (!n) return arg.bad("expected a positive integer");
  parsed.options.scale = *n;
  return std::nullopt;
}

// --memory-budget=BYTES.
std::optional<std::string> apply_memory_budget(const input::OptionArg& arg, ParsedCli& parsed) {
  const auto bytes = parse_byte_size(arg.value);
  if (!bytes) return arg.bad("expected a byte count such as 8GiB, 512MiB or 1000000");
  parsed.options.memory_budget = *bytes;
  return std::nullopt;
}

// --processes=N from 1 to 1024.
std::optional<std::string> apply_processes(const input::OptionArg& arg, ParsedCli& parsed) {
  const auto n = input::parse_integer(arg.value, 1, 1024);
  if (!n) return arg.bad("expected an integer from 1 to 1024");
  parsed.options.processes = static_cast<int>(*n);
  return std::nullopt;
}

// --collective-timeout=S, --launch-timeout=S.
std::optional<std::string> apply_timeout(const input::OptionArg& arg, ParsedCli& parsed) {
  double t = 0;
  if (!parse_double(arg.value, t) || t <= 0 || t > 86400) {
    return arg.bad("expected seconds above 0, at most 86400");
  }
  CliOptions& options = parsed.options;
  (arg.name == "collective-timeout" ? options.collective_timeout_s : options.launch_timeout_s) = t;
  return std::nullopt;
}

// --fault=KIND[@RANK].
std::optional<std::string> apply_fault(const input::OptionArg& arg, ParsedCli& parsed) {
  CliOptions& options = parsed.options;
  const size_t at = arg.value.find('@');
  options.fault = arg.value.substr(0, at);
  options.fault_rank = -1;
  if (options.fault != "drop-grads" && options.fault != "stall" && options.fault != "exit" &&
      options.fault != "die" && options.fault != "skip-all-gather" &&
      options.fault != "expert-over-dense-group") {
    return arg.bad(
        "unknown fault; known: drop-grads, stall, exit, die, skip-all-gather, "
        "expert-over-dense-group");
  }
  if (at != std::string::npos) {
    const auto rank = input::parse_integer(arg.value.substr(at + 1), 0, 65535);
    if (!rank) return arg.bad("expected KIND@RANK with a rank from 0");
    options.fault_rank = static_cast<int>(*rank);
  }
  return std::nullopt;
}

// --svg=FILE, --html=FILE.
std::optional<std::string> apply_picture_file(const input::OptionArg& arg, ParsedCli& parsed) {
  if (arg.value.empty()) return arg.bad("expected a file name");
  (arg.name == "svg" ? parsed.options.svg : parsed.options.html) = arg.value;
  return std::nullopt;
}

// A flag's handler: sets `CliOptions::*field`.
template <bool CliOptions::*field>
std::optional<std::string> set_cli_flag(const input::OptionArg&, ParsedCli& parsed) {
  parsed.options.*field = true;
  return std::nullopt;
}

// The options that choose the model, the world, the variants and the run, with `model_help`
// the --model help line.
std::vector<input::Option<ParsedCli>> model_and_world_options(const std::string& model_help) {
  return {
      {"model", "NAME", model_help.c_str(), apply_model},
      {"model-file", "FILE", "a model described in a JSON file (see models/README.md)",
       apply_model_file},
      {"variant", "A[,B...]",
       "port variants (upstream,pr6982), or 'all'; a variant is\n"
       "upstream plus changes: pr6982+F1, patched-F3, patched+pipelined",
       apply_variant},
      {"pp", "N", "parallel sizes (8, 3, 4, 4); ep divides dp", apply_parallel_size},
      {"vpp", "N", nullptr, apply_parallel_size},
      {"ep", "N", nullptr, apply_parallel_size},
      {"dp", "N", nullptr, apply_parallel_size},
      {"tp", "N",
       "tensor-parallel size (1): shapes sharded as Megatron does;\n"
       "TP rank 0 is simulated (every TP rank has its structure)",
       apply_parallel_size},
      {"pipeline-layout", "L|none",
       "Megatron's pipeline layout (E, t, m, L; '|' between the\n"
       "pp * vpp stages); the model's own when it has pp * vpp\n"
       "stages, else Megatron's even split",
       apply_pipeline_layout},
      {"first-stage-layers", "N",
       "uneven split (Megatron's\nnum_layers_in_first/last_pipeline_stage)", apply_stage_layers},
      {"last-stage-layers", "N", nullptr, apply_stage_layers},
      {"offload", "on|off", "CPU offload through HybridDeviceOptimizer (on)", apply_offload},
      {"offload-fraction", "F", "fraction in [0, 1] (1.0)", apply_offload_fraction},
      {"bucket-size", "N|none",
       "DDP bucket size in elements; as in Megatron's training\n"
       "loop, only stage 0's first model chunk is bucketed (none)",
       apply_bucket_size},
      {"precision-aware", "on|off", "precision-aware optimizer (on)", apply_precision_aware},
      {"device", "auto|cpu|cuda", "accelerator for the port (auto)", apply_device},
      {"seed", "N|HASH", "decimal seed or 40-hex commit hash (0)", apply_seed},
      {"scale", "N",
       "divide every dimension by N, keeping each parameter\n"
       "(64 with tensors, 1 with --layout-only)",
       apply_scale},
      {"steps", "N", "optimizer steps per rank, compared with the reference (3)", apply_steps},
  };
}

// The options from --layout-only on: the mode, the checks, the outputs, the multi-process mode.
std::vector<input::Option<ParsedCli>> output_and_process_options() {
  return {
      {"layout-only", nullptr,
       "the reference model only, no tensors: full sizes in seconds,\noutcomes predicted",
       set_cli_flag<&CliOptions::layout_only>},
      {"memory-budget", "BYTES",
       "tensor mode refuses a world whose largest rank would hold\n"
       "more tensor bytes (8GiB, 512MiB; half the physical memory)",
       apply_memory_budget},
      {"check-determinism", nullptr,
       "run twice; fail unless the digests of all final states match",
       set_cli_flag<&CliOptions::check_determinism>},
      {"json", nullptr, "JSON instead of a table", set_cli_flag<&CliOptions::json>},
      {"stats", nullptr, "also print wall time, CPU time and peak resident memory",
       set_cli_flag<&CliOptions::stats>},
      {"svg", "FILE",
       "also draw the world as SVG: buffers, buckets, parameters by\n"
       "dtype, rank shards, offload placement, failing ranks",
       apply_picture_file},
      {"html", "FILE", "also write an HTML report: the picture and the tables",
       apply_picture_file},
      {"heat", nullptr,
       "the pictures add each piece's difference from the\n"
       "reference after the steps as a heat strip (tensor mode)",
       set_cli_flag<&CliOptions::heat>},
      {"processes", "N", "start N = pp * dp ranks of this program on 127.0.0.1", apply_processes,
       "Multi-process mode (one process per rank over c10d Gloo; DP x PP, EP, one variant):"},
      {"multi-process", nullptr,
       "be one rank: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT\n"
       "from the environment (torchrun, Slurm)",
       set_cli_flag<&CliOptions::multi_process>},
      {"collective-timeout", "S", "collective and rendezvous timeout in seconds (60)",
       apply_timeout},
      {"launch-timeout", "S", "--processes stops the world after S seconds (600)", apply_timeout},
      {"fault", "KIND[@RANK]",
       "perturbation to test the checks: drop-grads, stall, exit,\n"
       "die (SIGKILL mid-step), skip-all-gather, expert-over-dense-group\n"
       "(expert buckets reduced and gathered over the dense DP group)",
       apply_fault},
  };
}

// The options of shardcheck-sim, in the order of its usage text.
const std::vector<input::Option<ParsedCli>>& sim_options() {
  static const std::string model_help =
      input::join(input::inventory_names(), ", ") + " (dsv4-flash)";
  static const std::vector<input::Option<ParsedCli>> options = [] {
    std::vector<input::Option<ParsedCli>> all = model_and_world_options(model_help);
    for (const auto& option : output_and_process_options()) all.push_back(option);
    return all;
  }();
  return options;
}

// The message when the options exclude or need each other, else nothing.
std::optional<std::string> check_option_combinations(const ParsedCli& parsed) {
  const CliOptions& o = parsed.options;
  if (parsed.model_named && !o.model_file.empty()) {
    return "--model and --model-file exclude each other (a model file names its model)";
  }
  if (o.world.pipeline_layout != "" && o.world.pipeline_layout != "none" &&
      (o.world.first_stage_layers > 0 || o.world.last_stage_layers > 0)) {
    return "--pipeline-layout excludes --first-stage-layers and --last-stage-layers";
  }
  if (o.processes > 0 && o.multi_process) {
    return "--processes and --multi-process exclude each other (--processes starts the ranks)";
  }
  if (!o.fault.empty() && o.processes == 0 && !o.multi_process) {
    return "--fault needs the multi-process mode (--processes=N)";
  }
  if ((!o.svg.empty() || !o.html.empty() || o.heat) && (o.processes > 0 || o.multi_process)) {
    return "--svg, --html and --heat need the in-process mode (no --processes)";
  }
  if (o.heat && (o.layout_only || o.steps == 0)) {
    return "--heat needs tensor mode with --steps above 0 (no --layout-only)";
  }
  if (o.heat && o.svg.empty() && o.html.empty()) return "--heat needs --svg or --html";
  return std::nullopt;
}

}  // namespace

std::string cli_usage() {
  return "usage: shardcheck-sim [options]\n"
         "Builds every rank of a parallel world with the LibTorch port of Megatron-Core's\n"
         "DistributedOptimizer (and HybridDeviceOptimizer when offloading), once per variant,\n"
         "and prints one row per rank. With no options: the seed scenario.\n" +
         input::option_help(input::texts_of(sim_options()), {25, '='}) +
         "Options taking a value also accept it as the next argument (--dp 2).\n";
}

std::variant<CliOptions, std::string> parse_cli(const std::vector<std::string>& args) {
  ParsedCli parsed;
  if (auto why = input::apply_args(args, sim_options(), parsed, parsed.options.help)) return *why;
  if (!parsed.options.help) {
    if (auto why = check_option_combinations(parsed)) return *why;
  }
  parsed.options.args = args;
  return std::move(parsed.options);
}

std::vector<std::string> cli_args_without(const std::vector<std::string>& args,
                                          const std::set<std::string>& names) {
  const auto split = input::split_args(args, input::texts_of(sim_options()));
  std::vector<std::string> out;
  if (!std::holds_alternative<std::vector<input::Arg>>(split)) return out;
  for (const input::Arg& a : std::get<std::vector<input::Arg>>(split)) {
    if (names.count(a.name)) continue;
    const auto& options = sim_options();
    const auto entry = std::find_if(options.begin(), options.end(),
                                    [&](const auto& o) { return a.name == o.name; });
    const bool valued = entry != options.end() && entry->placeholder;
    out.push_back("--" + a.name + (valued ? "=" + a.value : ""));
  }
  return out;
}

std::string format_bytes(int64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) v /= 1024.0, ++u;
  std::ostringstream os;
  os << std::fixed << std::setprecision(u == 0 ? 0 : 1) << v << " " << kUnits[u];
  return os.str();
}

int64_t default_memory_budget() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return int64_t{8} << 30;
  return static_cast<int64_t>(pages) / 2 * page;
}

}  // namespace sc::app
