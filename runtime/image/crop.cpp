#include "image/crop.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor_util.h"

namespace bv::image {

namespace {

// Crops and flips work on HxW or HxWxC images; anything else is a caller's mistake.
void check_image(const char* op, const at::Tensor& img) {
  BV_CHECK(img.defined(), op, ": the image is an undefined tensor");
  BV_CHECK(img.dim() == 2 || img.dim() == 3, op, ": expected an HxWxC or HxW image, got shape ",
           shape_string(img));
}

void check_size(const char* op, int64_t h, int64_t w, int64_t crop_h, int64_t crop_w) {
  BV_CHECK(crop_h >= 1 && crop_w >= 1, op, ": crop size ", crop_h, "x", crop_w,
           " must be positive");
  BV_CHECK(crop_h <= h && crop_w <= w, op, ": crop size ", crop_h, "x", crop_w,
           " is larger than the ", h, "x", w, " image");
}

// ---------------------------------------------------------------------------------------------
// Inception crop: one attempt of TF's GenerateRandomCrop. All arithmetic is float, with lrintf,
// as in TF, so that rounding at the edges of the ranges matches.

long round_even(float v) { return std::lrint(v); }  // the float overload: lrintf

bool try_inception_crop(int64_t img_w, int64_t img_h, float area_min, float area_max, float ratio,
                        const DrawInt& draw_int, Box* box) {
  if (area_max <= 0.0f || ratio <= 0.0f || area_min > area_max) return false;
  const float min_area = area_min * static_cast<float>(img_w) * static_cast<float>(img_h);
  const float max_area = area_max * static_cast<float>(img_w) * static_cast<float>(img_h);

  int64_t height = round_even(std::sqrt(min_area / ratio));
  int64_t max_height = round_even(std::sqrt(max_area / ratio));
  // The tallest box whose rounded width still fits; TF's epsilon and its extra -1 guard
  // against float rounding are kept so the same heights are reachable.
  if (round_even(static_cast<float>(max_height) * ratio) > img_w) {
    const float eps = 0.0000001f;
    max_height = static_cast<int64_t>((static_cast<double>(img_w) + 0.5 - eps) / ratio);
    if (round_even(static_cast<float>(max_height) * ratio) > img_w) max_height -= 1;
  }
  max_height = std::min(max_height, img_h);
  height = std::min(height, max_height);
  if (height < max_height) height += draw_int(0, max_height - height);

  int64_t width = round_even(static_cast<float>(height) * ratio);
  float area = static_cast<float>(width * height);
  // Rounding can push the area just outside the range: try one row more, then one row less.
  if (area < min_area) {
    height += 1;
    width = round_even(static_cast<float>(height) * ratio);
    area = static_cast<float>(width * height);
  }
  if (area > max_area) {
    height -= 1;
    width = round_even(static_cast<float>(height) * ratio);
    area = static_cast<float>(width * height);
  }
  if (area < min_area || area > max_area || width > img_w || height > img_h || width <= 0 ||
      height <= 0) {
    return false;
  }
  // TF draws offsets in [0, size - extent): exclusive, so a crop shorter than the image never
  // touches its bottom (or right) edge. Kept for parity.
  box->y = height < img_h ? draw_int(0, img_h - height - 1) : 0;
  box->x = width < img_w ? draw_int(0, img_w - width - 1) : 0;
  box->height = height;
  box->width = width;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Flips: byte loops over contiguous memory. A pixel (all channels) is moved as one unit of
// `Bytes` bytes; fixed sizes let the compiler turn memcpy into plain loads and stores.

template <int64_t Bytes>
void reverse_row_pixels(const uint8_t* src, uint8_t* dst, int64_t width, int64_t bytes) {
  const int64_t n = Bytes > 0 ? Bytes : bytes;
  for (int64_t i = 0; i < width; ++i) std::memcpy(dst + (width - 1 - i) * n, src + i * n, n);
}

void reverse_pixels(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t width,
                    int64_t pixel_bytes) {
  const int64_t row_bytes = width * pixel_bytes;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* s = src + r * row_bytes;
    uint8_t* d = dst + r * row_bytes;
    switch (pixel_bytes) {
      case 1: reverse_row_pixels<1>(s, d, width, 1); break;
      case 2: reverse_row_pixels<2>(s, d, width, 2); break;
      case 3: reverse_row_pixels<3>(s, d, width, 3); break;
      case 4: reverse_row_pixels<4>(s, d, width, 4); break;
      case 12: reverse_row_pixels<12>(s, d, width, 12); break;
      default: reverse_row_pixels<0>(s, d, width, pixel_bytes); break;
    }
  }
}

// Bytes of one pixel (all channels) of a contiguous image.
int64_t pixel_bytes(const at::Tensor& img) {
  return (img.dim() == 3 ? img.size(2) : 1) * static_cast<int64_t>(img.element_size());
}

}  // namespace

bool operator==(const Box& a, const Box& b) {
  return a.y == b.y && a.x == b.x && a.height == b.height && a.width == b.width;
}

std::string box_string(const Box& box) {
  return str("{y=", box.y, ", x=", box.x, ", height=", box.height, ", width=", box.width, "}");
}

at::Tensor crop(const at::Tensor& img, const Box& box) {
  check_image("crop", img);
  const int64_t h = img.size(0), w = img.size(1);
  BV_CHECK(box.height >= 1 && box.width >= 1, "crop: box ", box_string(box),
           " is empty (height and width must be positive)");
  BV_CHECK(box.y >= 0 && box.x >= 0 && box.height <= h - box.y && box.width <= w - box.x,
           "crop: box ", box_string(box), " (0-based) does not fit in the image of shape ",
           shape_string(img));
  return img.narrow(0, box.y, box.height)
      .narrow(1, box.x, box.width)
      .clone(at::MemoryFormat::Contiguous);
}

Box central_box(int64_t h, int64_t w, int64_t crop_h, int64_t crop_w) {
  check_size("central_crop", h, w, crop_h, crop_w);
  return Box{(h - crop_h) / 2, (w - crop_w) / 2, crop_h, crop_w};
}

at::Tensor central_crop(const at::Tensor& img, int64_t crop_h, int64_t crop_w) {
  check_image("central_crop", img);
  return crop(img, central_box(img.size(0), img.size(1), crop_h, crop_w));
}

at::Tensor central_crop(const at::Tensor& img) {
  check_image("central_crop", img);
  const int64_t side = std::min(img.size(0), img.size(1));
  return central_crop(img, side, side);
}

Box random_box(int64_t h, int64_t w, int64_t crop_h, int64_t crop_w, Rng& rng) {
  check_size("random_crop", h, w, crop_h, crop_w);
  const int64_t y = rng.integer(0, h - crop_h);
  const int64_t x = rng.integer(0, w - crop_w);
  return Box{y, x, crop_h, crop_w};
}

at::Tensor random_crop(const at::Tensor& img, int64_t crop_h, int64_t crop_w, Rng& rng) {
  check_image("random_crop", img);
  return crop(img, random_box(img.size(0), img.size(1), crop_h, crop_w, rng));
}

Box sample_inception_box_with(int64_t h, int64_t w, const InceptionCropParams& params,
                              const DrawRatio& draw_ratio, const DrawInt& draw_int) {
  const char* op = "sample_inception_box";
  constexpr int64_t kMaxSide = std::numeric_limits<int32_t>::max();
  BV_CHECK(h >= 1 && w >= 1 && h < kMaxSide && w < kMaxSide, op, ": image size ", h, "x", w,
           " must be positive and below 2^31");
  // TF's own argument checks (the op refuses these at construction).
  BV_CHECK(
      params.area_min > 0 && params.area_max > 0 && params.area_min <= 1 && params.area_max <= 1,
      op, ": area range [", params.area_min, ", ", params.area_max,
      "] must lie in (0, 1] (fractions of the image area)");
  BV_CHECK(params.ratio_min > 0 && params.ratio_max > 0, op, ": aspect ratio range [",
           params.ratio_min, ", ", params.ratio_max, "] must be positive");
  BV_CHECK(params.ratio_min <= params.ratio_max, op, ": aspect ratio range [", params.ratio_min,
           ", ", params.ratio_max, "] is reversed");
  BV_CHECK(params.max_attempts >= 1, op, ": max_attempts ", params.max_attempts,
           " must be positive");

  // TF keeps these attributes as float.
  const float area_min = static_cast<float>(params.area_min);
  const float area_max = static_cast<float>(params.area_max);
  const float ratio_min = static_cast<float>(params.ratio_min);
  const float ratio_max = static_cast<float>(params.ratio_max);
  for (int attempt = 0; attempt < params.max_attempts; ++attempt) {
    const float ratio = static_cast<float>(draw_ratio(ratio_min, ratio_max));
    Box box;
    if (try_inception_crop(w, h, area_min, area_max, ratio, draw_int, &box)) return box;
  }
  return Box{0, 0, h, w};  // no attempt satisfied the constraints: the whole image
}

Box sample_inception_box(int64_t h, int64_t w, const InceptionCropParams& params, Rng& rng) {
  return sample_inception_box_with(
      h, w, params, [&rng](double lo, double hi) { return rng.uniform(lo, hi); },
      [&rng](int64_t lo, int64_t hi) { return rng.integer(lo, hi); });
}

at::Tensor flip_lr(const at::Tensor& img) {
  check_image("flip_lr", img);
  if (!img.device().is_cpu()) return at::flip(img, {1}).contiguous();
  const at::Tensor src = img.contiguous();
  at::Tensor out = at::empty(src.sizes(), src.options(), at::MemoryFormat::Contiguous);
  if (src.numel() == 0) return out;
  reverse_pixels(static_cast<const uint8_t*>(src.data_ptr()), static_cast<uint8_t*>(out.data_ptr()),
                 src.size(0), src.size(1), pixel_bytes(src));
  return out;
}

at::Tensor flip_ud(const at::Tensor& img) {
  check_image("flip_ud", img);
  if (!img.device().is_cpu()) return at::flip(img, {0}).contiguous();
  const at::Tensor src = img.contiguous();
  at::Tensor out = at::empty(src.sizes(), src.options(), at::MemoryFormat::Contiguous);
  if (src.numel() == 0) return out;
  const int64_t rows = src.size(0);
  const int64_t row_bytes = src.size(1) * pixel_bytes(src);
  const auto* s = static_cast<const uint8_t*>(src.data_ptr());
  auto* d = static_cast<uint8_t*>(out.data_ptr());
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(d + (rows - 1 - r) * row_bytes, s + r * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace bv::image
