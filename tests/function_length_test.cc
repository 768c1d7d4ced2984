// No function of sim/ or properties/ may pass 70 lines, apart from the port's mirrors of
// Megatron's and Transformer Engine's functions, which keep the shape of the function they
// mirror so that the two can be read side by side (docs/architecture.md). The C++ is read as
// text: comments, strings and preprocessor lines are blanked, then each brace is classed by what
// precedes it (a function body follows `)` or a qualifier; a namespace, class or enum body its
// keyword; anything else is an initializer). The worker's Python is measured by indentation.
// Planted long functions, C++ and Python, show the check failing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/source_tree.h"

namespace {

namespace fs = std::filesystem;
using sc::testing::append_line;
using sc::testing::copy_of_tree;
using sc::testing::joined;

constexpr int kMaxFunctionLines = 70;

// The port's mirrors: each is one Megatron or Transformer Engine function, ported statement by
// statement (file, then the function's name as the check prints it).
const std::set<std::string>& mirrors() {
  static const std::set<std::string> kMirrors = {
      "sim/port/distrib_optimizer.cc DistributedOptimizer::DistributedOptimizer",  // __init__
      "sim/port/distrib_optimizer_state.cc DistributedOptimizer::load_state_dict",
      "sim/port/fused_adam.cc FusedAdam::step",  // TE's FusedAdam.step
      "sim/port/hybrid_optimizer.cc HybridDeviceOptimizer::init_sub_optimizers",  // _init_...
      "sim/port/hybrid_optimizer.cc HybridDeviceOptimizer::step",
  };
  return kMirrors;
}

// `text` with comments, string and character literals and preprocessor lines replaced by spaces
// (line breaks kept, so line numbers hold).
std::string blanked(const std::string& text) {
  std::string out = text;
  size_t i = 0;
  const auto blank_to = [&](size_t end) {
    for (; i < end && i < out.size(); ++i) {
      if (out[i] != '\n') out[i] = ' ';
    }
  };
  while (i < out.size()) {
    const bool line_start = i == 0 || out[i - 1] == '\n';
    if (line_start && out.find_first_not_of(" \t", i) == out.find('#', i)) {
      size_t end = i;
      do {  // a directive and its continuation lines
        end = out.find('\n', end + 1);
      } while (end != std::string::npos && end > 0 && out[end - 1] == '\\');
      blank_to(end == std::string::npos ? out.size() : end);
    } else if (out.compare(i, 2, "//") == 0) {
      blank_to(out.find('\n', i));
    } else if (out.compare(i, 2, "/*") == 0) {
      blank_to(out.find("*/", i) + 2);
    } else if (out.compare(i, 2, "R\"") == 0 && (i == 0 || !std::isalnum(out[i - 1]))) {
      const size_t open = out.find('(', i);
      const std::string close = ")" + out.substr(i + 2, open - i - 2) + "\"";
      blank_to(out.find(close, open) + close.size());
    } else if (out[i] == '"' || (out[i] == '\'' && (i == 0 || !std::isxdigit(out[i - 1])))) {
      const char quote = out[i];
      size_t end = i + 1;
      while (end < out.size() && out[end] != quote) end += out[end] == '\\' ? 2 : 1;
      blank_to(end + 1);
    } else {
      ++i;
    }
  }
  return out;
}

enum class Brace { kFunction, kScope, kInitializer };

// What a `{` opens, from the text since the last statement or body (`head`, trimmed).
Brace classify(const std::string& head) {
  static const std::regex kScope(
      R"(^(template\s*<.*>\s*)?(namespace|struct|class|union|enum|extern)\b)");
  static const std::regex kQualified(
      R"((\)|\bconst|\bnoexcept|\boverride|\bfinal|\bmutable|->\s*[\w:<>,\s\*&]+)$)");
  if (std::regex_search(head, kScope)) return Brace::kScope;
  if (head.find('(') != std::string::npos && std::regex_search(head, kQualified)) {
    return Brace::kFunction;
  }
  return Brace::kInitializer;
}

// The function's name in its head: the qualified identifier before its first parenthesis.
std::string function_name(const std::string& head) {
  static const std::regex kName(R"(([~\w:]+)\s*\()");
  std::smatch m;
  return std::regex_search(head, m, kName) ? m[1].str() : head;
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\n") - b + 1);
}

struct Open {
  Brace kind;
  int line;
  std::string name;
};

struct LongFunction {
  std::string file;
  int line;
  std::string name;
  int lines;

