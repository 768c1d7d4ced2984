#include "sim/input/scenario.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <stdexcept>

namespace sc::input {

namespace {

using model::DType;

// Shapes of a DeepSeek-V4-Flash-like model: hidden 4096, 43 layers, 256 routed experts with
// moe_intermediate 2048, one shared expert, MLA projections, CSA (`ape`, `attn_sink`) and mHC
// with 4 residual streams; every layer is MoE.
struct TransformerConfig {
  int64_t hidden = 4096;
  int layers = 43;
  int64_t vocab = 129280;
  int64_t heads = 64;
  int64_t head_dim = 512;
  int64_t q_lora = 1024;
  int64_t kv_lora = 512;
  int64_t rope_dim = 64;
  int64_t ffn = 8192;            // dense MLP intermediate (dense models)
  int64_t moe_ffn = 2048;        // routed and shared expert intermediate
  int experts = 0;               // routed experts, 0 = dense MLP
  int64_t compress_ratio = 4;    // CSA: ape is [ratio, coff * head_dim], coff 2 at ratio 4
  bool csa = false;
  bool mhc = false;
  int64_t streams = 4;           // mHC residual streams
  bool mtp = false;
  bool mla = true;
};

struct Builder {
  std::vector<InventoryParam> out;
  int64_t scale;
  // `dim` scaled down: divided by `scale`, never below 1.
  int64_t s(int64_t dim) const { return std::max<int64_t>(1, dim / scale); }
  void add(const std::string& name, std::vector<int64_t> shape, DType dtype, int layer,
           bool keep_fp32 = false, int expert = -1, bool shared_embedding = false) {
    InventoryParam p;
    p.spec.name = name;
    p.spec.shape = std::move(shape);
    p.spec.dtype = keep_fp32 ? DType::kFloat32 : dtype;
    p.spec.keep_in_fp32 = keep_fp32;
    p.spec.is_expert = expert >= 0;
    p.spec.shared_embedding = shared_embedding;
    const bool bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    p.spec.group = (p.spec.shape.size() == 1 || bias) ? 1 : 0;
    p.layer = layer;
    p.expert = expert;
    p.tp_split = default_tp_split(name);
    out.push_back(std::move(p));
  }
  // The mHC parameters of one HyperConnectionModule.
  void hyper_connection(const std::string& prefix, const TransformerConfig& config, int layer) {
    const int64_t n = config.streams, width = n * n + 2 * n, h = s(config.hidden);
    add(prefix + ".mapping_proj.weight", {width, n * h}, DType::kFloat32, layer, true);
    add(prefix + ".alpha_pre", {1}, DType::kFloat32, layer, true);
    add(prefix + ".alpha_post", {1}, DType::kFloat32, layer, true);
    add(prefix + ".alpha_res", {1}, DType::kFloat32, layer, true);
    add(prefix + ".bias", {width}, DType::kFloat32, layer, true);
  }
  void hc_head(const std::string& prefix, const TransformerConfig& config, int layer) {
    const int64_t n = config.streams;
    add(prefix + ".hc_head_fn", {n, n * s(config.hidden)}, DType::kFloat32, layer, true);
    add(prefix + ".hc_head_base", {n}, DType::kFloat32, layer, true);
    add(prefix + ".hc_head_scale", {1}, DType::kFloat32, layer, true);
  }
  void layer(const std::string& prefix, const TransformerConfig& config, int layer, DType dt) {
    const int64_t h = s(config.hidden), heads_width = s(config.heads * config.head_dim);
    add(prefix + ".input_layernorm.weight", {h}, dt, layer);
    const std::string a = prefix + ".self_attention";
    if (config.mla) {
      add(a + ".linear_q_down_proj.weight", {s(config.q_lora), h}, dt, layer);
      add(a + ".linear_q_up_proj.weight", {heads_width, s(config.q_lora)}, dt, layer);
      add(a + ".linear_kv_down_proj.weight", {s(config.kv_lora + config.rope_dim), h}, dt, layer);
      add(a + ".linear_kv_up_proj.weight", {heads_width, s(config.kv_lora)}, dt, layer);
    } else {
      add(a + ".linear_qkv.weight", {3 * heads_width, h}, dt, layer);
    }
    add(a + ".linear_proj.weight", {h, heads_width}, dt, layer);
    if (config.csa) {
      const int64_t ratio = config.compress_ratio, coff = ratio == 4 ? 2 : 1;
      add(a + ".compressor.ape", {ratio, coff * s(config.head_dim)}, dt, layer, true);
      add(a + ".attn_sink", {config.heads}, dt, layer, true);
    }
    if (config.mhc) {
      hyper_connection(prefix + ".attn_hc", config, layer);
      hyper_connection(prefix + ".mlp_hc", config, layer);
    }
    add(prefix + ".pre_mlp_layernorm.weight", {h}, dt, layer);
    const std::string m = prefix + ".mlp";
    if (config.experts > 0) {
      add(m + ".router.weight", {config.experts, h}, dt, layer);
      for (int e = 0; e < config.experts; ++e) {
        const std::string x = m + ".experts.local_experts." + std::to_string(e);
        add(x + ".linear_fc1.weight", {2 * s(config.moe_ffn), h}, dt, layer, false, e);
        add(x + ".linear_fc2.weight", {h, s(config.moe_ffn)}, dt, layer, false, e);
      }
      add(m + ".shared_experts.linear_fc1.weight", {2 * s(config.moe_ffn), h}, dt, layer);
      add(m + ".shared_experts.linear_fc2.weight", {h, s(config.moe_ffn)}, dt, layer);
    } else {
      add(m + ".linear_fc1.weight", {2 * s(config.ffn), h}, dt, layer);
      add(m + ".linear_fc2.weight", {h, s(config.ffn)}, dt, layer);
    }
  }
};

std::vector<InventoryParam> transformer(const TransformerConfig& config, int64_t scale) {
  Builder b{{}, scale};
  const DType dt = DType::kBFloat16;
  const int64_t h = b.s(config.hidden);
  b.add("embedding.word_embeddings.weight", {b.s(config.vocab), h}, dt, -1);
  for (int l = 0; l < config.layers; ++l) {
    b.layer("decoder.layers." + std::to_string(l), config, l, dt);
  }
  b.add("decoder.final_layernorm.weight", {h}, dt, -2);
  if (config.mhc) b.hc_head("decoder", config, -2);
  if (config.mtp) {
    b.add("mtp.layers.0.enorm.weight", {h}, dt, -3);
    b.add("mtp.layers.0.hnorm.weight", {h}, dt, -3);
    b.add("mtp.layers.0.eh_proj.weight", {h, 2 * h}, dt, -3);
    b.layer("mtp.layers.0.transformer_layer", config, -3, dt);
    if (config.mhc) b.hc_head("mtp.layers.0", config, -3);
  }
  b.add("output_layer.weight", {b.s(config.vocab), h}, dt, -2);
  return b.out;
}

}  // namespace

const std::vector<std::string>& inventory_names() {
  static const std::vector<std::string> kNames{"dsv4-flash", "dsv3", "llama", "mixed-dtype-net"};
  return kNames;
}

std::optional<std::pair<std::vector<InventoryParam>, int>> build_inventory(const std::string& name,
                                                                           int64_t scale) {
  TransformerConfig c;
  if (name == "dsv4-flash") {
    c.experts = 256;
    c.csa = c.mhc = c.mtp = true;
  } else if (name == "dsv3") {  // DeepSeek-V3-like: 61 layers, hidden 7168, 256 experts, no marks
    c.hidden = 7168;
    c.layers = 61;
    c.heads = 128;
    c.head_dim = 128;
    c.q_lora = 1536;
    c.experts = 256;
    c.mtp = true;
  } else if (name == "llama") {  // Llama-like dense: 32 layers, hidden 4096, GQA folded into qkv
    c.layers = 32;
    c.vocab = 128256;
    c.heads = 32;
    c.head_dim = 128;
    c.ffn = 14336;
    c.mla = false;
  } else if (name == "mixed-dtype-net") {
    // Megatron's MixedDtypeNet test model: bf16 Linear 128->64, fp32-marked alpha [16, 32],
    // bf16 Linear 64->32 (not scaled: it is already tiny).
    Builder b{{}, 1};
    b.add("fc1.weight", {64, 128}, DType::kBFloat16, 0);
    b.add("fc1.bias", {64}, DType::kBFloat16, 0);
    b.add("alpha", {16, 32}, DType::kFloat32, 0, true);
    b.add("fc2.weight", {32, 64}, DType::kBFloat16, 0);
    b.add("fc2.bias", {32}, DType::kBFloat16, 0);
    return std::make_pair(b.out, 1);
  } else {
    return std::nullopt;
  }
  return std::make_pair(transformer(c, scale), c.layers);
}

std::optional<ModelInventory> builtin_model(const std::string& name, int64_t scale) {
  auto built = build_inventory(name, scale);
  if (!built) return std::nullopt;
  ModelInventory m{name, std::move(built->first), built->second, 0, ""};
  for (const auto& p : m.params) m.num_experts = std::max(m.num_experts, p.expert + 1);
  if (name == "dsv4-flash") m.pipeline_layout = kDsv4FlashLayout;
  return m;
}

namespace {

bool ends_with_part(const std::string& name, const std::string& suffix) {
  if (name == suffix) return true;
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         name[name.size() - suffix.size() - 1] == '.';
}

}  // namespace

// Megatron at d8b71082, megatron/core/tensor_parallel/layers.py: VocabParallelEmbedding
// (line 204) and ColumnParallelLinear (784) split dim 0 (partition_dim=0, lines 284 and 919),
// RowParallelLinear (1148) dim 1 (line 1270) and keeps its bias whole. GPT layer specs with
// Transformer Engine: linear_qkv, linear_q_proj, linear_q_up_proj, linear_kv_up_proj,
// linear_fc1 (dense, shared and routed experts) and MTP's eh_proj are column-parallel;
// linear_proj and linear_fc2 row-parallel; MLA's linear_q_down_proj and linear_kv_down_proj
// are TELinear with parallel_mode="duplicated" (multi_latent_attention.py lines 540-541 and
// 587-588); CSA's attn_sink holds one value per local head (experimental_attention_variant/
// csa.py line 1621) while its `ape` is duplicated; mHC's parameters are plain nn.Linear /
// nn.Parameter (hyper_connection.py lines 193-204); norms and the router are replicated.
TpSplit default_tp_split(const std::string& name) {
  static const char* const kColumn[] = {
      "word_embeddings.weight", "output_layer.weight",     "linear_qkv.weight",
      "linear_qkv.bias",        "linear_q_proj.weight",    "linear_q_proj.bias",
      "linear_q_up_proj.weight", "linear_kv_up_proj.weight", "linear_fc1.weight",
      "linear_fc1.bias",        "eh_proj.weight",          "attn_sink"};
  static const char* const kRow[] = {"linear_proj.weight", "linear_fc2.weight"};
  for (const char* c : kColumn) {
    if (ends_with_part(name, c)) return TpSplit::kColumn;
  }
  for (const char* r : kRow) {
    if (ends_with_part(name, r)) return TpSplit::kRow;
  }
  return TpSplit::kNone;
}

std::optional<TpSplit> parse_tp_split(const std::string& text) {
  if (text == "none") return TpSplit::kNone;
  if (text == "column" || text == "vocab") return TpSplit::kColumn;
  if (text == "row") return TpSplit::kRow;
  return std::nullopt;
}

const char* tp_split_name(TpSplit name) {
  return name == TpSplit::kColumn ? "column" : name == TpSplit::kRow ? "row" : "none";
}

// Megatron's PipelineParallelLayerLayout.parse_str_to_list (pipeline_parallel_layer_layout.py
// lines 275-321): commas dropped, "(...)*n" then "x*n" unrolled, stages split at '|'.
std::variant<std::vector<std::string>, std::string> parse_pipeline_layout(
    const std::string& text) {
  std::string s;
  for (char ch : text) {
    if (ch != ',') s += ch;
  }
  // One unrolling pass: `open` and `close` delimit the repeated part, or it is one character.
  auto unroll = [](const std::string& in, bool parens,
                   std::string& out) -> std::optional<std::string> {
    out.clear();
    size_t i = 0;
    while (i < in.size()) {
      size_t body_start = i, body_end = i + 1, star = i + 1;
      if (parens) {
        if (in[i] != '(') {
          out += in[i++];
          continue;
        }
        const size_t close = in.find(')', i);
        if (close == std::string::npos || close == i + 1) {
          out += in[i++];
          continue;
        }
        body_start = i + 1;
        body_end = close;
        star = close + 1;
      }
      size_t digits = star + 1;
      while (digits < in.size() && std::isdigit(static_cast<unsigned char>(in[digits]))) ++digits;
      if (star >= in.size() || in[star] != '*' || digits == star + 1) {
        out += in[i++];
        continue;
      }
      if (digits - star - 1 > 6) return std::string("a repeat count above 999999");
      const int n = std::stoi(in.substr(star + 1, digits - star - 1));
      const std::string body = in.substr(body_start, body_end - body_start);
      if (out.size() + body.size() * static_cast<size_t>(n) > 1000000) {
        return std::string("the layout unrolls to more than 1000000 characters");
      }
      for (int k = 0; k < n; ++k) out += body;
      i = digits;
    }
    return std::nullopt;
  };
  for (bool parens : {true, false}) {
    std::string unrolled;
    if (auto why = unroll(s, parens, unrolled)) return *why;
    s = unrolled;
  }
  std::vector<std::string> stages(1);
  for (char ch : s) {
    if (ch == '|') {
      stages.emplace_back();
    } else if (ch == 'E' || ch == 'L' || ch == 't' || ch == 'm') {
      stages.back() += ch;
    } else {
      return std::string("invalid layer character '") + ch + "' (known: E, L, t, m)";
    }
  }
  return stages;
}

namespace {

// The stages of `world`'s pipeline layout, their count checked against the pipeline size; or
// why not.
std::variant<std::vector<std::string>, std::string> layout_stages(const WorldSizes& world) {
  std::ostringstream err;
  const int pp = world.pp, vpp = world.vpp;
  auto parsed = parse_pipeline_layout(world.pipeline_layout);
  if (auto* why = std::get_if<std::string>(&parsed)) return "pipeline layout: " + *why;
  const auto& stages = std::get<std::vector<std::string>>(parsed);
  // pipeline_parallel_layer_layout.py lines 40-45: the stage count sets VPP; a VPP given as
  // well must agree (transformer_config.py lines 2437-2443).
  if (stages.size() % pp != 0) {
    err << "pipeline layout has " << stages.size() << " stages, not divisible by pp=" << pp;
    return err.str();
  }
  if (static_cast<int>(stages.size()) != pp * vpp) {
    err << "pipeline layout has " << stages.size() << " stages, which makes vpp="
        << stages.size() / pp << ", not vpp=" << vpp;
    return err.str();
  }
  return parsed;
}

// Checks the layers of a layout's `stages` as validate_layer_layout does (lines 85-150), over
// the layers in layer-id order: E first and once, L last and once, `num_layers` decoder layers,
// and MTP layers when the model has them (`mtp`), after every decoder layer.
std::optional<std::string> check_layout_layers(const std::vector<std::string>& stages,
                                               int num_layers, bool mtp) {
  std::ostringstream err;
  std::string flat;
  for (const auto& st : stages) flat += st;
  auto count = [&](char ch) { return std::count(flat.begin(), flat.end(), ch); };
  if (flat.empty() || flat.front() != 'E') {
    return std::string("pipeline layout: the first layer must be the embedding E");
  }
  if (flat.back() != 'L') {
    return std::string("pipeline layout: the last layer must be the loss L");
  }
  if (count('E') != 1) return std::string("pipeline layout: E must appear exactly once");
  if (count('L') != 1) return std::string("pipeline layout: L must appear exactly once");
  if (count('t') != num_layers) {
    err << "pipeline layout: " << count('t') << " decoder layers (t), but the model has "
        << num_layers;
    return err.str();
  }
  if (mtp != (count('m') > 0)) {
    return std::string(mtp ? "pipeline layout: the model has MTP layers, the layout no m"
                           : "pipeline layout: m, but the model has no MTP layers");
  }
  if (count('m') > 0 && flat.find('t', flat.find('m')) != std::string::npos) {
    return std::string("pipeline layout: decoder layers must be placed before MTP layers");
  }
  return std::nullopt;
}

// Gives each (stage, virtual chunk) of `plan` the decoder layers of its layout stage (stage i
// of the list is virtual chunk i / pp of pipeline rank i % pp) and places MTP where the layout
// puts m; or why the layout places MTP where Megatron cannot.
std::optional<std::string> assign_layout_layers(const std::vector<std::string>& stages, int pp,
                                                int vpp, PipelinePlan& plan) {
  int first = 0, mtp_chunks = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const int stage = static_cast<int>(i) % pp, v = static_cast<int>(i) / pp;
    const int n = static_cast<int>(std::count(stages[i].begin(), stages[i].end(), 't'));
    plan.layers[stage][v] = {first, first + n};  // get_layer_offset, lines 177-197
    first += n;
    if (stages[i].find('m') != std::string::npos) {
      if (v != vpp - 1) {
        return std::string("pipeline layout: MTP must be in the last virtual stage of its "
                           "pipeline rank");
      }
      plan.mtp_stage = stage;
      plan.mtp_chunk = v;
      ++mtp_chunks;
    }
  }
  if (mtp_chunks > 1) {
    return std::string("pipeline layout: all MTP layers must be in one virtual stage");
  }
  return std::nullopt;
}

// Fills `plan` from `world`'s pipeline layout; or why the layout is impossible.
std::optional<std::string> layout_plan(const WorldSizes& world, int num_layers, bool mtp,
                                       PipelinePlan& plan) {
  auto parsed = layout_stages(world);
  if (auto* why = std::get_if<std::string>(&parsed)) return *why;
  const auto& stages = std::get<std::vector<std::string>>(parsed);
  if (auto why = check_layout_layers(stages, num_layers, mtp)) return why;
  if (auto why = assign_layout_layers(stages, world.pp, world.vpp, plan)) return why;
  // Where this simulator places the pre- and post-process parameters.
  if (stages.front().find('E') == std::string::npos) {
    return std::string("pipeline layout: this simulator needs E in the first stage");
  }
  if (stages.back().find('L') == std::string::npos) {
    return std::string("pipeline layout: this simulator needs L in the last stage");
  }
  return std::nullopt;
}

// The decoder layers between the first and the last stage of an uneven split, and the stages
// that hold them.
struct MiddleStages {
  int layers = 0;
  int stages = 0;
};

// The middle of `world`'s uneven split of `num_layers` decoder layers, checked as Megatron
// does (transformer_config.py lines 2452-2527); or the error it raises.
std::variant<MiddleStages, std::string> uneven_middle(const WorldSizes& world, int num_layers) {
  std::ostringstream err;
  const int pp = world.pp, vpp = world.vpp;
  if (pp < 2) return std::string("first/last stage layer counts need a pipeline size above 1");
  const int first = world.first_stage_layers, last = world.last_stage_layers;
  int middle = num_layers, middle_stages = pp;
  if (first > 0) {
    if (first % vpp != 0) {
      err << "number of layers at first stage: " << first
          << " must be divisible by virtual pipeline parallel degree " << vpp;
      return err.str();
    }
    middle -= first;
    --middle_stages;
  }
  if (last > 0) {
    if (last % vpp != 0) {
      err << "number of layers at last stage: " << last
          << " must be divisible by virtual pipeline parallel degree " << vpp;
      return err.str();
    }
    middle -= last;
    --middle_stages;
  }
  if (middle < 0) {
    err << "first and last stage layers (" << first + last << ") exceed the " << num_layers
        << " decoder layers";
    return err.str();
  }
  if ((middle != 0) != (middle_stages != 0)) {
    err << "Mismatch: " << middle << " middle layers remaining but " << middle_stages
        << " middle PP stages available";
    return err.str();
  }
  if (middle_stages > 0 && middle % middle_stages != 0) {
    err << "number of layers at middle stage: " << middle
        << " must be divisible by the middle pipeline model parallel size " << middle_stages;
    return err.str();
  }
  if (middle_stages > 0 && (middle / middle_stages) % vpp != 0) {
    err << "number of layers on each middle pipeline rank: " << middle / middle_stages
        << " must be divisible by virtual pipeline parallel degree " << vpp;
    return err.str();
  }
  return MiddleStages{middle, middle_stages};
}

// Fills `plan` from `world`'s uneven split (first/last stage layer counts): offsets as in
// transformer_layer.py lines 81-179, counts as in transformer_block.py lines 115-158; or the
// error Megatron raises.
std::optional<std::string> uneven_plan(const WorldSizes& world, int num_layers,
                                       PipelinePlan& plan) {
  auto checked = uneven_middle(world, num_layers);
  if (auto* why = std::get_if<std::string>(&checked)) return *why;
  const MiddleStages middle = std::get<MiddleStages>(checked);
  const int pp = world.pp, vpp = world.vpp;
  const int first = world.first_stage_layers, last = world.last_stage_layers;
  const int f_chunk = first / vpp, l_chunk = last / vpp, mid_chunk = middle.layers / vpp;
  const int total = f_chunk + mid_chunk + l_chunk;
  const int per_middle_rank_chunk = middle.stages > 0 ? mid_chunk / middle.stages : 0;
  for (int stage = 0; stage < pp; ++stage) {
    int n = per_middle_rank_chunk;
    if (stage == 0 && first > 0) n = f_chunk;
    if (stage == pp - 1 && last > 0) n = l_chunk;
    const int middle_rank = first > 0 ? stage - 1 : stage;
    for (int v = 0; v < vpp; ++v) {
      const int offset =
          stage == 0 ? v * total : v * total + f_chunk + middle_rank * per_middle_rank_chunk;
      plan.layers[stage][v] = {offset, offset + n};
    }
  }
  return std::nullopt;
}

// Fills `plan` from the even split: transformer_block.py lines 168-171 and 186-190 (the
// assertions Megatron raises), offsets as in transformer_layer.py lines 191-211.
std::optional<std::string> even_plan(const WorldSizes& world, int num_layers, PipelinePlan& plan) {
  std::ostringstream err;
  const int pp = world.pp, vpp = world.vpp;
  if (num_layers % pp != 0) {
    err << "num_layers=" << num_layers
        << " should be divisible by config.pipeline_model_parallel_size=" << pp
        << " (Megatron's AssertionError; give a pipeline layout or first/last stage layers)";
    return err.str();
  }
  const int per_rank = num_layers / pp;
  if (pp > 1 && per_rank % vpp != 0) {
    err << "num_layers_per_pipeline_rank " << per_rank << " should be divisible by vp_size "
        << vpp << " (Megatron's AssertionError)";
    return err.str();
  }
  const int per_chunk = per_rank / vpp, total = num_layers / vpp;
  for (int stage = 0; stage < pp; ++stage) {
    for (int v = 0; v < vpp; ++v) {
      const int offset = v * total + stage * per_chunk;
      plan.layers[stage][v] = {offset, offset + per_chunk};
    }
  }
  return std::nullopt;
}

}  // namespace

