// Pictures of a world (sim/picture/picture.h): the SVG writer escapes and its checker rejects what is not
// well-formed; a worked-example case draws every parameter, padding and shard; a large buffer
// aggregates per layer; and shardcheck-sim's SVG of the seed world parses, names every failing
// rank with its error text, stays small at full size, and renders to a PNG with rsvg-convert.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "sim/picture/picture.h"
#include "sim/picture/svg.h"

namespace sc::picture {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

model::ParamSpec param(const std::string& name, int64_t numel, model::DType dtype,
                       bool keep = false) {
  model::ParamSpec p;
  p.name = name;
  p.shape = {numel};
  p.dtype = dtype;
  p.keep_in_fp32 = keep;
  p.group = 1;
  return p;
}

TEST(Svg, EscapesTextAndAttributes) {
  SvgWriter w;
  w.text(1, 2, "a<b & \"c\" 'd'", 10, {{"data-x", "<&>"}});
  const std::string svg = w.finish(10, 10);
  EXPECT_NE(svg.find("a&lt;b &amp; &quot;c&quot; &apos;d&apos;"), std::string::npos) << svg;
  EXPECT_NE(svg.find("data-x=\"&lt;&amp;&gt;\""), std::string::npos) << svg;
  EXPECT_EQ(check_xml(svg), std::nullopt);
}

TEST(Svg, CheckerRejectsMalformedXml) {
  EXPECT_EQ(check_xml("<a><b/></a>"), std::nullopt);
  EXPECT_NE(check_xml("<a><b></a>"), std::nullopt);
  EXPECT_NE(check_xml("<a></a><c/>"), std::nullopt);
  EXPECT_NE(check_xml("<a x=1/>"), std::nullopt);
  EXPECT_NE(check_xml("<a x=\"1\" x=\"2\"/>"), std::nullopt);
  EXPECT_NE(check_xml("<a>&nbsp;</a>"), std::nullopt);
  EXPECT_NE(check_xml("<a>1 < 2</a>"), std::nullopt);
  EXPECT_NE(check_xml("<a>"), std::nullopt);
  EXPECT_NE(check_xml(""), std::nullopt);
  const auto why = check_xml("<svg><g></svg>");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("</svg> does not match <g>"), std::string::npos) << *why;
}

// The worked example of the layout spec: [97, 103, 300] elements, dp 4, one bucket [0, 640).
PictureInput worked_example() {
  PictureInput in;
  in.title = "worked example";
  in.header = "dp=4";
  in.dp = 4;
  in.variants = {"upstream"};
  PictureStage st;
  st.c.dp = 4;
  st.c.cpu_offload = true;
  st.c.offload_fraction = 0.5;
  st.c.params = {param("p0", 97, model::DType::kBFloat16), param("p1", 103, model::DType::kBFloat16),
                 param("p2", 300, model::DType::kBFloat16), param("alpha", 1, model::DType::kFloat32, true)};
  in.stages.push_back(st);
  for (int r = 0; r < 4; ++r) {
    RankOutcome row;
    row.variant = "upstream";
    row.rank = r;
    row.dp_rank = r;
    row.ok = r != 0;
    row.outcome = r == 0 ? "ValueError: can't optimize a non-leaf Tensor (first: alpha)" : "OK";
    row.failing_param = r == 0 ? "alpha" : "";
    in.ranks.push_back(row);
  }
  return in;
}