  std::string key() const { return file + " " + name; }
  std::string text() const {
    return file + ":" + std::to_string(line) + " " + name + " has " + std::to_string(lines) +
           " lines";
  }
};

// Each C++ function body of `rel` over the limit.
std::vector<LongFunction> long_cpp_functions(const fs::path& root, const std::string& rel) {
  std::ifstream in(root / rel);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = blanked(buffer.str());
  std::vector<LongFunction> out;
  std::vector<Open> open;  // the braces open at this point, outermost first
  std::string head;
  int line = 1;
  for (const char c : text) {
    const bool in_function = !open.empty() && open.back().kind != Brace::kScope;
    if (c == '\n') ++line;
    if (c == '{' && !in_function) {
      const std::string h = trimmed(head);
      const Brace kind = classify(h);
      open.push_back({kind, line, kind == Brace::kFunction ? function_name(h) : ""});
      if (kind != Brace::kInitializer) head.clear();
    } else if (c == '{') {
      open.push_back({Brace::kInitializer, line, ""});
    } else if (c == '}' && !open.empty()) {
      const Open o = open.back();
      open.pop_back();
      const int lines = line - o.line + 1;
      if (o.kind == Brace::kFunction && lines > kMaxFunctionLines) {
        out.push_back({rel, o.line, o.name, lines});
      }
      if (o.kind != Brace::kInitializer) head.clear();
    } else if (c == ';' && !in_function) {
      head.clear();
    } else if (!in_function) {
      head += c;
    }
  }
  return out;
}

int indent_of(const std::string& line) { return static_cast<int>(line.find_first_not_of(' ')); }

// The same for each `def` of a Python file: from its line to its last indented line.
std::vector<LongFunction> long_python_functions(const fs::path& root, const std::string& rel) {
  std::vector<std::string> lines;
  std::ifstream in(root / rel);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  static const std::regex kDef(R"(^(\s*)(async\s+)?def\s+(\w+))");
  std::vector<LongFunction> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    if (!std::regex_search(lines[i], m, kDef)) continue;
    const int indent = static_cast<int>(m[1].length());
    size_t last = i;
    for (size_t j = i + 1; j < lines.size(); ++j) {
      const std::string t = trimmed(lines[j]);
      if (t.empty()) continue;
      if (indent_of(lines[j]) <= indent && t[0] != ')' && t[0] != ']') break;
      last = j;
    }
    const int n = static_cast<int>(last - i + 1);
    if (n > kMaxFunctionLines) out.push_back({rel, static_cast<int>(i + 1), m[3].str(), n});
  }
  return out;
}

// Every function of sim/ and properties/ over the limit, the mirrors included.
std::vector<LongFunction> every_long_function(const fs::path& root) {
  std::vector<LongFunction> out;
  for (const char* top : {"sim", "properties"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      if (!entry.is_regular_file()) continue;
      const std::string rel = fs::relative(entry.path(), root).generic_string();
      std::vector<LongFunction> found;
      if (sc::testing::is_source(entry.path())) found = long_cpp_functions(root, rel);
      if (entry.path().extension() == ".py") found = long_python_functions(root, rel);
      out.insert(out.end(), found.begin(), found.end());
    }
  }
  return out;
}

// The functions over the limit that are not mirrors, as "FILE:LINE NAME has N lines".
std::vector<std::string> long_functions(const fs::path& root) {
  std::vector<std::string> out;
  for (const LongFunction& f : every_long_function(root)) {
    if (mirrors().count(f.key()) == 0) out.push_back(f.text());
  }
  return out;
}

TEST(FunctionLength, NoFunctionOfSimOrPropertiesIsOverTheLimit) {
  const std::vector<std::string> over = long_functions(SC_SOURCE_DIR);
  EXPECT_TRUE(over.empty()) << joined(over) << "split each where its steps meet";
}

// Every mirror the list exempts is still a long function of its file: a mirror that was split or
// renamed leaves the list, so the exemption cannot outlive its reason.
TEST(FunctionLength, EveryExemptMirrorIsStillLong) {
  std::set<std::string> long_ones;
  for (const LongFunction& f : every_long_function(SC_SOURCE_DIR)) long_ones.insert(f.key());
  for (const std::string& mirror : mirrors()) {
    EXPECT_EQ(long_ones.count(mirror), 1u) << mirror << " is no longer over the limit: drop it";
  }
}

std::string planted_function(const std::string& name, int body_lines) {
  std::string out = "int " + name + "(int x) {\n";
  for (int i = 0; i < body_lines; ++i) out += "  x += " + std::to_string(i) + ";  // {\n";
  return out + "  return x;\n}";
}

TEST(FunctionLength, APlantedLongFunctionFails) {
  const fs::path copy = copy_of_tree("long_function");
  fs::create_directories(copy / "sim/megatron");  // the copy holds the C++ sources only
  ASSERT_TRUE(long_functions(copy).empty()) << joined(long_functions(copy));
  // Exactly at the limit passes; one line more fails, in a namespace, a class or a lambda.
  append_line(copy / "sim/app/cli.cc",
              "namespace sc::app {\n" + planted_function("at_limit", kMaxFunctionLines - 3) + "\n" +
                  planted_function("over", kMaxFunctionLines - 2) + "\n}  // namespace sc::app");
  append_line(copy / "properties/run.cc",
              "struct Planted {\n  " + planted_function("member", kMaxFunctionLines) + "\n};");
  std::string py = "def long_one(x):\n";
  for (int i = 0; i < kMaxFunctionLines; ++i) py += "    x += 1\n\n";
  append_line(copy / "sim/megatron/worker.py", py + "def short_one():\n    return 1");
  const std::vector<std::string> over = long_functions(copy);
  ASSERT_EQ(over.size(), 3u) << joined(over);
  const std::string all = joined(over);
  EXPECT_NE(all.find(" over has 71 lines"), std::string::npos) << all;
  EXPECT_NE(all.find(" member has 73 lines"), std::string::npos) << all;
  EXPECT_NE(all.find("sim/megatron/worker.py:1 long_one has 140 lines"), std::string::npos) << all;
  EXPECT_EQ(all.find("at_limit"), std::string::npos) << all;
  fs::remove_all(copy);
}

TEST(FunctionLength, CommentsStringsAndInitializersAreNotBodies) {
  const fs::path copy = copy_of_tree("not_bodies");
  const std::string planted =
      "const char* kText = \"{ not a brace\";  // nor this {\n"
      "/* { */ const int kTable[] = {\n" +
      std::string(200, '\n') + "1};\n" + planted_function("short_one", 5);
  append_line(copy / "sim/app/cli.cc", planted);
  EXPECT_TRUE(long_functions(copy).empty()) << joined(long_functions(copy));
  fs::remove_all(copy);
}

}  // namespace