std::variant<PipelinePlan, std::string> pipeline_plan(const WorldSizes& world, int num_layers,
                                                      bool mtp) {
  PipelinePlan plan;
  plan.layers.assign(world.pp, std::vector<std::pair<int, int>>(world.vpp));
  plan.mtp_stage = world.pp - 1;
  plan.mtp_chunk = world.vpp - 1;
  const bool uneven = world.first_stage_layers > 0 || world.last_stage_layers > 0;
  std::optional<std::string> why;
  if (!world.pipeline_layout.empty()) {
    // transformer_config.py lines 2400-2416: a layout excludes the uneven split.
    if (uneven) {
      return std::string("a pipeline layout cannot be combined with first/last stage layer "
                         "counts (Megatron: pipeline_model_parallel_layout cannot be set with "
                         "other pipeline layout arguments)");
    }
    why = layout_plan(world, num_layers, mtp, plan);
  } else if (uneven) {
    why = uneven_plan(world, num_layers, plan);
  } else {
    why = even_plan(world, num_layers, plan);
  }
  if (why) return *why;
  return plan;
}

std::optional<std::string> validate_world(const WorldSizes& world, int num_layers, bool mtp) {
  std::ostringstream err;
  if (world.pp < 1 || world.vpp < 1 || world.ep < 1 || world.dp < 1 || world.tp < 1) {
    err << "parallel sizes must be at least 1 (tp=" << world.tp << " pp=" << world.pp
        << " vpp=" << world.vpp << " ep=" << world.ep << " dp=" << world.dp << ")";
  } else if (world.dp % world.ep != 0) {
    err << "expert-parallel size " << world.ep << " must divide the data-parallel size "
        << world.dp;
  } else if (world.vpp > 1 && world.pp == 1) {
    err << "virtual pipeline size " << world.vpp << " needs a pipeline size above 1";
  } else if (world.pp > num_layers && world.pipeline_layout.empty()) {
    err << "pp = " << world.pp << " exceeds the " << num_layers << " decoder layers";
  } else {
    auto plan = pipeline_plan(world, num_layers, mtp);
    if (auto* why = std::get_if<std::string>(&plan)) return *why;
    return std::nullopt;
  }
  return err.str();
}

