// Golden cases of the world split: Megatron's assignment of decoder layers to (pipeline stage,
// virtual chunk) with the even split, the uneven first/last stage and a pipeline layout, the
// errors Megatron raises when the layers do not divide, and the TP sharding of shapes. Every
// expected value is worked out by hand from Megatron at d8b71082 (transformer_layer.py
// get_transformer_layer_offset, transformer_block.py get_num_layers_to_build,
// pipeline_parallel_layer_layout.py, tensor_parallel/layers.py).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "sim/input/scenario.h"

namespace sc::input {
namespace {

using Layers = std::vector<std::vector<std::pair<int, int>>>;  // [stage][chunk]

WorldSizes world(int pp, int vpp, const std::string& layout = "", int first = 0, int last = 0) {
  WorldSizes w;
  w.pp = pp;
  w.vpp = vpp;
  w.pipeline_layout = layout;
  w.first_stage_layers = first;
  w.last_stage_layers = last;
  return w;
}

PipelinePlan plan_of(const WorldSizes& w, int num_layers, bool mtp = false) {
  auto p = pipeline_plan(w, num_layers, mtp);
  if (auto* why = std::get_if<std::string>(&p)) {
    ADD_FAILURE() << "rejected: " << *why;
    return {};
  }
  return std::get<PipelinePlan>(p);
}

std::string error_of(const WorldSizes& w, int num_layers, bool mtp = false) {
  auto p = pipeline_plan(w, num_layers, mtp);
  if (auto* why = std::get_if<std::string>(&p)) return *why;
  ADD_FAILURE() << "accepted";
  return "";
}

// Every layer in exactly one chunk, in layer-id order (chunk v of every stage before v + 1).
void expect_tiles(const PipelinePlan& p, int num_layers) {
  int next = 0;
  const size_t vpp = p.layers.empty() ? 0 : p.layers[0].size();
  for (size_t v = 0; v < vpp; ++v) {
    for (size_t s = 0; s < p.layers.size(); ++s) {
      EXPECT_EQ(p.layers[s][v].first, next) << "stage " << s << " chunk " << v;
      next = p.layers[s][v].second;
    }
  }
  EXPECT_EQ(next, num_layers);
}

TEST(PipelineSplit, EvenSplitOf48LayersOverPp4Vpp3) {
  // 12 layers per rank, 4 per chunk; chunk v of stage s starts at v * 48/3 + s * 4.
  const PipelinePlan p = plan_of(world(4, 3), 48);
  const Layers want{{{0, 4}, {16, 20}, {32, 36}},
                    {{4, 8}, {20, 24}, {36, 40}},
                    {{8, 12}, {24, 28}, {40, 44}},
                    {{12, 16}, {28, 32}, {44, 48}}};
  EXPECT_EQ(p.layers, want);
  EXPECT_EQ(p.mtp_stage, 3);
  EXPECT_EQ(p.mtp_chunk, 2);
  expect_tiles(p, 48);
}

TEST(PipelineSplit, TheExamplesInMegatronsComment) {
  // transformer_block.py: 8 layers, 2 stages, 4 chunks: stage 0 [0] [2] [4] [6], stage 1 [1]
  // [3] [5] [7]; 2 chunks: stage 0 [0, 1] [4, 5], stage 1 [2, 3] [6, 7].
  EXPECT_EQ(plan_of(world(2, 4), 8).layers,
            (Layers{{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {{1, 2}, {3, 4}, {5, 6}, {7, 8}}}));
  EXPECT_EQ(plan_of(world(2, 2), 8).layers, (Layers{{{0, 2}, {4, 6}}, {{2, 4}, {6, 8}}}));
  EXPECT_EQ(plan_of(world(1, 1), 5).layers, (Layers{{{0, 5}}}));
}

TEST(PipelineSplit, LayersThatDoNotDivideAreRejectedAsMegatronDoes) {
  // DeepSeek-V4-Flash's 43 layers: prime, so no PP above 1 divides them.
  EXPECT_NE(error_of(world(8, 3), 43)
                .find("num_layers=43 should be divisible by "
                      "config.pipeline_model_parallel_size=8"),
            std::string::npos);
  EXPECT_NE(error_of(world(8, 4), 48)
                .find("num_layers_per_pipeline_rank 6 should be divisible by vp_size 4"),
            std::string::npos);
  EXPECT_TRUE(validate_world(world(8, 3), 43).has_value());
  EXPECT_FALSE(validate_world(world(4, 3), 48).has_value());
  WorldSizes big = world(64, 1);
  EXPECT_NE(validate_world(big, 43)->find("pp = 64 exceeds the 43 decoder layers"),
            std::string::npos);
}

TEST(PipelineSplit, UnevenFirstAndLastStages) {
  // 16 layers, PP 4, VPP 2, 2 layers on the first and on the last stage: 12 middle layers over
  // 2 middle stages (6 each); per chunk first 1, middle 3, last 1; a virtual round is 8 layers.
  const PipelinePlan p = plan_of(world(4, 2, "", 2, 2), 16);
  EXPECT_EQ(p.layers, (Layers{{{0, 1}, {8, 9}},
                              {{1, 4}, {9, 12}},
                              {{4, 7}, {12, 15}},
                              {{7, 8}, {15, 16}}}));
  expect_tiles(p, 16);
  // Without VPP: 10 layers, first 1, last 3: the middle 6 over 2 stages.
  EXPECT_EQ(plan_of(world(4, 1, "", 1, 3), 10).layers,
            (Layers{{{0, 1}}, {{1, 4}}, {{4, 7}}, {{7, 10}}}));
  // Only the last stage set: 3 middle stages of 3 before it.
  EXPECT_EQ(plan_of(world(4, 1, "", 0, 1), 10).layers,
            (Layers{{{0, 3}}, {{3, 6}}, {{6, 9}}, {{9, 10}}}));
  // Megatron's ValueErrors (transformer_config.py).
  EXPECT_NE(error_of(world(4, 2, "", 3, 2), 16)
                .find("number of layers at first stage: 3 must be divisible by virtual pipeline "
                      "parallel degree 2"),
            std::string::npos);
  EXPECT_NE(error_of(world(4, 1, "", 1, 2), 10)
                .find("number of layers at middle stage: 7 must be divisible by the middle "
                      "pipeline model parallel size 2"),
            std::string::npos);
  EXPECT_NE(error_of(world(2, 1, "", 1, 2), 10).find("Mismatch: 7 middle layers remaining but 0"),
            std::string::npos);
  EXPECT_FALSE(validate_world(world(4, 2, "", 2, 2), 12).has_value());
  EXPECT_NE(error_of(world(4, 2, "", 2, 2), 14)
                .find("number of layers on each middle pipeline rank: 5 must be divisible"),
            std::string::npos);
  EXPECT_NE(error_of(world(4, 1, "", 8, 8), 10).find("exceed the 10 decoder layers"),
            std::string::npos);
}

TEST(PipelineSplit, TheSeedLayoutPlaces43LayersOver24VirtualStages) {
  // "Et|(tt|)*20t|t|mL": list stage i is chunk i / 8 of stage i % 8; E + 1 layer, twenty of
  // 2 layers (1..40), one layer (41), one layer (42), then MTP and the loss.
  const PipelinePlan p = plan_of(world(8, 3, kDsv4FlashLayout), 43, /*mtp=*/true);
  ASSERT_EQ(p.layers.size(), 8u);
  EXPECT_EQ(p.layers[0], (std::vector<std::pair<int, int>>{{0, 1}, {15, 17}, {31, 33}}));
  EXPECT_EQ(p.layers[1], (std::vector<std::pair<int, int>>{{1, 3}, {17, 19}, {33, 35}}));
  EXPECT_EQ(p.layers[5], (std::vector<std::pair<int, int>>{{9, 11}, {25, 27}, {41, 42}}));
  EXPECT_EQ(p.layers[6], (std::vector<std::pair<int, int>>{{11, 13}, {27, 29}, {42, 43}}));
  EXPECT_EQ(p.layers[7], (std::vector<std::pair<int, int>>{{13, 15}, {29, 31}, {43, 43}}));
  EXPECT_EQ(p.mtp_stage, 7);
  EXPECT_EQ(p.mtp_chunk, 2);
  expect_tiles(p, 43);
  EXPECT_EQ(chunk_layers(world(8, 3, kDsv4FlashLayout), 43, 23), std::make_pair(43, 43));
  EXPECT_EQ(chunk_layers(world(8, 3, kDsv4FlashLayout), 43, 8), std::make_pair(15, 17));
}

TEST(PipelineSplit, MegatronsDocumentedLayoutWithAStandaloneMtpStage) {
  // docs/user-guide/features/pipeline_parallel_layout.md: 61 layers and one MTP layer over
  // PP 16 with "Et*3|(tt|)*29,m|L": PP rank 0 holds E + 3 layers then 2; rank 14 ends with MTP.
  const PipelinePlan p = plan_of(world(16, 2, "Et*3|(tt|)*29,m|L"), 61, true);
  EXPECT_EQ(p.layers[0], (std::vector<std::pair<int, int>>{{0, 3}, {33, 35}}));
  EXPECT_EQ(p.layers[13][1], std::make_pair(59, 61));
  EXPECT_EQ(p.layers[14][1], std::make_pair(61, 61));
  EXPECT_EQ(p.layers[15][1], std::make_pair(61, 61));
  EXPECT_EQ(p.mtp_stage, 14);
  EXPECT_EQ(p.mtp_chunk, 1);
  expect_tiles(p, 61);
}

TEST(PipelineSplit, MalformedLayoutsAreRejected) {
  EXPECT_NE(error_of(world(2, 2, "Et|tt|tt|tL"), 8).find("6 decoder layers (t), but the model "
                                                          "has 8"),
            std::string::npos);
  EXPECT_NE(error_of(world(2, 2, "Et|t|L"), 2).find("3 stages, not divisible by pp=2"),
            std::string::npos);
  EXPECT_NE(error_of(world(2, 3, "Et|t|t|L"), 3).find("makes vpp=2, not vpp=3"),
            std::string::npos);
  EXPECT_NE(error_of(world(2, 1, "tE|tL"), 2).find("the first layer must be the embedding"),
            std::string::npos);
  EXPECT_NE(error_of(world(2, 1, "Et|tx"), 2).find("invalid layer character 'x'"),
            std::string::npos);
  EXPECT_NE(error_of(world(2, 1, "Et|tL"), 2, /*mtp=*/true).find("the layout no m"),
            std::string::npos);
  EXPECT_NE(error_of(world(2, 2, "Et|m|t|L"), 2, true).find("decoder layers must be placed "
                                                            "before MTP"),
            std::string::npos);
  EXPECT_NE(error_of(world(2, 2, "Et|tm|t|L"), 3, true).find("before MTP"), std::string::npos);
  EXPECT_NE(error_of(world(2, 2, "Et|t|t|tL", 1), 3).find("cannot be combined"),
            std::string::npos);
  // "(tt|)*2" unrolls to "tt|tt|"; "t*3" to "ttt".
  auto stages = parse_pipeline_layout("E(tt|)*2,t*3L");
  ASSERT_TRUE(std::holds_alternative<std::vector<std::string>>(stages));
  EXPECT_EQ(std::get<std::vector<std::string>>(stages),
            (std::vector<std::string>{"Ett", "tt", "tttL"}));
}

InventoryParam param(const std::string& name, std::vector<int64_t> shape, int layer,
                     int expert = -1) {
  InventoryParam p;
  p.spec.name = name;
  p.spec.shape = std::move(shape);
  p.spec.is_expert = expert >= 0;
  p.layer = layer;
  p.expert = expert;
  p.tp_split = default_tp_split(name);
  return p;
}

TEST(TensorParallel, ShapesOfASmallInventoryAtTp2) {
  const std::vector<InventoryParam> inv{
      param("embedding.word_embeddings.weight", {1000, 64}, -1),
      param("decoder.layers.0.input_layernorm.weight", {64}, 0),
      param("decoder.layers.0.self_attention.linear_qkv.weight", {192, 64}, 0),
      param("decoder.layers.0.self_attention.linear_qkv.bias", {192}, 0),
      param("decoder.layers.0.self_attention.linear_proj.weight", {64, 64}, 0),
      param("decoder.layers.0.self_attention.linear_proj.bias", {64}, 0),
      param("decoder.layers.0.self_attention.linear_q_down_proj.weight", {32, 64}, 0),
      param("decoder.layers.0.self_attention.linear_q_up_proj.weight", {128, 32}, 0),
      param("decoder.layers.0.self_attention.attn_sink", {8}, 0),
      param("decoder.layers.0.self_attention.compressor.ape", {4, 16}, 0),
      param("decoder.layers.0.mlp_hc.mapping_proj.weight", {24, 256}, 0),
      param("decoder.layers.0.mlp.router.weight", {4, 64}, 0),
      param("decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight", {96, 64}, 0, 0),
      param("decoder.layers.0.mlp.experts.local_experts.0.linear_fc2.weight", {64, 48}, 0, 0),
      param("decoder.layers.0.mlp.shared_experts.linear_fc1.weight", {96, 64}, 0),
      param("decoder.layers.0.mlp.shared_experts.linear_fc2.weight", {64, 48}, 0),
      param("decoder.final_layernorm.weight", {64}, -2),
      param("mtp.layers.0.eh_proj.weight", {64, 128}, -3),
      param("output_layer.weight", {1000, 64}, -2),
  };
  const std::vector<std::vector<int64_t>> want{
      {500, 64},  // vocab-parallel
      {64},       // norm: replicated
      {96, 64},   // column
      {96},       // column bias
      {64, 32},   // row
      {64},       // row-parallel bias: whole
      {32, 64},   // MLA down projection: duplicated
      {64, 32},   // column
      {4},        // attention sink: one per local head
      {4, 16},    // ape: duplicated
      {24, 256},  // mHC: replicated
      {4, 64},    // router: replicated
      {48, 64},   // expert fc1: column (expert TP = TP)
      {64, 24},   // expert fc2: row
      {48, 64},   // shared expert fc1
      {64, 24},   // shared expert fc2
      {64},       // final norm
      {32, 128},  // MTP eh_proj: column
      {500, 64},  // output layer: vocab-parallel
  };
  WorldSizes w;
  w.tp = 2;
  EXPECT_FALSE(validate_tp(inv, 2).has_value());
  const std::vector<model::ParamSpec> got = stage_params(inv, w, 1, 0, 0, 1);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].shape, want[i]) << got[i].name;
  // TP 1 leaves every shape alone.
  w.tp = 1;
  const std::vector<model::ParamSpec> whole = stage_params(inv, w, 1, 0, 0, 1);
  for (size_t i = 0; i < inv.size(); ++i) EXPECT_EQ(whole[i].shape, inv[i].spec.shape);
}

TEST(TensorParallel, ATpThatDoesNotDivideASplitDimensionIsNamed) {
  const std::vector<InventoryParam> inv{
      param("decoder.layers.0.input_layernorm.weight", {63}, 0),  // replicated: never checked
      param("decoder.layers.0.self_attention.linear_qkv.weight", {192, 63}, 0),
      param("decoder.layers.0.self_attention.linear_proj.weight", {63, 63}, 0)};
  const auto why = validate_tp(inv, 3);
  EXPECT_FALSE(why.has_value());  // 192 and 63 both divide by 3
  const auto bad = validate_tp(inv, 2);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(*bad,
            "tp=2 does not divide dimension 1 (63) of "
            "decoder.layers.0.self_attention.linear_proj.weight (row-parallel)");
  // The built-in Llama at full size: 4096 is not a multiple of 3.
  const auto llama = builtin_model("llama", 1);
  ASSERT_TRUE(llama.has_value());
  EXPECT_EQ(validate_tp(llama->params, 3).value_or(""),
            "tp=3 does not divide dimension 1 (4096) of "
            "decoder.layers.0.self_attention.linear_proj.weight (row-parallel)");
  EXPECT_FALSE(validate_tp(llama->params, 8).has_value());
}

}  // namespace
}  // namespace sc::input
