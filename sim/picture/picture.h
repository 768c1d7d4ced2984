// Pictures of a world: the buffers of every pipeline stage as bars divided into buckets, the
// parameters in layout order coloured by dtype (keep-fp32 ones marked, padding hatched), the DP
// rank boundaries with each rank's shard, which installed tensors the hybrid optimizer offloads
// to the host, the construction outcome of every rank (failing ranks and the parameter that makes
// them fail in red, with the error text), and optionally each owned piece's difference from the
// reference as a heat strip. Drawn from the model's layout, shard plan and offload plan plus the
// main job's per-rank outcomes; no LibTorch. Large buffers aggregate parameters per layer, so a
// full-size world stays small; a small case draws every parameter.
#pragma once

#include <optional>
#include <string>

#include "sim/picture/picture_input.h"

namespace sc::picture {

// The picture as an SVG document.
std::string draw_svg(const PictureInput& in);
// An HTML report: `svg` (draw_svg's document) embedded, then the per-rank table and the
// per-buffer table.
std::string draw_html(const PictureInput& in, const std::string& svg);
// Writes `text` to `path`; empty on success, else a message naming the file and the reason.
std::optional<std::string> write_text_file(const std::string& path, const std::string& text);

}  // namespace sc::picture