std::pair<int, int> chunk_layers(const WorldSizes& world, int num_layers, int chunk) {
  auto plan = pipeline_plan(world, num_layers, true);
  if (plan.index() == 1) plan = pipeline_plan(world, num_layers, false);
  if (auto* why = std::get_if<std::string>(&plan)) throw std::invalid_argument(*why);
  return std::get<PipelinePlan>(plan).layers[chunk % world.pp][chunk / world.pp];
}

std::optional<std::string> validate_tp(const std::vector<InventoryParam>& full_size, int tp) {
  for (const InventoryParam& p : full_size) {
    if (p.tp_split == TpSplit::kNone) continue;
    const size_t dim = p.tp_split == TpSplit::kColumn ? 0 : 1;
    if (dim >= p.spec.shape.size()) {
      return "parameter " + p.spec.name + " is " + tp_split_name(p.tp_split) +
             "-parallel but has no dimension " + std::to_string(dim);
    }
    if (p.spec.shape[dim] % tp != 0) {
      std::ostringstream err;
      err << "tp=" << tp << " does not divide dimension " << dim << " (" << p.spec.shape[dim]
          << ") of " << p.spec.name << " (" << tp_split_name(p.tp_split) << "-parallel)";
      return err.str();
    }
  }
  return std::nullopt;
}

