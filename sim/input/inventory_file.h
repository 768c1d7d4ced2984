// Model inventories from JSON files (`shardcheck-sim --model-file=FILE`), so that a model is a
// data file, not code. The schema is documented in models/README.md; in short, a file names the
// model, its decoder layer and routed expert counts, and lists parameters, with
// `for_each_layer` / `for_each_expert` repeating a list per layer or expert (`{layer}` and
// `{expert}` in names) and named `blocks` reused through `use`.
//
// Parsing is total: any text gives either an inventory or one message naming where it went
// wrong ("3:14: ..." for JSON syntax, a JSON path such as "params[3].dtype: ..." otherwise).
// Nothing is read from the file system here except by load_inventory_file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "sim/input/scenario.h"

namespace sc::input {

// Limits that keep a hostile or mistaken file from exhausting memory or time.
inline constexpr int kMaxFileLayers = 100000;
inline constexpr int kMaxFileExperts = 65536;
inline constexpr int64_t kMaxFileParams = 500000;  // after expansion
inline constexpr int64_t kMaxFileDim = int64_t{1} << 40;
inline constexpr int64_t kMaxFileNumel = int64_t{1} << 48;
inline constexpr int kMaxJsonDepth = 64;

// The inventory described by `text` (a model file's contents) with every scalable dimension
// divided by `scale` (>= 1, never below 1), or a message naming the offending line or field.
std::variant<ModelInventory, std::string> parse_inventory_file(std::string_view text,
                                                               int64_t scale);

// Reads `path` and parses it; a message starts with the path ("models/x.json:3:14: ...").
std::variant<ModelInventory, std::string> load_inventory_file(const std::string& path,
                                                              int64_t scale);

// Line and column (both from 1) of the byte at `offset` (from 0) of `text`.
std::pair<int64_t, int64_t> line_column(std::string_view text, size_t offset);

}  // namespace sc::input
