// Model files: the shipped files reproduce the built-in inventories exactly, at every scale; the
// schema's forms expand as documented; every malformed file gives one message naming the line
// (syntax) or the JSON path (schema), never a crash.
#include "sim/input/inventory_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace sc::input {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string model_path(const std::string& file) {
  return std::string(SC_SOURCE_DIR) + "/models/" + file;
}

ModelInventory parsed(const std::string& text, int64_t scale = 1) {
  auto r = parse_inventory_file(text, scale);
  if (auto* message = std::get_if<std::string>(&r)) {
    ADD_FAILURE() << "unexpected error: " << *message;
    return {};
  }
  return std::get<ModelInventory>(r);
}

std::string error_of(const std::string& text, int64_t scale = 1) {
  auto r = parse_inventory_file(text, scale);
  if (auto* message = std::get_if<std::string>(&r)) return *message;
  ADD_FAILURE() << "accepted: " << text;
  return "";
}

// Every field of two inventories, parameter by parameter.
void expect_same(const ModelInventory& file, const ModelInventory& built) {
  EXPECT_EQ(file.name, built.name);
  EXPECT_EQ(file.num_layers, built.num_layers);
  EXPECT_EQ(file.num_experts, built.num_experts);
  EXPECT_EQ(file.pipeline_layout, built.pipeline_layout);
  ASSERT_EQ(file.params.size(), built.params.size());
  for (size_t i = 0; i < file.params.size(); ++i) {
    const InventoryParam& a = file.params[i];
    const InventoryParam& b = built.params[i];
    SCOPED_TRACE("param " + std::to_string(i) + " " + b.spec.name);
    EXPECT_EQ(a.spec.name, b.spec.name);
    EXPECT_EQ(a.spec.shape, b.spec.shape);
    EXPECT_EQ(a.spec.dtype, b.spec.dtype);
    EXPECT_EQ(a.spec.keep_in_fp32, b.spec.keep_in_fp32);
    EXPECT_EQ(a.spec.is_expert, b.spec.is_expert);
    EXPECT_EQ(a.spec.shared_embedding, b.spec.shared_embedding);
    EXPECT_EQ(a.spec.group, b.spec.group);
    EXPECT_EQ(a.spec.chunk, b.spec.chunk);
    EXPECT_EQ(a.layer, b.layer);
    EXPECT_EQ(a.tp_split, b.tp_split);
    EXPECT_EQ(a.expert, b.expert);
    if (::testing::Test::HasFailure()) return;  // one mismatching parameter is enough to read
  }
}

TEST(InventoryFile, MixedDtypeNetFileEqualsTheBuiltInInventory) {
  const std::string text = read(model_path("mixed-dtype-net.json"));
  ASSERT_FALSE(text.empty());
  for (int64_t scale : {1, 64}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    const ModelInventory file = parsed(text, scale);
    expect_same(file, *builtin_model("mixed-dtype-net", scale));
    ASSERT_EQ(file.params.size(), 5u);
    EXPECT_EQ(file.params[2].spec.dtype, model::DType::kFloat32);  // alpha, kept in fp32
  }
}

TEST(InventoryFile, Dsv4FlashFileEqualsTheBuiltInInventoryAtEveryScale) {
  const std::string text = read(model_path("dsv4-flash.json"));
  // 3 does not divide the dimensions: "2*moe_ffn" (2 * (2048 / 3)) and 4096 / 3 must both agree.
  for (int64_t scale : {1, 3, 64, 256}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    expect_same(parsed(text, scale), *builtin_model("dsv4-flash", scale));
  }
}

TEST(InventoryFile, LoadNamesThePathAndTheLine) {
  const auto r = load_inventory_file(model_path("mixed-dtype-net.json"), 1);
  ASSERT_TRUE(std::holds_alternative<ModelInventory>(r));
  const auto missing = load_inventory_file(model_path("no-such-model.json"), 1);
  ASSERT_TRUE(std::holds_alternative<std::string>(missing));
  EXPECT_NE(std::get<std::string>(missing).find("no-such-model.json: cannot open"),
            std::string::npos);
  const auto dir = load_inventory_file(model_path(""), 1);
  ASSERT_TRUE(std::holds_alternative<std::string>(dir));
  EXPECT_NE(std::get<std::string>(dir).find("is a directory"), std::string::npos);
}

// A minimal valid file around `params` (a JSON array), with extra top-level members.
std::string file(const std::string& params, const std::string& extra = "") {
  return "{\"name\": \"m\", \"num_layers\": 2" + extra + ",\n \"params\": " + params + "}";
}