std::vector<int64_t> tp_shape(const InventoryParam& param, int tp) {
  std::vector<int64_t> shape = param.spec.shape;
  const size_t dim = param.tp_split == TpSplit::kColumn ? 0 : 1;
  if (param.tp_split != TpSplit::kNone && dim < shape.size()) {
    shape[dim] = std::max<int64_t>(1, shape[dim] / tp);
  }
  return shape;
}

std::vector<model::ParamSpec> stage_params(const std::vector<InventoryParam>& inventory,
                                           const WorldSizes& world, int num_layers, int stage,
                                           int ep_rank, int num_experts) {
  bool mtp = false;
  for (const InventoryParam& p : inventory) mtp |= p.layer == -3;
  auto planned = pipeline_plan(world, num_layers, mtp);
  if (auto* why = std::get_if<std::string>(&planned)) throw std::invalid_argument(*why);
  const PipelinePlan& plan = std::get<PipelinePlan>(planned);
  std::vector<model::ParamSpec> out;
  const int experts_per_rank = std::max(1, num_experts / world.ep);
  for (int v = 0; v < world.vpp; ++v) {
    const auto [first, last] = plan.layers[stage][v];
    const bool first_chunk = stage == 0 && v == 0;
    const bool last_chunk = stage == world.pp - 1 && v == world.vpp - 1;
    const bool mtp_chunk = stage == plan.mtp_stage && v == plan.mtp_chunk;
    for (const InventoryParam& p : inventory) {
      const bool here = (p.layer >= first && p.layer < last) || (p.layer == -1 && first_chunk) ||
                        (p.layer == -2 && last_chunk) || (p.layer == -3 && mtp_chunk);
      if (!here) continue;
      if (p.expert >= 0 && p.expert / experts_per_rank != ep_rank) continue;
      model::ParamSpec s = p.spec;
      s.shape = tp_shape(p, world.tp);
      s.chunk = v;
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace sc::input
