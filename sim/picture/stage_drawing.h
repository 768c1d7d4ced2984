// One pipeline stage of a world's picture: its heading, its failures, and each of its buffers as
// a bar with the parameters, keep-fp32 marks, placement and heat strips, bucket and shard edges
// and rank labels. picture.cc draws the page around it; stage_model.h says what a bar holds.
#pragma once

#include "sim/picture/picture_input.h"
#include "sim/picture/svg.h"

namespace sc::picture {

// Stage `st`: its heading and failures outside its buffers, then each buffer; moves `cursor_y`
// below.
void draw_stage(SvgWriter& svg, double& cursor_y, const PictureInput& in, const PictureStage& st);

}  // namespace sc::picture