TEST(InventoryFile, ExpandsLoopsBlocksPlacementsAndDimensions) {
  const ModelInventory m = parsed(file(R"([
    {"name": "emb", "shape": ["vocab", "h"], "place": "pre", "shared_embedding": true},
    {"for_each_layer": [
      {"name": "l{layer}.norm", "shape": ["h"], "dtype": "fp16"},
      {"for_each_expert": [{"name": "l{layer}.e{expert}.w", "shape": ["2*h", "=3"]}]},
      {"use": "pair", "with": {"p": "l{layer}.pair"}}
    ]},
    {"name": "solo", "shape": [8], "expert": 1, "place": 1, "weight_decay": true},
    {"name": "head.bias", "shape": [4, 4], "place": "mtp"},
    {"name": "out", "shape": [100, 7], "place": "post", "keep_in_fp32": true}])",
                                       R"(, "num_experts": 2, "dims": {"vocab": 1000, "h": 64},
              "blocks": {"pair": [{"name": "{p}.a", "shape": [64, 64]}]})"),
                                  /*scale=*/8);
  ASSERT_EQ(m.num_experts, 2);
  // emb, then per layer: norm, 2 experts, pair.a; then solo, head.bias, out.
  ASSERT_EQ(m.params.size(), 1u + 2 * 4 + 3);
  EXPECT_EQ(m.params[0].spec.shape, (std::vector<int64_t>{125, 8}));  // 1000 / 8, 64 / 8
  EXPECT_TRUE(m.params[0].spec.shared_embedding);
  EXPECT_EQ(m.params[0].layer, -1);
  EXPECT_EQ(m.params[5].spec.name, "l1.norm");
  EXPECT_EQ(m.params[5].spec.dtype, model::DType::kFloat16);
  EXPECT_EQ(m.params[5].spec.group, 1);  // 1-D: no weight decay
  EXPECT_EQ(m.params[5].layer, 1);
  const InventoryParam& e = m.params[7];
  EXPECT_EQ(e.spec.name, "l1.e1.w");
  EXPECT_EQ(e.spec.shape, (std::vector<int64_t>{16, 3}));  // 2 * (64 / 8), fixed 3
  EXPECT_TRUE(e.spec.is_expert);
  EXPECT_EQ(e.expert, 1);
  EXPECT_EQ(e.spec.dtype, model::DType::kBFloat16);  // the file's default
  EXPECT_EQ(m.params[8].spec.name, "l1.pair.a");
  EXPECT_EQ(m.params[8].spec.shape, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(m.params[9].expert, 1);
  EXPECT_EQ(m.params[9].spec.group, 0);  // weight_decay given
  EXPECT_EQ(m.params[10].layer, -3);
  EXPECT_EQ(m.params[10].spec.group, 1);  // *.bias: no weight decay
  EXPECT_EQ(m.params[11].layer, -2);
  EXPECT_EQ(m.params[11].spec.dtype, model::DType::kFloat32);
  EXPECT_TRUE(m.params[11].spec.keep_in_fp32);
}

TEST(InventoryFile, ScaleNeverGoesBelowOneAndSparesFixedAndUnscalableDimensions) {
  const std::string params = R"([{"name": "w", "shape": [3, "=3", 640], "place": 0}])";
  EXPECT_EQ(parsed(file(params), 64).params[0].spec.shape, (std::vector<int64_t>{1, 3, 10}));
  EXPECT_EQ(parsed(file(params, R"(, "scalable": false)"), 64).params[0].spec.shape,
            (std::vector<int64_t>{3, 3, 640}));
}

TEST(InventoryFile, SyntaxErrorsNameLineAndColumn) {
  // The stray 'x' is on line 3, column 13.
  const std::string text = "{\n  \"name\": \"m\",\n  \"params\": x\n}";
  const std::string message = error_of(text);
  EXPECT_EQ(message.rfind("3:13: syntax error", 0), 0u) << message;
  EXPECT_EQ(error_of("").rfind("1:1: syntax error", 0), 0u) << error_of("");
  EXPECT_EQ(error_of("{\"name\": \"m\",}").rfind("1:14: syntax error", 0), 0u);
}

TEST(InventoryFile, LineColumnAgreesWithTheJsonLibrary) {
  for (const std::string text : {"{\n\n   ]", "[1,\n 2,,", "{\"a\":\n  tru }", "\n\n\n  @"}) {
    try {
      const nlohmann::json parsed = nlohmann::json::parse(text);
      ADD_FAILURE() << "parsed: " << text << " as " << parsed.dump();
    } catch (const nlohmann::json::parse_error& e) {
      const auto [line, column] = line_column(text, e.byte - 1);
      const std::string where =
          "line " + std::to_string(line) + ", column " + std::to_string(column);
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
    }
  }
}