TEST(Picture, SmallCaseDrawsEveryParameterShardAndFailure) {
  const std::string svg = draw_svg(worked_example());
  ASSERT_EQ(check_xml(svg), std::nullopt);
  // Every parameter at its place (reverse order: p2 at [0, 300), p1 at [320, 423), p0 at [448,
  // 545)), and the fp32 buffer's keep-fp32 parameter.
  EXPECT_NE(svg.find("<title>p2 bf16 (300,) at [0, 300)</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>p1 bf16 (103,) at [320, 423)</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>p0 bf16 (97,) at [448, 545)</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>alpha fp32 (1,) at [0, 1) keep-fp32</title>"), std::string::npos);
  EXPECT_NE(svg.find("640 elements, 140 of them padding"), std::string::npos);
  // The bf16 buffer's shards are [0,160), [160,320), [320,480), [480,640): rank 2 owns all of p1
  // and p0's first 32 elements.
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(svg.find(">rank " + std::to_string(r) + "</text>"), std::string::npos) << r;
  }
  EXPECT_NE(svg.find("rank 2: 1 piece "), std::string::npos);
  EXPECT_NE(svg.find(" at [320, 423) (p1)</title>"), std::string::npos);
  EXPECT_NE(svg.find(" at [448, 480) (p0)</title>"), std::string::npos);
  EXPECT_NE(svg.find("rank 3: 1 piece "), std::string::npos);
  EXPECT_NE(svg.find(" at [480, 545) (p0)</title>"), std::string::npos);
  // The failing rank: red cell with its error, and the piece of alpha it fails on.
  EXPECT_NE(svg.find("class=\"rank-fail\" data-rank=\"0\""), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"rank-fail\""), 1u);
  EXPECT_EQ(count(svg, "class=\"rank-ok\""), 3u);
  EXPECT_NE(svg.find("rank 0 fails on this piece of alpha"), std::string::npos);
  EXPECT_NE(svg.find("can&apos;t optimize a non-leaf Tensor (first: alpha)"), std::string::npos);
  // Offload fraction 0.5 of the installed tensors: some pieces on the host, some on the device.
  EXPECT_NE(svg.find("offloaded to the host at"), std::string::npos);
  EXPECT_NE(svg.find("on the accelerator at"), std::string::npos);
  // Padding is drawn (the hatch under the parameters).
  EXPECT_GE(count(svg, "url(#pad)"), 2u);
}

TEST(Picture, LargeBufferAggregatesPerLayer) {
  PictureInput in;
  in.title = "large";
  in.dp = 8;
  in.variants = {"pr6982"};
  PictureStage st;
  st.c.dp = 8;
  for (int layer = 0; layer < 40; ++layer) {
    for (int e = 0; e < 100; ++e) {
      st.c.params.push_back(param("decoder.layers." + std::to_string(layer) + ".mlp.experts." +
                                      std::to_string(e) + ".weight",
                                  4096 * 16, model::DType::kBFloat16));
    }
  }
  in.stages.push_back(st);
  const std::string svg = draw_svg(in);
  ASSERT_EQ(check_xml(svg), std::nullopt);
  EXPECT_NE(svg.find("layer 7: 100 parameters"), std::string::npos);
  EXPECT_EQ(svg.find("experts.3.weight bf16"), std::string::npos);  // not drawn one by one
  EXPECT_LT(svg.size(), 200u * 1024);
}

TEST(Picture, HtmlEmbedsThePictureAndTheTables) {
  const PictureInput in = worked_example();
  const std::string svg = draw_svg(in);
  const std::string html = draw_html(in, svg);
  EXPECT_NE(html.find("<svg xmlns"), std::string::npos);
  EXPECT_EQ(html.find("<?xml"), std::string::npos);
  EXPECT_NE(html.find("<h2>Ranks</h2>"), std::string::npos);
  EXPECT_NE(html.find("<tr class=\"fail\"><td class=\"text\">upstream</td><td>0</td>"),
            std::string::npos);
  EXPECT_NE(html.find("<h2>Buffers</h2>"), std::string::npos);
  EXPECT_EQ(check_xml(html.substr(html.find("<html"))), std::nullopt);
}

TEST(Picture, UnwritableFileIsAMessage) {
  const auto why = write_text_file("/nonexistent-dir/x.svg", "x");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("cannot write /nonexistent-dir/x.svg"), std::string::npos) << *why;
}

struct SimRun {
  int status;
  std::string out;
  double seconds;
};

SimRun run_sim(const std::string& args) {
  const auto start = std::chrono::steady_clock::now();
  const std::string cmd = std::string(SC_SIM_EXE) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = p ? pclose(p) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/shardcheck-picture-" + name;
}

