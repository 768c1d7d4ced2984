// The layering check: every `#include "..."` of the project's C++ sources, read as text, must
// point down the layer order of docs/architecture.md (or stay inside its own layer), and no
// units (a header with its source file) may include each other in a circle. The last tests
// plant a back-include and a circle in a copy of the tree and show that the check fails on them.
// No file of sim/ or properties/ may pass 700 lines; a planted long file shows that check failing.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/source_tree.h"

namespace {

namespace fs = std::filesystem;
using sc::testing::append_line;
using sc::testing::copy_of_tree;
using sc::testing::joined;
using sc::testing::sources;

// A layer: a folder of the tree and the layers it may include directly (lower ones).
struct Layer {
  std::string folder;
  std::vector<std::string> below;
};

// The layer order, lowest first. A layer may include the layers it names, and what they may.
const std::vector<Layer>& layers() {
  static const std::vector<Layer> kLayers = {
      {"model", {}},
      {"sim/port", {}},
      {"sim/engines", {"sim/port"}},
      {"sim/input", {"model"}},
      {"sim/picture", {"model"}},
      {"sim/rig", {"model", "sim/port", "sim/engines"}},
      {"sim/app", {"sim/rig", "sim/input", "sim/picture"}},
      {"properties", {"sim/rig", "sim/input", "sim/picture"}},
      {"tests", {"properties", "sim/app"}},
      {"bench", {"properties", "sim/app"}},
      {"fuzz", {"properties", "sim/app"}},
  };
  return kLayers;
}

// Headers only some layers may include: the port's implementation of the system-under-test seam
// is reached through the seam (sim/rig/rank_under_test.h) everywhere else.
struct Private {
  std::string header;
  std::vector<std::string> layers;
};

const std::vector<Private>& private_headers() {
  static const std::vector<Private> kPrivate = {
      {"sim/rig/rank_rig.h", {"sim/rig", "sim/app", "tests", "bench"}},
  };
  return kPrivate;
}

// The layer of the file at `rel` (a path relative to the root), or "" when it is in none.
std::string layer_of(const std::string& rel) {
  std::string best;
  for (const Layer& layer : layers()) {
    const std::string prefix = layer.folder + "/";
    if (rel.compare(0, prefix.size(), prefix) == 0 && layer.folder.size() > best.size()) {
      best = layer.folder;
    }
  }
  return best;
}

// Every layer `folder` may include: itself and, transitively, the layers below it.
std::set<std::string> reachable(const std::string& folder) {
  std::set<std::string> out{folder};
  std::vector<std::string> todo{folder};
  while (!todo.empty()) {
    const std::string at = todo.back();
    todo.pop_back();
    for (const Layer& layer : layers()) {
      if (layer.folder != at) continue;
      for (const std::string& lower : layer.below) {
        if (out.insert(lower).second) todo.push_back(lower);
      }
    }
  }
  return out;
}

// The project files `rel` includes: each quoted include resolved against the root, then against
// the including file's folder; system headers and generated ones resolve to nothing.
std::vector<std::string> includes_of(const fs::path& root, const std::string& rel) {
  static const std::regex kInclude(R"re(^\s*#\s*include\s+"([^"]+)")re");
  std::vector<std::string> out;
  std::ifstream in(root / rel);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, kInclude)) continue;
    const std::string target = m[1].str();
    if (fs::exists(root / target)) {
      out.push_back(fs::path(target).lexically_normal().generic_string());
    } else if (fs::exists(root / fs::path(rel).parent_path() / target)) {
      out.push_back((fs::path(rel).parent_path() / target).lexically_normal().generic_string());
    }
  }
  return out;
}

// A unit: a header and its source file, named by the path without its extension.
std::string unit_of(const std::string& rel) { return fs::path(rel).replace_extension().string(); }