struct BadFile {
  const char* what;
  std::string text;
  const char* message;  // must appear in the error
};

TEST(InventoryFile, SchemaErrorsNameTheJsonPath) {
  const std::vector<BadFile> cases{
      {"missing params", R"({"name": "m", "num_layers": 1})", "missing key \"params\""},
      {"missing name", R"({"num_layers": 1, "params": []})", "missing key \"name\""},
      {"missing shape", file(R"([{"name": "w", "place": 0}])"), "params[0]: missing key \"shape\""},
      {"wrong type", file(R"([{"name": "w", "shape": "64", "place": 0}])"),
       "params[0].shape: expected an array, got string"},
      {"float layers", R"({"name": "m", "num_layers": 1.5, "params": []})",
       "num_layers: expected an integer, got number"},
      {"unknown dtype", file(R"([{"name": "a", "shape": [1], "place": 0},
                                 {"name": "w", "shape": [1], "dtype": "bf61", "place": 0}])"),
       "params[1].dtype: unknown dtype \"bf61\" (known: bf16, fp16, fp32)"},
      {"fp64", file(R"([{"name": "w", "shape": [1], "dtype": "fp64", "place": 0}])"),
       "unknown dtype \"fp64\""},
      {"zero dimension", file(R"([{"name": "w", "shape": [4, 0], "place": 0}])"),
       "params[0].shape[1]: 0 must be at least 1"},
      {"negative dimension", file(R"([{"name": "w", "shape": [-4], "place": 0}])"),
       "params[0].shape[0]: -4 must be at least 1"},
      {"zero named dimension",
       file(R"([{"name": "w", "shape": ["h"], "place": 0}])", R"(, "dims": {"h": 0})"),
       "dims.h: 0 must be at least 1"},
      {"bad dimension text", file(R"([{"name": "w", "shape": ["2*"], "place": 0}])"),
       "params[0].shape[0]: bad dimension \"2*\""},
      {"unknown dimension name", file(R"([{"name": "w", "shape": ["hiden"], "place": 0}])"),
       "params[0].shape[0]: unknown dimension name \"hiden\""},
      {"empty shape", file(R"([{"name": "w", "shape": [], "place": 0}])"),
       "params[0].shape: expected 1 to 8 dimensions"},
      {"empty params", file("[]"), "params: no parameters (the list is empty)"},
      {"expands to nothing", file(R"([{"for_each_layer": []}])"), "params: expands to no"},
      {"duplicate names", file(R"([{"for_each_layer": [{"name": "norm", "shape": [4]}]}])"),
       "params[0].for_each_layer[0].name: duplicate parameter name \"norm\" (first from "
       "params[0].for_each_layer[0].name (layer 0))"},
      {"experts without a count", file(R"([{"name": "w", "shape": [4], "place": 0, "expert": 0}])"),
       "params[0].expert: expert parameters need \"num_experts\""},
      {"expert loop without a count",
       file(
           R"([{"for_each_layer": [{"for_each_expert": [{"name": "e{expert}", "shape": [4]}]}]}])"),
       "params[0].for_each_layer[0].for_each_expert: expert parameters need \"num_experts\""},
      {"unknown key", file(R"([{"name": "w", "shape": [4], "place": 0, "dtpye": "bf16"}])"),
       "params[0]: unknown key \"dtpye\" (a parameter takes: name, shape, dtype"},
      {"unknown top-level key", file("[]", R"(, "layers": 3)"), "unknown key \"layers\""},
      {"no placement", file(R"([{"name": "w", "shape": [4]}])"),
       "params[0]: no placement for \"w\""},
      {"bad placement", file(R"([{"name": "w", "shape": [4], "place": "middle"}])"),
       "params[0].place: expected \"pre\", \"post\", \"mtp\" or a layer index below 2, got "
       "\"middle\""},
      {"layer out of range", file(R"([{"name": "w", "shape": [4], "place": 2}])"),
       "params[0].place: must be at most 1"},
      {"unknown placeholder", file(R"([{"for_each_layer": [{"name": "l{layr}", "shape": [4]}]}])"),
       "params[0].for_each_layer[0].name: unknown placeholder {layr} in \"l{layr}\" (known "
       "here: {layer})"},
      {"layer placeholder outside the loop",
       file(R"([{"name": "l{layer}", "shape": [4], "place": 0}])"), "unknown placeholder {layer}"},
      {"keep_in_fp32 with bf16",
       file(R"([{"name": "w", "shape": [4], "place": 0, "keep_in_fp32": true, "dtype": "bf16"}])"),
       "params[0].dtype: keep_in_fp32 needs dtype fp32"},
      {"unknown block", file(R"([{"use": "nope", "place": 0}])"),
       "params[0].use: unknown block \"nope\""},
      {"recursive block",
       file(R"([{"use": "a", "place": 0}])", R"(, "blocks": {"a": [{"use": "a"}]})"),
       "blocks.a[0].use: block \"a\" uses itself"},
      {"nested layer loops", file(R"([{"for_each_layer": [{"for_each_layer": []}]}])"),
       "for_each_layer inside for_each_layer"},
      {"not an entry", file(R"([{"shape": [4]}])"), "params[0]: expected a parameter"},
      {"duplicate key", R"({"name": "m", "name": "n", "num_layers": 1, "params": []})",
       "duplicate key \"name\""},
      {"top level not an object", "[1, 2]", "expected a JSON object at the top, got array"},
      {"number out of range", file(R"([{"name": "w", "shape": [1e400], "place": 0}])"),
       "invalid JSON: number overflow parsing '1e400'"},
      {"unknown tp split",
       file(R"([{"name": "w", "shape": [4, 4], "place": 0, "tp_split": "diag"}])"),
       "params[0].tp_split: unknown split \"diag\" (known: none, column, row, vocab)"},
      {"row split of a vector",
       file(R"([{"name": "w", "shape": [4], "place": 0, "tp_split": "row"}])"),
       "params[0].tp_split: a row-parallel parameter needs 2 or more dimensions"},
      {"empty pipeline layout", file(R"([{"name": "w", "shape": [4], "place": 0}])",
                                     R"(, "pipeline_layout": "")"),
       "pipeline_layout: must not be empty"},
      {"too many parameters",
       R"({"name": "m", "num_layers": 100000, "num_experts": 65536, "params": [{"for_each_layer":
           [{"for_each_expert": [{"name": "{layer}.{expert}", "shape": [1]}]}]}]})",
       "more than 500000 parameters"},
  };
  for (const BadFile& c : cases) {
    const std::string message = error_of(c.text);
    EXPECT_NE(message.find(c.message), std::string::npos)
        << c.what << "\n  got:  " << message << "\n  want: " << c.message;
  }
}

