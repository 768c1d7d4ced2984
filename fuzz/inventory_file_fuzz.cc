// Fuzz target: model files (shardcheck-sim --model-file). Any text must give an inventory or a
// message, never a crash, a hang or a sanitizer report; an inventory must respect the file limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "sim/input/inventory_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  {
    const int64_t scale = size % 2 ? 64 : 1;  // full size and the tensor mode's default
    auto parsed = sc::input::parse_inventory_file(text, scale);
    if (auto* model = std::get_if<sc::input::ModelInventory>(&parsed)) {
      if (static_cast<int64_t>(model->params.size()) > sc::input::kMaxFileParams) std::abort();
      for (const auto& p : model->params) {
        for (int64_t d : p.spec.shape) {
          if (d < 1 || d > sc::input::kMaxFileDim) std::abort();
        }
      }
    } else if (std::get<std::string>(parsed).empty()) {
      std::abort();  // a refusal always says why
    }
  }
  return 0;
}
