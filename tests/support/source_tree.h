// The project's own sources as text, for the tests that read the tree (the layering check, the
// size limits): listing them, copying them to plant a violation, and joining findings.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace sc::testing {

namespace fs = std::filesystem;

inline bool is_source(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".h" || ext == ".cc" || ext == ".cu" || ext == ".cuh";
}

// The project's C++ sources under `root`, relative, in the top folders the layers live in.
inline std::vector<std::string> sources(const fs::path& root) {
  std::vector<std::string> out;
  for (const char* top : {"model", "sim", "properties", "tests", "bench", "fuzz"}) {
    if (!fs::exists(root / top)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      if (entry.is_regular_file() && is_source(entry.path())) {
        out.push_back(fs::relative(entry.path(), root).generic_string());
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A copy of the tree's C++ sources under a fresh temporary folder.
inline fs::path copy_of_tree(const std::string& name) {
  const fs::path copy = fs::temp_directory_path() / ("sc_layering_" + name);
  fs::remove_all(copy);
  for (const std::string& rel : sources(SC_SOURCE_DIR)) {
    fs::create_directories((copy / rel).parent_path());
    fs::copy_file(fs::path(SC_SOURCE_DIR) / rel, copy / rel);
  }
  return copy;
}

inline void append_line(const fs::path& file, const std::string& line) {
  std::ofstream(file, std::ios::app) << line << "\n";
}

inline std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

}  // namespace sc::testing