TEST(InventoryFile, LoopsOverEmptyListsStillEnd) {
  // 100000 layers times 65536 experts of nothing: no parameter is made, yet expansion stops.
  const std::string text = R"({"name": "m", "num_layers": 100000, "num_experts": 65536,
      "params": [{"for_each_layer": [{"for_each_expert": []}]}]})";
  EXPECT_NE(error_of(text).find("params[0].for_each_layer[0].for_each_expert: the file expands "
                                "too far"),
            std::string::npos)
      << error_of(text);
}

TEST(InventoryFile, DeepNestingIsRefusedNotRecursedInto) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_NE(error_of(deep).find("nested deeper than 64 levels"), std::string::npos);
}

TEST(InventoryFile, TpSplitDefaultsByNameAndAFileMayOverrideIt) {
  const ModelInventory m = parsed(file(R"([
    {"name": "embedding.word_embeddings.weight", "shape": [64, 8], "place": "pre"},
    {"name": "decoder.layers.0.self_attention.linear_proj.weight", "shape": [8, 8], "place": 0},
    {"name": "decoder.layers.0.mlp.linear_fc1.weight", "shape": [16, 8], "place": 0},
    {"name": "decoder.layers.0.input_layernorm.weight", "shape": [8], "place": 0},
    {"name": "decoder.layers.0.mlp.router.weight", "shape": [4, 8], "place": 0},
    {"name": "my_proj.weight", "shape": [8, 8], "place": 1, "tp_split": "row"},
    {"name": "output_layer.weight", "shape": [64, 8], "place": "post", "tp_split": "none"}])",
                                       R"(, "pipeline_layout": "Et|tL")"));
  ASSERT_EQ(m.params.size(), 7u);
  const std::vector<TpSplit> want{TpSplit::kColumn, TpSplit::kRow,  TpSplit::kColumn,
                                  TpSplit::kNone,   TpSplit::kNone, TpSplit::kRow,
                                  TpSplit::kNone};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(tp_split_name(m.params[i].tp_split), std::string(tp_split_name(want[i])))
        << m.params[i].spec.name;
  }
  EXPECT_EQ(m.pipeline_layout, "Et|tL");
}

}  // namespace
}  // namespace sc::input