// One message per include that runs up or across the layer order, or from a file in no layer.
std::vector<std::string> upward_includes(
    const std::map<std::string, std::vector<std::string>>& graph) {
  std::vector<std::string> out;
  for (const auto& [file, targets] : graph) {
    const std::string from = layer_of(file);
    if (from.empty()) {
      out.push_back(file + " is in no layer: add its folder to the layer order");
      continue;
    }
    const std::set<std::string> allowed = reachable(from);
    for (const std::string& target : targets) {
      const std::string to = layer_of(target);
      if (!allowed.count(to)) {
        out.push_back(file + " (layer " + from + ") includes " + target + " (layer " +
                      (to.empty() ? "none" : to) + "), which is not below it");
      }
      for (const Private& p : private_headers()) {
        if (target == p.header &&
            std::find(p.layers.begin(), p.layers.end(), from) == p.layers.end()) {
          out.push_back(file + " (layer " + from + ") includes " + target +
                        ", which only its own layers may: use the seam");
        }
      }
    }
  }
  return out;
}

// One message per circle of units that include each other (the first found from each unit).
std::vector<std::string> unit_cycles(const std::map<std::string, std::vector<std::string>>& graph) {
  std::map<std::string, std::set<std::string>> edges;
  for (const auto& [file, targets] : graph) {
    for (const std::string& target : targets) {
      if (unit_of(target) != unit_of(file)) edges[unit_of(file)].insert(unit_of(target));
    }
  }
  std::vector<std::string> out;
  std::map<std::string, int> state;  // 0 unseen, 1 on the path, 2 done
  std::vector<std::string> path;
  std::function<void(const std::string&)> visit = [&](const std::string& unit) {
    state[unit] = 1;
    path.push_back(unit);
    for (const std::string& next : edges[unit]) {
      if (state[next] == 1) {
        std::string circle;
        auto it = std::find(path.begin(), path.end(), next);
        for (; it != path.end(); ++it) circle += *it + " -> ";
        out.push_back("units include each other: " + circle + next);
      } else if (state[next] == 0) {
        visit(next);
      }
    }
    path.pop_back();
    state[unit] = 2;
  };
  for (const auto& [unit, targets] : edges) {
    if (state[unit] == 0) visit(unit);
  }
  return out;
}

// Every layering violation under `root`: upward includes, then circles.
std::vector<std::string> check_layers(const fs::path& root) {
  std::map<std::string, std::vector<std::string>> graph;
  for (const std::string& rel : sources(root)) graph[rel] = includes_of(root, rel);
  std::vector<std::string> out = upward_includes(graph);
  for (std::string& cycle : unit_cycles(graph)) out.push_back(std::move(cycle));
  return out;
}

TEST(Layering, TheTreeFollowsTheLayerOrder) {
  ASSERT_GT(sources(SC_SOURCE_DIR).size(), 100u) << "the sources were not found";
  const std::vector<std::string> violations = check_layers(SC_SOURCE_DIR);
  EXPECT_TRUE(violations.empty()) << joined(violations);
}

TEST(Layering, APlantedBackIncludeFails) {
  const fs::path copy = copy_of_tree("back_include");
  ASSERT_TRUE(check_layers(copy).empty());
  // The port reaching up into the application.
  append_line(copy / "sim/port/behaviour.h", "#include \"sim/app/cli.h\"");
  const std::vector<std::string> violations = check_layers(copy);
  ASSERT_FALSE(violations.empty());
  EXPECT_EQ(violations[0],
            "sim/port/behaviour.h (layer sim/port) includes sim/app/cli.h (layer sim/app), which "
            "is not below it");
  // The app reaches the port again, so the back-include also closes circles through it.
  for (size_t i = 1; i < violations.size(); ++i) {
    EXPECT_EQ(violations[i].rfind("units include each other: ", 0), 0u) << violations[i];
    EXPECT_NE(violations[i].find("sim/port/behaviour -> sim/app/cli"), std::string::npos)
        << violations[i];
  }
  fs::remove_all(copy);
}

TEST(Layering, AnIncludeAcrossSiblingLayersFails) {
  const fs::path copy = copy_of_tree("sibling");
  // The picture code and the parsers are siblings above the model: neither may use the other.
  append_line(copy / "sim/picture/svg.h", "#include \"sim/input/scenario.h\"");
  const std::vector<std::string> violations = check_layers(copy);
  ASSERT_EQ(violations.size(), 1u) << joined(violations);
  EXPECT_NE(violations[0].find("sim/picture/svg.h (layer sim/picture) includes"),
            std::string::npos);
  fs::remove_all(copy);
}