// Every failing rank of the --json rows has a red cell in the SVG whose tooltip carries its
// error text; the OK ranks have green ones.
void expect_names_every_failing_rank(const std::string& json_text, const std::string& svg) {
  const auto j = nlohmann::json::parse(json_text.substr(json_text.find('{')));
  int failing = 0, ok = 0;
  for (const auto& r : j.at("ranks")) {
    const std::string rank = std::to_string(r.at("rank").get<int>());
    const std::string variant = r.at("variant").get<std::string>();
    const std::string outcome = r.at("outcome").get<std::string>();
    if (r.at("ok").get<bool>()) {
      ++ok;
      continue;
    }
    ++failing;
    const std::string cell = "class=\"rank-fail\" data-rank=\"" + rank + "\"";
    // The cell of this variant: search inside the variant's group.
    const size_t group = svg.find("data-variant=\"" + variant + "\"");
    ASSERT_NE(group, std::string::npos) << variant;
    const size_t at = svg.find(cell, group);
    ASSERT_NE(at, std::string::npos) << variant << " rank " << rank;
    const size_t end = svg.find("</rect>", at);
    const std::string element = svg.substr(at, end - at);
    EXPECT_NE(element.find(xml_escape(outcome)), std::string::npos)
        << variant << " rank " << rank << ": " << element;
  }
  EXPECT_GT(failing, 0);
  EXPECT_EQ(count(svg, "class=\"rank-fail\""), static_cast<size_t>(failing));
  EXPECT_EQ(count(svg, "class=\"rank-ok\""), static_cast<size_t>(ok));
}

TEST(PictureCli, FullSizeSeedWorldDrawsInSecondsAndNamesEveryFailingRank) {
  const std::string svg_path = temp_path("full.svg"), html_path = temp_path("full.html");
  const SimRun r = run_sim("--layout-only --json --svg=" + svg_path + " --html=" + html_path);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_LT(r.seconds, 20.0);
  const std::string svg = read_file(svg_path);
  ASSERT_EQ(check_xml(svg), std::nullopt);
  EXPECT_LT(svg.size(), 400u * 1024) << "a full-size world must stay a few hundred KB";
  expect_names_every_failing_rank(r.out, svg);
  // 32 ranks fail under upstream, each on an mHC parameter of its stage.
  EXPECT_EQ(count(svg, "class=\"rank-fail\""), 32u);
  EXPECT_NE(svg.find("upstream ranks 0, 1 fail on decoder.layers.0.mlp_hc.mapping_proj.weight"),
            std::string::npos);
  EXPECT_NE(svg.find("upstream ranks 2, 3 fail on decoder.layers.0.attn_hc.mapping_proj.weight"),
            std::string::npos);
  const std::string html = read_file(html_path);
  EXPECT_NE(html.find("<svg xmlns"), std::string::npos);
  EXPECT_EQ(count(html, "<tr class=\"fail\">"), 32u);
  std::remove(svg_path.c_str());
  std::remove(html_path.c_str());
}

TEST(PictureCli, SeedScenarioPictureFromThePortNamesEveryFailingRank) {
  // Tensor mode: the outcomes are the port's own errors (construction only, no steps).
  const std::string svg_path = temp_path("seed.svg");
  const SimRun r = run_sim("--steps=0 --json --svg=" + svg_path);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string svg = read_file(svg_path);
  ASSERT_EQ(check_xml(svg), std::nullopt);
  expect_names_every_failing_rank(r.out, svg);
  std::remove(svg_path.c_str());
}

