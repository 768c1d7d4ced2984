#include "sim/scenario.h"

#include <algorithm>
#include <sstream>

namespace sc::sim {

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
  int64_t s(int64_t d) const { return std::max<int64_t>(1, d / scale); }
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
    out.push_back(std::move(p));
  }
  // The mHC parameters of one HyperConnectionModule.
  void hyper_connection(const std::string& prefix, const TransformerConfig& c, int layer) {
    const int64_t n = c.streams, width = n * n + 2 * n;
    add(prefix + ".mapping_proj.weight", {width, n * s(c.hidden)}, DType::kFloat32, layer, true);
    add(prefix + ".alpha_pre", {1}, DType::kFloat32, layer, true);
    add(prefix + ".alpha_post", {1}, DType::kFloat32, layer, true);
    add(prefix + ".alpha_res", {1}, DType::kFloat32, layer, true);
    add(prefix + ".bias", {width}, DType::kFloat32, layer, true);
  }
  void hc_head(const std::string& prefix, const TransformerConfig& c, int layer) {
    const int64_t n = c.streams;
    add(prefix + ".hc_head_fn", {n, n * s(c.hidden)}, DType::kFloat32, layer, true);
    add(prefix + ".hc_head_base", {n}, DType::kFloat32, layer, true);
    add(prefix + ".hc_head_scale", {1}, DType::kFloat32, layer, true);
  }
  void layer(const std::string& prefix, const TransformerConfig& c, int layer, DType dt) {
    const int64_t h = s(c.hidden);
    add(prefix + ".input_layernorm.weight", {h}, dt, layer);
    const std::string a = prefix + ".self_attention";
    if (c.mla) {
      add(a + ".linear_q_down_proj.weight", {s(c.q_lora), h}, dt, layer);
      add(a + ".linear_q_up_proj.weight", {s(c.heads * c.head_dim), s(c.q_lora)}, dt, layer);
      add(a + ".linear_kv_down_proj.weight", {s(c.kv_lora + c.rope_dim), h}, dt, layer);
      add(a + ".linear_kv_up_proj.weight", {s(c.heads * c.head_dim), s(c.kv_lora)}, dt, layer);
    } else {
      add(a + ".linear_qkv.weight", {3 * s(c.heads * c.head_dim), h}, dt, layer);
    }
    add(a + ".linear_proj.weight", {h, s(c.heads * c.head_dim)}, dt, layer);
    if (c.csa) {
      const int64_t coff = c.compress_ratio == 4 ? 2 : 1;
      add(a + ".compressor.ape", {c.compress_ratio, coff * s(c.head_dim)}, dt, layer, true);
      add(a + ".attn_sink", {c.heads}, dt, layer, true);
    }
    if (c.mhc) {
      hyper_connection(prefix + ".attn_hc", c, layer);
      hyper_connection(prefix + ".mlp_hc", c, layer);
    }
    add(prefix + ".pre_mlp_layernorm.weight", {h}, dt, layer);
    const std::string m = prefix + ".mlp";
    if (c.experts > 0) {
      add(m + ".router.weight", {c.experts, h}, dt, layer);
      for (int e = 0; e < c.experts; ++e) {
        const std::string x = m + ".experts.local_experts." + std::to_string(e);
        add(x + ".linear_fc1.weight", {2 * s(c.moe_ffn), h}, dt, layer, false, e);
        add(x + ".linear_fc2.weight", {h, s(c.moe_ffn)}, dt, layer, false, e);
      }
      add(m + ".shared_experts.linear_fc1.weight", {2 * s(c.moe_ffn), h}, dt, layer);
      add(m + ".shared_experts.linear_fc2.weight", {h, s(c.moe_ffn)}, dt, layer);
    } else {
      add(m + ".linear_fc1.weight", {2 * s(c.ffn), h}, dt, layer);
      add(m + ".linear_fc2.weight", {h, s(c.ffn)}, dt, layer);
    }
  }
};

std::vector<InventoryParam> transformer(const TransformerConfig& c, int64_t scale) {
  Builder b{{}, scale};
  const DType dt = DType::kBFloat16;
  const int64_t h = b.s(c.hidden);
  b.add("embedding.word_embeddings.weight", {b.s(c.vocab), h}, dt, -1);
  for (int l = 0; l < c.layers; ++l) b.layer("decoder.layers." + std::to_string(l), c, l, dt);
  b.add("decoder.final_layernorm.weight", {h}, dt, -2);
  if (c.mhc) b.hc_head("decoder", c, -2);
  if (c.mtp) {
    b.add("mtp.layers.0.enorm.weight", {h}, dt, -3);
    b.add("mtp.layers.0.hnorm.weight", {h}, dt, -3);
    b.add("mtp.layers.0.eh_proj.weight", {h, 2 * h}, dt, -3);
    b.layer("mtp.layers.0.transformer_layer", c, -3, dt);
    if (c.mhc) b.hc_head("mtp.layers.0", c, -3);
  }
  b.add("output_layer.weight", {b.s(c.vocab), h}, dt, -2);
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
  ModelInventory m{name, std::move(built->first), built->second, 0};
  for (const auto& p : m.params) m.num_experts = std::max(m.num_experts, p.expert + 1);
  return m;
}

std::optional<std::string> validate_world(const WorldSizes& w, int num_layers) {
  std::ostringstream err;
  if (w.pp < 1 || w.vpp < 1 || w.ep < 1 || w.dp < 1) {
    err << "parallel sizes must be at least 1 (pp=" << w.pp << " vpp=" << w.vpp << " ep=" << w.ep
        << " dp=" << w.dp << ")";
  } else if (w.dp % w.ep != 0) {
    err << "expert-parallel size " << w.ep << " must divide the data-parallel size " << w.dp;
  } else if (w.vpp > 1 && w.pp == 1) {
    err << "virtual pipeline size " << w.vpp << " needs a pipeline size above 1";
  } else if (static_cast<int64_t>(w.pp) * w.vpp > num_layers) {
    err << "pp * vpp = " << w.pp * w.vpp << " exceeds the " << num_layers << " decoder layers";
  } else {
    return std::nullopt;
  }
  return err.str();
}

std::pair<int, int> chunk_layers(const WorldSizes& w, int num_layers, int chunk) {
  const int64_t chunks = static_cast<int64_t>(w.pp) * w.vpp;
  return {static_cast<int>(chunk * num_layers / chunks),
          static_cast<int>((chunk + 1) * num_layers / chunks)};
}

std::vector<model::ParamSpec> stage_params(const std::vector<InventoryParam>& inventory,
                                           const WorldSizes& w, int num_layers, int stage,
                                           int ep_rank, int num_experts) {
  std::vector<model::ParamSpec> out;
  const int experts_per_rank = std::max(1, num_experts / w.ep);
  for (int v = 0; v < w.vpp; ++v) {
    const int chunk = v * w.pp + stage;
    const auto [first, last] = chunk_layers(w, num_layers, chunk);
    const bool first_chunk = chunk == 0;
    const bool last_chunk = chunk == w.pp * w.vpp - 1;
    for (const InventoryParam& p : inventory) {
      const bool here = (p.layer >= first && p.layer < last) || (p.layer == -1 && first_chunk) ||
                        (p.layer <= -2 && last_chunk);
      if (!here) continue;
      if (p.expert >= 0 && p.expert / experts_per_rank != ep_rank) continue;
      model::ParamSpec s = p.spec;
      s.chunk = v;
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace sc::sim
