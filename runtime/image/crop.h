// Crops and flips of HxWxC (or HxW) images of any dtype, and the box sampling behind
// big_vision's inception_crop (TF's SampleDistortedBoundingBox). Offsets here are 0-based; the
// Lua bindings (bindings/image_crop.cpp) convert to and from Lua's 1-based offsets.
//
// Every function that returns an image returns a new contiguous tensor: a crop never aliases
// its source, so a later in-place op cannot write through to the original, and later ops get
// plain row-major memory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/forward.h"

namespace bv::image {

// A window of an image: rows [y, y + height), columns [x, x + width), 0-based.
struct Box {
  int64_t y = 0, x = 0, height = 0, width = 0;
};

bool operator==(const Box& a, const Box& b);
// "{y=1, x=2, height=3, width=4}", for messages and test output.
std::string box_string(const Box& box);

// The window `box` of `img` (all channels). Fails, naming the box and the image shape, when the
// box is empty or does not lie inside the image.
at::Tensor crop(const at::Tensor& img, const Box& box);

// The centred crop_h x crop_w window of an h x w image: dy = (h - crop_h) // 2, likewise dx, so
// an odd difference leaves the extra row/column at the bottom/right (as big_vision).
Box central_box(int64_t h, int64_t w, int64_t crop_h, int64_t crop_w);
at::Tensor central_crop(const at::Tensor& img, int64_t crop_h, int64_t crop_w);
// The largest centred square, min(H, W) on a side (central_crop without a size).
at::Tensor central_crop(const at::Tensor& img);

// tf.image.random_crop: offsets uniform in [0, h - crop_h] and [0, w - crop_w], both inclusive,
// drawn from `rng` (y first, then x).
Box random_box(int64_t h, int64_t w, int64_t crop_h, int64_t crop_w, Rng& rng);
at::Tensor random_crop(const at::Tensor& img, int64_t crop_h, int64_t crop_w, Rng& rng);

// The arguments of tf.image.sample_distorted_bounding_box as big_vision's inception_crop uses
// them (whole image as the only object box, min_object_covered = 0). Areas are fractions of the
// image area, in (0, 1] as TF demands; the aspect ratio is width / height.
struct InceptionCropParams {
  double area_min = 0.05, area_max = 1.0;
  double ratio_min = 0.75, ratio_max = 1.33;
  int max_attempts = 100;
};

// Samples a crop box for an h x w image exactly as TF's SampleDistortedBoundingBox: per attempt
// an aspect ratio, then a height, then offsets; the whole image when every attempt fails.
// TF's arithmetic is single precision with lrintf (round half to even) and so is this.
Box sample_inception_box(int64_t h, int64_t w, const InceptionCropParams& params, Rng& rng);

// The same algorithm with the random draws supplied by the caller, so a test can trace one
// attempt by hand. draw_ratio(lo, hi) returns a number in [lo, hi); draw_int(lo, hi) an integer
// in [lo, hi], both ends inclusive. The Rng version passes rng.uniform and rng.integer.
using DrawRatio = std::function<double(double lo, double hi)>;
using DrawInt = std::function<int64_t(int64_t lo, int64_t hi)>;
Box sample_inception_box_with(int64_t h, int64_t w, const InceptionCropParams& params,
                              const DrawRatio& draw_ratio, const DrawInt& draw_int);

// Mirror images (left-right: columns reversed; up-down: rows reversed). Deterministic: the coin
// of big_vision's flip_lr op is drawn by the caller. The result is a new contiguous tensor,
// written with a byte loop on CPU (a strided at::flip view would slow every later op).
at::Tensor flip_lr(const at::Tensor& img);
at::Tensor flip_ud(const at::Tensor& img);

}  // namespace bv::image
