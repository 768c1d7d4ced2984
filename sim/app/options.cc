#include "sim/app/options.h"

#include <unistd.h>

#include <charconv>
#include <iomanip>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "sim/port/behaviour.h"

namespace sc::sim {

namespace {

bool parse_int(const std::string& text, int64_t& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty();
}

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

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// The options that take a value, which may also come as the next argument.
const std::set<std::string> kValueOptions{
    "model",     "model-file",         "variant",         "pp",     "vpp",  "ep",    "dp",
    "offload",   "offload-fraction",   "precision-aware", "device", "seed", "scale", "steps",
    "processes", "collective-timeout", "launch-timeout",  "fault",  "tp",
    "pipeline-layout", "first-stage-layers", "last-stage-layers", "svg", "html",
    "memory-budget"};

}  // namespace

std::string cli_usage() {
  return "usage: shardcheck-sim [options]\n"
         "Builds every rank of a parallel world with the LibTorch port of Megatron-Core's\n"
         "DistributedOptimizer (and HybridDeviceOptimizer when offloading), once per variant,\n"
         "and prints one row per rank. With no options: the seed scenario.\n"
         "  --model=NAME             " + join(inventory_names(), ", ") + " (dsv4-flash)\n"
         "  --model-file=FILE        a model described in a JSON file (see models/README.md)\n"
         "  --variant=A[,B...]       port variants (upstream,pr6982), or 'all'; a variant is\n"
         "                           upstream plus changes: pr6982+F1, patched-F3, patched+pipelined\n"
         "  --pp=N --vpp=N --ep=N --dp=N   parallel sizes (8, 3, 4, 4); ep divides dp\n"
         "  --tp=N                   tensor-parallel size (1): shapes sharded as Megatron does;\n"
         "                           TP rank 0 is simulated (every TP rank has its structure)\n"
         "  --pipeline-layout=L|none Megatron's pipeline layout (E, t, m, L; '|' between the\n"
         "                           pp * vpp stages); the model's own when it has pp * vpp\n"
         "                           stages, else Megatron's even split\n"
         "  --first-stage-layers=N --last-stage-layers=N   uneven split (Megatron's\n"
         "                           num_layers_in_first/last_pipeline_stage)\n"
         "  --offload=on|off         CPU offload through HybridDeviceOptimizer (on)\n"
         "  --offload-fraction=F     fraction in [0, 1] (1.0)\n"
         "  --bucket-size=N|none     DDP bucket size in elements; as in Megatron's training\n"
         "                           loop, only stage 0's first model chunk is bucketed (none)\n"
         "  --precision-aware=on|off precision-aware optimizer (on)\n"
         "  --device=auto|cpu|cuda   accelerator for the port (auto)\n"
         "  --seed=N|HASH            decimal seed or 40-hex commit hash (0)\n"
         "  --scale=N                divide every dimension by N, keeping each parameter\n"
         "                           (64 with tensors, 1 with --layout-only)\n"
         "  --steps=N                optimizer steps per rank, compared with the reference (3)\n"
         "  --layout-only            the reference model only, no tensors: full sizes in seconds,\n"
         "                           outcomes predicted\n"
         "  --memory-budget=BYTES    tensor mode refuses a world whose largest rank would hold\n"
         "                           more tensor bytes (8GiB, 512MiB; half the physical memory)\n"
         "  --check-determinism      run twice; fail unless the digests of all final states match\n"
         "  --json                   JSON instead of a table\n"
         "  --stats                  also print wall time, CPU time and peak resident memory\n"
         "  --svg=FILE               also draw the world as SVG: buffers, buckets, parameters by\n"
         "                           dtype, rank shards, offload placement, failing ranks\n"
         "  --html=FILE              also write an HTML report: the picture and the tables\n"
         "  --heat                   the pictures add each piece's difference from the\n"
         "                           reference after the steps as a heat strip (tensor mode)\n"
         "Multi-process mode (one process per rank over c10d Gloo; DP x PP, EP, one variant):\n"
         "  --processes=N            start N = pp * dp ranks of this program on 127.0.0.1\n"
         "  --multi-process          be one rank: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT\n"
         "                           from the environment (torchrun, Slurm)\n"
         "  --collective-timeout=S   collective and rendezvous timeout in seconds (60)\n"
         "  --launch-timeout=S       --processes stops the world after S seconds (600)\n"
         "  --fault=KIND[@RANK]      perturbation to test the checks: drop-grads, stall, exit,\n"
         "                           die (SIGKILL mid-step), skip-all-gather\n"
         "Options taking a value also accept it as the next argument (--dp 2).\n";
}

std::variant<CliOptions, std::string> parse_cli(const std::vector<std::string>& args) {
  CliOptions o;
  bool model_named = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    // "--name value" means "--name=value" for the options that take a value.
    if (arg.rfind("--", 0) == 0 && arg.find('=') == std::string::npos &&
        kValueOptions.count(arg.substr(2))) {
      if (i + 1 == args.size()) return arg + " needs a value (" + arg + "=VALUE; see --help)";
      arg += "=" + args[++i];
    }
    if (arg == "--help" || arg == "-h") {
      o.help = true;
      continue;
    }
    if (arg == "--json") {
      o.json = true;
      continue;
    }
    if (arg == "--stats") {
      o.stats = true;
      continue;
    }
    if (arg == "--layout-only") {
      o.layout_only = true;
      continue;
    }
    if (arg == "--heat") {
      o.heat = true;
      continue;
    }
    if (arg == "--check-determinism") {
      o.check_determinism = true;
      continue;
    }
    if (arg == "--multi-process") {
      o.multi_process = true;
      continue;
    }
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      return "unknown argument '" + arg + "' (options take the form --name=value; see --help)";
    }
    const std::string name = arg.substr(2, eq - 2), value = arg.substr(eq + 1);
    int64_t n = 0;
    auto bad = [&](const std::string& why) { return "--" + name + "=" + value + ": " + why; };
    if (name == "model") {
      bool known = false;
      for (const auto& m : inventory_names()) known |= m == value;
      if (!known) return bad("unknown model; known: " + join(inventory_names(), ", "));
      o.model = value;
      model_named = true;
    } else if (name == "model-file") {
      if (value.empty()) return bad("expected a file name");
      o.model_file = value;
    } else if (name == "variant") {
      o.variants.clear();
      if (value == "all") {
        for (const auto& b : sut::all_behaviours()) o.variants.push_back(b.name);
        continue;
      }
      std::stringstream ss(value);
      std::string v;
      while (std::getline(ss, v, ',')) {
        if (!sut::behaviour_by_name(v)) {
          std::vector<std::string> known;
          for (const auto& b : sut::all_behaviours()) known.push_back(b.name);
          return bad("unknown variant '" + v +
                     "': a variant is upstream plus changes joined with '+' (pr6982, F1 ... F9, "
                     "pr4547, pr5077, fused-host-adamw, pipelined; patched: every fix), or a "
                     "mutant; for example: " + join(known, ", "));
        }
        o.variants.push_back(v);
      }
      if (o.variants.empty()) return bad("no variant named");
    } else if (name == "pp" || name == "vpp" || name == "ep" || name == "dp" || name == "tp") {
      if (!parse_int(value, n) || n < 1 || n > 65536) {
        return bad("expected an integer from 1 to 65536");
      }
      int& field = name == "pp"    ? o.world.pp
                   : name == "vpp" ? o.world.vpp
                   : name == "ep"  ? o.world.ep
                   : name == "tp"  ? o.world.tp
                                   : o.world.dp;
      field = static_cast<int>(n);
    } else if (name == "first-stage-layers" || name == "last-stage-layers") {
      if (!parse_int(value, n) || n < 1 || n > 100000) {
        return bad("expected an integer from 1 to 100000");
      }
      (name == "first-stage-layers" ? o.world.first_stage_layers : o.world.last_stage_layers) =
          static_cast<int>(n);
    } else if (name == "pipeline-layout") {
      if (value.empty()) return bad("expected a layout such as Et|tt|tL, or none");
      if (value != "none") {
        auto layout = parse_pipeline_layout(value);
        if (auto* why = std::get_if<std::string>(&layout)) return bad(*why);
      }
      o.world.pipeline_layout = value;
    } else if (name == "offload") {
      if (!parse_on_off(value, o.offload)) return bad("expected on or off");
    } else if (name == "offload-fraction") {
      if (!parse_double(value, o.offload_fraction) || o.offload_fraction < 0.0 ||
          o.offload_fraction > 1.0) {
        return bad("the offload fraction must be a number in [0, 1]");
      }
    } else if (name == "bucket-size") {
      if (value == "none") {
        o.bucket_size.reset();
      } else if (!parse_int(value, n) || n < 1) {
        return bad("expected a positive element count or none");
      } else {
        o.bucket_size = n;
      }
    } else if (name == "precision-aware") {
      if (!parse_on_off(value, o.precision_aware)) return bad("expected on or off");
    } else if (name == "device") {
      if (value != "auto" && value != "cpu" && value != "cuda") {
        return bad("expected auto, cpu or cuda");
      }
      o.device = value;
    } else if (name == "seed") {
      if (!parse_seed(value, o.seed)) return bad("expected a decimal seed or a 40-hex hash");
    } else if (name == "steps") {
      if (!parse_int(value, n) || n < 0 || n > 100) return bad("expected an integer from 0 to 100");
      o.steps = static_cast<int>(n);
    } else if (name == "scale") {
      if (!parse_int(value, n) || n < 1) return bad("expected a positive integer");
      o.scale = n;
    } else if (name == "memory-budget") {
      const auto bytes = parse_byte_size(value);
      if (!bytes) return bad("expected a byte count such as 8GiB, 512MiB or 1000000");
      o.memory_budget = *bytes;
    } else if (name == "processes") {
      if (!parse_int(value, n) || n < 1 || n > 1024) {
        return bad("expected an integer from 1 to 1024");
      }
      o.processes = static_cast<int>(n);
    } else if (name == "collective-timeout" || name == "launch-timeout") {
      double t = 0;
      if (!parse_double(value, t) || t <= 0 || t > 86400) {
        return bad("expected seconds above 0, at most 86400");
      }
      (name == "collective-timeout" ? o.collective_timeout_s : o.launch_timeout_s) = t;
    } else if (name == "fault") {
      const size_t at = value.find('@');
      o.fault = value.substr(0, at);
      o.fault_rank = -1;
      if (o.fault != "drop-grads" && o.fault != "stall" && o.fault != "exit" &&
          o.fault != "die" && o.fault != "skip-all-gather") {
        return bad("unknown fault; known: drop-grads, stall, exit, die, skip-all-gather");
      }
      if (at != std::string::npos) {
        if (!parse_int(value.substr(at + 1), n) || n < 0 || n > 65535) {
          return bad("expected KIND@RANK with a rank from 0");
        }
        o.fault_rank = static_cast<int>(n);
      }
    } else if (name == "svg" || name == "html") {
      if (value.empty()) return bad("expected a file name");
      (name == "svg" ? o.svg : o.html) = value;
    } else {
      return "unknown option '--" + name + "' (see --help)";
    }
  }
  if (model_named && !o.model_file.empty()) {
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
  o.args = args;
  return o;
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

}  // namespace sc::sim
