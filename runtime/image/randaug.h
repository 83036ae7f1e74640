// big_vision's RandAugment (pp/archive/randaug.py on top of pp/archive/autoaugment.py), and its
// 16 image ops one by one so that each can be tested alone.
//
// Every function takes a CPU uint8 HxWx3 image (anything else is a bv::Error naming the op, the
// shape and the dtype) and returns a new contiguous uint8 HxWx3 image; the input is never
// modified. The arithmetic follows the TF ops that big_vision calls, quirks included:
//   * float32 throughout, and float -> uint8 casts truncate (blend, autocontrast, grayscale);
//   * Python ints compared with or shifted into uint8 images wrap modulo 256, as TF's conversion
//     of big_vision's Python ints to uint8 does (solarize's threshold 256 at level 10 is 0, so it
//     inverts every pixel: big_vision issue #110);
//   * TF clamps uint8 shift amounts to [0, 7], so posterize with 0 bits keeps the top bit
//     (x & 128) instead of giving zeros;
//   * contrast's "mean" is (H*W)/256 (big_vision issue #109) unless fix_contrast is set.
// Geometric ops are tfa.image.transform with nearest sampling: the output pixel (x, y) reads the
// input at round((a0 x + a1 y + a2), (b0 x + b1 y + b2)) (half away from zero, float32), and
// pixels whose source lies outside the image get `fill` in all three channels.
#pragma once

#include <cstdint>
#include <string>

#include "core/forward.h"

namespace bv::image {

// RandAugment's ops, in the order of big_vision's `available_ops`, so the index drawn for a layer
// means the same op as there.
enum class AugmentOp {
  kAutoContrast,
  kEqualize,
  kInvert,
  kRotate,
  kPosterize,
  kSolarize,
  kColor,
  kContrast,
  kBrightness,
  kSharpness,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kCutout,
  kSolarizeAdd,
};
constexpr int kNumAugmentOps = 16;

// big_vision's name ("AutoContrast", "SolarizeAdd", ...).
std::string augment_op_name(AugmentOp op);
// Accepts big_vision's names and their snake-case forms, in any case ("ShearX", "shear_x",
// "solarize_add"); anything else is a bv::Error listing the 16 names.
AugmentOp augment_op_from_name(const std::string& name);

// --- the ops --------------------------------------------------------------------------------

// blend(a, b, f): f == 0 -> a, f == 1 -> b, else a + f * (b - a) in float32, truncated to uint8
// when 0 < f < 1 (interpolation) and clipped to [0, 255] first otherwise (extrapolation).
at::Tensor blend(const at::Tensor& a, const at::Tensor& b, double factor);

// Per channel: when max > min, x -> (x - min) * 255 / (max - min) (float32, truncated).
at::Tensor autocontrast(const at::Tensor& img);
// PIL's equalize per channel (see the .cpp for the lookup table).
at::Tensor equalize(const at::Tensor& img);
at::Tensor invert(const at::Tensor& img);  // 255 - x
// (x >> s) << s with s = 8 - bits converted to uint8 and clamped to [0, 7] as TF does.
at::Tensor posterize(const at::Tensor& img, int64_t bits);
// x < threshold ? x : 255 - x, threshold taken modulo 256.
at::Tensor solarize(const at::Tensor& img, int64_t threshold);
// x < threshold ? clip(x + addition, 0, 255) : x, threshold taken modulo 256.
at::Tensor solarize_add(const at::Tensor& img, int64_t addition, int64_t threshold = 128);

// tf.image.rgb_to_grayscale repeated over the 3 channels: trunc(255.5 * (0.2989 r + 0.587 g +
// 0.114 b) / 255) in float32.
at::Tensor grayscale(const at::Tensor& img);
at::Tensor color(const at::Tensor& img, double factor);  // blend(grayscale(img), img, f)
// blend(constant image, img, f). The constant is trunc(clip((H*W)/256, 0, 255)), big_vision's bug;
// with fix = true it is the truncated mean of grayscale(img), what the authors meant.
at::Tensor contrast(const at::Tensor& img, double factor, bool fix = false);
at::Tensor brightness(const at::Tensor& img, double factor);  // blend(zeros, img, f)
// blend(smoothed, img, f): smoothed = [[1,1,1],[1,5,1],[1,1,1]]/13 on the interior (float32,
// truncated), the original on the one-pixel border.
at::Tensor sharpness(const at::Tensor& img, double factor);

// tfa.image.rotate by `degrees` counterclockwise about the image centre.
at::Tensor rotate(const at::Tensor& img, double degrees, int64_t fill = 128);
// Output (x, y) reads input (x + level * y, y) / (x, y + level * x).
at::Tensor shear_x(const at::Tensor& img, double level, int64_t fill = 128);
at::Tensor shear_y(const at::Tensor& img, double level, int64_t fill = 128);
// Output (x, y) reads input (x + pixels, y) / (x, y + pixels): positive pixels move the content
// left / up (big_vision passes -pixels to tfa's translate).
at::Tensor translate_x(const at::Tensor& img, double pixels, int64_t fill = 128);
at::Tensor translate_y(const at::Tensor& img, double pixels, int64_t fill = 128);
// Rows [cy - pad, cy + pad) and columns [cx - pad, cx + pad), clipped to the image, set to fill.
// The centre must lie in the image; pad >= 0 (0 changes nothing).
at::Tensor cutout(const at::Tensor& img, int64_t pad, int64_t cy, int64_t cx, int64_t fill = 128);

// --- RandAugment ----------------------------------------------------------------------------

// One op at level `level` (big_vision's M, 0..10 the nominal range) with big_vision's
// level -> argument mapping (MAX_LEVEL 10, cutout_const 40, translate_const 100, fill 128).
// Rotate, ShearX/Y and TranslateX/Y negate their argument when rng.uniform() < 0.5; Cutout
// draws its centre row then column with rng.integer. `rng` may be null only for the ops that
// draw nothing (a bv::Error otherwise).
at::Tensor augment(const at::Tensor& img, AugmentOp op, double level, Rng* rng,
                   bool fix_contrast = false);

// randaug(num_layers, magnitude): per layer one op drawn uniformly (rng.integer(0, 15)) and
// always applied (big_vision's per-op probability is drawn but never used). num_layers >= 0,
// magnitude finite and >= 0.
at::Tensor randaug(const at::Tensor& img, int num_layers, double magnitude, Rng& rng,
                   bool fix_contrast = false);

}  // namespace bv::image