TEST(PictureCli, BucketSizeWorkedExampleDrawsTwoBucketsAtTheSpecsOffsets) {
  // The layout spec's second worked example: three 5000-element params, bucket size 8000, dp 2.
  const std::string svg_path = temp_path("three-5000.svg");
  const std::string model = std::string(SC_SOURCE_DIR) + "/docs/pictures/models/three-5000.json";
  const SimRun r = run_sim("--model-file=" + model +
                           " --pp=1 --vpp=1 --ep=1 --dp=2 --bucket-size=8000 --svg=" + svg_path);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string svg = read_file(svg_path);
  ASSERT_EQ(check_xml(svg), std::nullopt);
  EXPECT_NE(svg.find("2 buckets"), std::string::npos);
  EXPECT_NE(svg.find("bucket 0 [0, 10,112)"), std::string::npos);
  EXPECT_NE(svg.find("bucket 1 [10,112, 15,232)"), std::string::npos);
  EXPECT_NE(svg.find("<title>p2 bf16 (5000,) at [0, 5,000)</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>p1 bf16 (5000,) at [5,056, 10,056)</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>p0 bf16 (5000,) at [10,112, 15,112)</title>"), std::string::npos);
  // Without the option the same params share one bucket.
  const SimRun one = run_sim("--model-file=" + model + " --pp=1 --vpp=1 --ep=1 --dp=2 --svg=" +
                             svg_path);
  ASSERT_EQ(one.status, 0) << one.out;
  EXPECT_NE(read_file(svg_path).find("1 bucket "), std::string::npos);
  std::remove(svg_path.c_str());
}

TEST(PictureCli, UnwritableOutputIsRefusedBeforeTheRun) {
  const SimRun r = run_sim("--layout-only --svg=/nonexistent-dir/seed.svg");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("cannot write /nonexistent-dir/seed.svg"), std::string::npos) << r.out;
  const SimRun h = run_sim("--layout-only --heat --svg=" + temp_path("x.svg"));
  EXPECT_EQ(h.status, 2) << h.out;
  EXPECT_NE(h.out.find("--heat needs tensor mode"), std::string::npos) << h.out;
  const SimRun m = run_sim("--processes=2 --svg=" + temp_path("x.svg"));
  EXPECT_EQ(m.status, 2) << m.out;
  EXPECT_NE(m.out.find("--svg, --html and --heat need the in-process mode"), std::string::npos)
      << m.out;
  const SimRun e = run_sim("--svg=");
  EXPECT_EQ(e.status, 2) << e.out;
  EXPECT_NE(e.out.find("--svg=: expected a file name"), std::string::npos) << e.out;
}

// Renders the seed world's SVG to PNG as a person would view it (rsvg-convert, Debian's
// librsvg2-bin, which scripts/setup installs) and checks the PNG's size and dimensions.
TEST(PictureCli, SeedPictureRendersToPng) {
  if (std::system("command -v rsvg-convert >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "rsvg-convert not found: install librsvg2-bin (scripts/setup does)";
  }
  const std::string svg_path = temp_path("render.svg"), png_path = temp_path("render.png");
  const SimRun r = run_sim("--layout-only --svg=" + svg_path);
  ASSERT_EQ(r.status, 0) << r.out;
  const SimRun render = [&] {
    const std::string cmd = "rsvg-convert -o " + png_path + " " + svg_path + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[512];
    size_t n;
    while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = p ? pclose(p) : -1;
    return SimRun{WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, 0};
  }();
  ASSERT_EQ(render.status, 0) << render.out;
  EXPECT_TRUE(render.out.empty()) << "rsvg-convert complained: " << render.out;
  const std::string png = read_file(png_path);
  ASSERT_GT(png.size(), 24u);
  ASSERT_EQ(png.substr(1, 3), "PNG");
  auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<unsigned char>(png[at])) << 24) |
           (static_cast<uint32_t>(static_cast<unsigned char>(png[at + 1])) << 16) |
           (static_cast<uint32_t>(static_cast<unsigned char>(png[at + 2])) << 8) |
           static_cast<uint32_t>(static_cast<unsigned char>(png[at + 3]));
  };
  EXPECT_EQ(be32(16), 1240u);  // IHDR width: the picture's width
  EXPECT_GT(be32(20), 1000u);  // and a height with eight stages in it
  EXPECT_GT(png.size(), 50u * 1024) << "a near-empty image";
  std::remove(svg_path.c_str());
  std::remove(png_path.c_str());
}

}  // namespace
}  // namespace sc::picture