TEST(Layering, APlantedCircleOfUnitsFails) {
  const fs::path copy = copy_of_tree("circle");
  // Two units of one layer that include each other, as a header and a source file would.
  // multiprocess.cc includes launcher.h; the launcher now includes the multi-process mode back.
  append_line(copy / "sim/app/launcher.cc", "#include \"sim/app/multiprocess.h\"");
  const std::vector<std::string> violations = check_layers(copy);
  ASSERT_EQ(violations.size(), 1u) << joined(violations);
  EXPECT_NE(violations[0].find("units include each other"), std::string::npos);
  EXPECT_NE(violations[0].find("sim/app/launcher"), std::string::npos);
  EXPECT_NE(violations[0].find("sim/app/multiprocess"), std::string::npos);
  fs::remove_all(copy);
}

TEST(Layering, APropertyReachingPastTheSeamFails) {
  const fs::path copy = copy_of_tree("past_seam");
  append_line(copy / "properties/diff_props.cc", "#include \"sim/rig/rank_rig.h\"");
  const std::vector<std::string> violations = check_layers(copy);
  ASSERT_EQ(violations.size(), 1u) << joined(violations);
  EXPECT_EQ(violations[0],
            "properties/diff_props.cc (layer properties) includes sim/rig/rank_rig.h, which only "
            "its own layers may: use the seam");
  fs::remove_all(copy);
}

// Files of sim/ and properties/ (C++ and the worker's Python) longer than kMaxLines: a file that
// long holds more than one thing, and is split where its parts meet (docs/architecture.md).
constexpr int kMaxLines = 700;

std::vector<std::string> long_files(const fs::path& root) {
  std::vector<std::string> out;
  std::vector<std::string> files = sources(root);
  for (const auto& entry : fs::recursive_directory_iterator(root / "sim")) {
    if (entry.is_regular_file() && entry.path().extension() == ".py") {
      files.push_back(fs::relative(entry.path(), root).generic_string());
    }
  }
  for (const std::string& rel : files) {
    if (rel.rfind("sim/", 0) != 0 && rel.rfind("properties/", 0) != 0) continue;
    std::ifstream in(root / rel);
    int lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    if (lines > kMaxLines) {
      out.push_back(rel + " has " + std::to_string(lines) + " lines, over " +
                    std::to_string(kMaxLines) + ": split it where its parts meet");
    }
  }
  return out;
}

TEST(Layering, NoFileOfSimOrPropertiesIsOverTheLimit) {
  const std::vector<std::string> over = long_files(SC_SOURCE_DIR);
  EXPECT_TRUE(over.empty()) << joined(over);
}

TEST(Layering, AFileGrownPastTheLimitFails) {
  const fs::path copy = copy_of_tree("long_file");
  ASSERT_TRUE(long_files(copy).empty());
  fs::create_directories(copy / "sim/megatron");  // the copy holds the C++ sources only
  for (int i = 0; i <= kMaxLines; ++i) {
    append_line(copy / "sim/app/cli.cc", "// filler");
    append_line(copy / "sim/megatron/worker.py", "# filler");
  }
  const std::vector<std::string> over = long_files(copy);
  ASSERT_EQ(over.size(), 2u) << joined(over);
  EXPECT_EQ(over[0].rfind("sim/app/cli.cc has ", 0), 0u) << over[0];
  EXPECT_EQ(over[1].rfind("sim/megatron/worker.py has ", 0), 0u) << over[1];
  fs::remove_all(copy);
}

TEST(Layering, AFileOutsideEveryLayerFails) {
  const fs::path copy = copy_of_tree("outside");
  fs::create_directories(copy / "sim/extra");
  std::ofstream(copy / "sim/extra/new.h") << "#pragma once\n";
  const std::vector<std::string> violations = check_layers(copy);
  ASSERT_EQ(violations.size(), 1u) << joined(violations);
  EXPECT_EQ(violations[0], "sim/extra/new.h is in no layer: add its folder to the layer order");
  fs::remove_all(copy);
}

}  // namespace
