#include "image/draw.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/tensor_util.h"

namespace bv::image {

void draw_line(at::Tensor& img, double x0, double y0, double x1, double y1,
               const std::vector<uint8_t>& color, double thickness) {
  const char* op = "draw_line";
  BV_CHECK(img.defined() && img.scalar_type() == at::kByte && img.dim() == 3 && img.is_cpu() &&
               img.is_contiguous(),
           op, ": expected a contiguous CPU uint8 HxWxC image, got ",
           img.defined() ? dtype_name(img.scalar_type()) + " " + shape_string(img) : "nothing");
  int64_t h = img.size(0), w = img.size(1), c = img.size(2);
  BV_CHECK(static_cast<int64_t>(color.size()) == c, op, ": a colour of ", color.size(),
           " values for an image of ", c, " channels ", shape_string(img));
  BV_CHECK(std::isfinite(x0) && std::isfinite(y0) && std::isfinite(x1) && std::isfinite(y1), op,
           ": coordinates must be finite");
  BV_CHECK(thickness > 0 && std::isfinite(thickness), op, ": thickness must be positive, got ",
           thickness);
  double r = thickness / 2, r2 = r * r;
  // Only the segment's bounding box, widened by r and clipped to the image, can be painted
  // (clipped as doubles first: a far-away coordinate must not overflow the integer cast).
  auto first = [](double v, int64_t n) {
    return static_cast<int64_t>(std::clamp(std::ceil(v), 0.0, static_cast<double>(n)));
  };
  auto last = [](double v, int64_t n) {
    return static_cast<int64_t>(std::clamp(std::floor(v), -1.0, static_cast<double>(n - 1)));
  };
  int64_t cx0 = first(std::min(x0, x1) - r, w), cx1 = last(std::max(x0, x1) + r, w);
  int64_t ry0 = first(std::min(y0, y1) - r, h), ry1 = last(std::max(y0, y1) + r, h);
  double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
  uint8_t* data = img.data_ptr<uint8_t>();
  for (int64_t y = ry0; y <= ry1; ++y) {
    for (int64_t x = cx0; x <= cx1; ++x) {
      // Distance from the pixel centre to the nearest point of the segment.
      double t = len2 > 0 ? std::clamp(((x - x0) * dx + (y - y0) * dy) / len2, 0.0, 1.0) : 0.0;
      double ex = x - (x0 + t * dx), ey = y - (y0 + t * dy);
      if (ex * ex + ey * ey > r2) continue;
      uint8_t* px = data + (y * w + x) * c;
      std::copy(color.begin(), color.end(), px);
    }
  }
}

}  // namespace bv::image
