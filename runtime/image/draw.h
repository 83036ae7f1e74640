// Drawing on uint8 images, for generated data sets (scripts/make_lines.lua). Coordinates are
// 0-based pixel centres: (x, y) = (column, row), as in image files; the Lua binding converts
// from Lua's 1-based ones.
#pragma once

#include <cstdint>
#include <vector>

#include "core/forward.h"

namespace bv::image {

// Paints, in place, every pixel whose centre lies within thickness / 2 of the segment from
// (x0, y0) to (x1, y1) with `color` (one value per channel). Round ends, so the segments of a
// polyline join without gaps; parts outside the image are clipped. `img` must be a contiguous
// CPU uint8 HxWxC tensor with C == color.size().
void draw_line(at::Tensor& img, double x0, double y0, double x1, double y1,
               const std::vector<uint8_t>& color, double thickness);

}  // namespace bv::image
