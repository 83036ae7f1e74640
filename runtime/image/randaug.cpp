#include "image/randaug.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor_util.h"

// The float32 arithmetic below mirrors TF's kernels operation by operation (products and sums
// rounded one at a time). A fused multiply-add would round differently and move truncations by
// one, so the compiler must not contract a * b + c on targets that have FMA.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace bv::image {

namespace {

constexpr double kMaxLevel = 10.0;     // big_vision's _MAX_LEVEL
constexpr double kCutoutConst = 40.0;  // randaug's HParams
constexpr double kTranslateConst = 100.0;
constexpr int64_t kReplace = 128;  // randaug's replace_value, per channel

using Lut = std::array<uint8_t, 256>;

std::string describe(const at::Tensor& img) {
  return str(shape_string(img), " ", dtype_name(img.scalar_type()));
}

// The one input these ops take: a non-empty CPU uint8 HxWx3 image, returned contiguous.
at::Tensor checked_rgb(const char* op, const at::Tensor& img) {
  BV_CHECK(img.defined(), op, ": expected a uint8 HxWx3 image, got an undefined tensor");
  BV_CHECK(img.dim() == 3 && img.size(2) == 3 && img.scalar_type() == at::kByte, op,
           ": expected a uint8 HxWx3 image, got ", describe(img));
  BV_CHECK(img.device().is_cpu(), op, ": expected a CPU image, got one on ", img.device().str());
  BV_CHECK(img.size(0) > 0 && img.size(1) > 0, op, ": the image ", describe(img), " is empty");
  return img.contiguous();
}

at::Tensor empty_like_rgb(const at::Tensor& img) {
  return at::empty({img.size(0), img.size(1), 3}, at::kByte);
}

// A copy with a plain memcpy: ATen's clone and fill go through its parallel machinery, whose
// start-up costs more than copying a 224x224 image.
at::Tensor copy_of(const at::Tensor& img) {
  at::Tensor out = empty_like_rgb(img);
  std::memcpy(out.data_ptr<uint8_t>(), img.data_ptr<uint8_t>(), img.numel());
  return out;
}

uint8_t checked_fill(const char* op, int64_t fill) {
  BV_CHECK(fill >= 0 && fill <= 255, op, ": fill value ", fill, " is not in [0, 255]");
  return static_cast<uint8_t>(fill);
}

// A Python int converted to a uint8 tensor by TF: wraps modulo 256 (big_vision issue #110).
uint8_t wrap_u8(int64_t v) { return static_cast<uint8_t>(((v % 256) + 256) % 256); }

// float32 -> uint8 as tf.cast after a clip: truncation toward zero. The clip also keeps the
// conversion defined where TF's own inputs would already be in range.
uint8_t clip_trunc(float v) {
  if (!(v > 0.0f)) return 0;  // also NaN
  if (v >= 255.0f) return 255;
  return static_cast<uint8_t>(v);
}

// Applies one lookup table per channel.
at::Tensor apply_luts(const at::Tensor& img, const std::array<Lut, 3>& luts) {
  at::Tensor out = empty_like_rgb(img);
  const uint8_t* in = img.data_ptr<uint8_t>();
  uint8_t* o = out.data_ptr<uint8_t>();
  const int64_t n = img.size(0) * img.size(1);
  for (int64_t i = 0; i < n; ++i) {
    o[3 * i + 0] = luts[0][in[3 * i + 0]];
    o[3 * i + 1] = luts[1][in[3 * i + 1]];
    o[3 * i + 2] = luts[2][in[3 * i + 2]];
  }
  return out;
}

// The same table for all channels.
at::Tensor apply_lut(const at::Tensor& img, const Lut& lut) {
  return apply_luts(img, {lut, lut, lut});
}

// Per-channel histograms of a contiguous HxWx3 uint8 image.
std::array<std::array<int64_t, 256>, 3> histograms(const at::Tensor& img) {
  std::array<std::array<int64_t, 256>, 3> hist{};
  const uint8_t* in = img.data_ptr<uint8_t>();
  const int64_t n = img.size(0) * img.size(1);
  for (int64_t i = 0; i < n; ++i) {
    ++hist[0][in[3 * i + 0]];
    ++hist[1][in[3 * i + 1]];
    ++hist[2][in[3 * i + 2]];
  }
  return hist;
}

// blend on raw bytes: a + f * (b - a) in float32 (TF converts big_vision's Python float factor
// to float32 before multiplying). Interpolation truncates; extrapolation clips then truncates.
void blend_bytes(const uint8_t* a, const uint8_t* b, uint8_t* out, int64_t n, double factor) {
  if (factor == 0.0) {
    std::memcpy(out, a, n);
    return;
  }
  if (factor == 1.0) {
    std::memcpy(out, b, n);
    return;
  }
  const float f = static_cast<float>(factor);
  // The result depends only on the pair (a, b); no need for a table, the loop is cheap.
  for (int64_t i = 0; i < n; ++i) {
    const float fa = static_cast<float>(a[i]);
    const float scaled = f * (static_cast<float>(b[i]) - fa);
    out[i] = clip_trunc(fa + scaled);
  }
}

// Blends the constant image `value` with img (value is image1, img is image2).
at::Tensor blend_constant(uint8_t value, const at::Tensor& img, double factor) {
  at::Tensor degenerate = empty_like_rgb(img);
  std::memset(degenerate.data_ptr<uint8_t>(), value, degenerate.numel());
  at::Tensor out = empty_like_rgb(img);
  blend_bytes(degenerate.data_ptr<uint8_t>(), img.data_ptr<uint8_t>(), out.data_ptr<uint8_t>(),
              img.numel(), factor);
  return out;
}

// tf.image.rgb_to_grayscale of one pixel: uint8 -> float32 by * (1/255), a dot product with
// (0.2989, 0.587, 0.114), then back to uint8 by * 255.5 and a truncating cast.
struct Grayscale {
  std::array<float, 256> r, g, b;  // the three products, per input value
  Grayscale() {
    const float scale = static_cast<float>(1.0 / 255.0);
    for (int v = 0; v < 256; ++v) {
      const float f = static_cast<float>(v) * scale;
      r[v] = f * 0.2989f;
      g[v] = f * 0.5870f;
      b[v] = f * 0.1140f;
    }
  }
  uint8_t operator()(const uint8_t* px) const {
    const float gray = (r[px[0]] + g[px[1]]) + b[px[2]];
    return clip_trunc(gray * 255.5f);
  }
};

const Grayscale& grayscale_tables() {
  static const Grayscale tables;
  return tables;
}

// tfa.image.transform with an affine matrix, nearest sampling and a constant fill. The output
// pixel (x, y) reads the input at (t0 x + t1 y + t2, t3 x + t4 y + t5), each coordinate in
// float32 and rounded half away from zero (std::round, as TF's kernel).
at::Tensor affine(const at::Tensor& img, const std::array<float, 6>& t, uint8_t fill) {
  const int64_t h = img.size(0), w = img.size(1);
  at::Tensor out = empty_like_rgb(img);
  const uint8_t* in = img.data_ptr<uint8_t>();
  uint8_t* o = out.data_ptr<uint8_t>();
  const float hf = static_cast<float>(h), wf = static_cast<float>(w);
  for (int64_t y = 0; y < h; ++y) {
    const float fy = static_cast<float>(y);
    for (int64_t x = 0; x < w; ++x) {
      const float fx = static_cast<float>(x);
      const float sx = std::round((t[0] * fx + t[1] * fy) + t[2]);
      const float sy = std::round((t[3] * fx + t[4] * fy) + t[5]);
      uint8_t* dst = o + 3 * (y * w + x);
      // Compared as floats first, so far-away (or NaN) coordinates never become integers.
      if (sx >= 0.0f && sx < wf && sy >= 0.0f && sy < hf) {
        const uint8_t* src = in + 3 * (static_cast<int64_t>(sy) * w + static_cast<int64_t>(sx));
        dst[0] = src[0];
        dst[1] = src[1];
        dst[2] = src[2];
      } else {
        dst[0] = dst[1] = dst[2] = fill;
      }
    }
  }
  return out;
}

// Python's int() of a level-derived float: truncation toward zero.
int64_t py_int(double v) { return static_cast<int64_t>(std::trunc(v)); }

void check_level(const char* op, double level) {
  // The upper bound only keeps py_int defined; big_vision's magnitudes are 0..30 at most.
  BV_CHECK(std::isfinite(level) && level >= 0.0 && level <= 1e6, op, ": magnitude ", level,
           " must be a number in [0, 1e6]");
}

std::string normalized_name(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

const char* const kOpNames[kNumAugmentOps] = {
    "AutoContrast", "Equalize",   "Invert",     "Rotate",     "Posterize", "Solarize",
    "Color",        "Contrast",   "Brightness", "Sharpness",  "ShearX",    "ShearY",
    "TranslateX",   "TranslateY", "Cutout",     "SolarizeAdd"};

}  // namespace

std::string augment_op_name(AugmentOp op) {
  const int i = static_cast<int>(op);
  BV_CHECK(i >= 0 && i < kNumAugmentOps, "augment_op_name: no op number ", i);
  return kOpNames[i];
}

AugmentOp augment_op_from_name(const std::string& name) {
  const std::string wanted = normalized_name(name);
  std::string known;
  for (int i = 0; i < kNumAugmentOps; ++i) {
    if (normalized_name(kOpNames[i]) == wanted) return static_cast<AugmentOp>(i);
    known += (i ? ", " : "") + std::string(kOpNames[i]);
  }
  fail("randaug: unknown op '", name, "' (known: ", known, ")");
}

// --- the ops --------------------------------------------------------------------------------

at::Tensor blend(const at::Tensor& a, const at::Tensor& b, double factor) {
  const at::Tensor ca = checked_rgb("blend", a), cb = checked_rgb("blend", b);
  BV_CHECK(ca.sizes() == cb.sizes(), "blend: images of different shapes ", shape_string(ca),
           " and ", shape_string(cb));
  BV_CHECK(std::isfinite(factor), "blend: factor ", factor, " is not finite");
  at::Tensor out = empty_like_rgb(ca);
  blend_bytes(ca.data_ptr<uint8_t>(), cb.data_ptr<uint8_t>(), out.data_ptr<uint8_t>(), ca.numel(),
              factor);
  return out;
}

at::Tensor autocontrast(const at::Tensor& img) {
  const at::Tensor in = checked_rgb("autocontrast", img);
  const auto hist = histograms(in);
  std::array<Lut, 3> luts;
  for (int c = 0; c < 3; ++c) {
    int lo = 0, hi = 255;
    while (hist[c][lo] == 0) ++lo;
    while (hist[c][hi] == 0) --hi;
    for (int v = 0; v < 256; ++v) luts[c][v] = static_cast<uint8_t>(v);
    if (hi <= lo) continue;  // a flat channel stays as it is
    // TF: scale = 255 / (hi - lo), offset = -lo * scale, x * scale + offset, all float32.
    const float scale = 255.0f / (static_cast<float>(hi) - static_cast<float>(lo));
    const float offset = -static_cast<float>(lo) * scale;
    for (int v = 0; v < 256; ++v) luts[c][v] = clip_trunc(static_cast<float>(v) * scale + offset);
  }
  return apply_luts(in, luts);
}

at::Tensor equalize(const at::Tensor& img) {
  const at::Tensor in = checked_rgb("equalize", img);
  const auto hist = histograms(in);
  std::array<Lut, 3> luts;
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) luts[c][v] = static_cast<uint8_t>(v);
    // PIL: step = (pixels - count of the brightest value present) // 255; zero step: unchanged.
    int64_t total = 0, last = 0;
    for (int v = 0; v < 256; ++v) {
      total += hist[c][v];
      if (hist[c][v] != 0) last = hist[c][v];
    }
    const int64_t step = (total - last) / 255;
    if (step == 0) continue;
    // lut[v] = (pixels below v + step // 2) // step, clipped to 255 (the cumulative sum shifted
    // right by one, with 0 first).
    int64_t below = 0;
    for (int v = 0; v < 256; ++v) {
      luts[c][v] = static_cast<uint8_t>(std::min<int64_t>(255, (below + step / 2) / step));
      below += hist[c][v];
    }
  }
  return apply_luts(in, luts);
}

at::Tensor invert(const at::Tensor& img) {
  const at::Tensor in = checked_rgb("invert", img);
  Lut lut;
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(255 - v);
  return apply_lut(in, lut);
}

at::Tensor posterize(const at::Tensor& img, int64_t bits) {
  const at::Tensor in = checked_rgb("posterize", img);
  // big_vision shifts by the Python int 8 - bits, which TF converts to uint8 (wrapping) and
  // clamps to [0, 7]: 0 bits keeps the top bit, and so does any bits > 8.
  const int shift = std::min<int>(wrap_u8(8 - bits), 7);
  Lut lut;
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>((v >> shift) << shift);
  return apply_lut(in, lut);
}

at::Tensor solarize(const at::Tensor& img, int64_t threshold) {
  const at::Tensor in = checked_rgb("solarize", img);
  const uint8_t thr = wrap_u8(threshold);
  Lut lut;
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(v < thr ? v : 255 - v);
  return apply_lut(in, lut);
}

at::Tensor solarize_add(const at::Tensor& img, int64_t addition, int64_t threshold) {
  const at::Tensor in = checked_rgb("solarize_add", img);
  const uint8_t thr = wrap_u8(threshold);
  Lut lut;
  for (int v = 0; v < 256; ++v) {
    // The sum is int64 in TF, so a large addition cannot wrap before the clip.
    const int64_t added = std::clamp<int64_t>(int64_t{v} + addition, 0, 255);
    lut[v] = static_cast<uint8_t>(v < thr ? added : v);
  }
  return apply_lut(in, lut);
}

at::Tensor grayscale(const at::Tensor& img) {
  const at::Tensor in = checked_rgb("grayscale", img);
  const Grayscale& gray = grayscale_tables();
  at::Tensor out = empty_like_rgb(in);
  const uint8_t* src = in.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  const int64_t n = in.size(0) * in.size(1);
  for (int64_t i = 0; i < n; ++i) {
    dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = gray(src + 3 * i);
  }
  return out;
}

at::Tensor color(const at::Tensor& img, double factor) {
  const at::Tensor in = checked_rgb("color", img);
  const at::Tensor gray = grayscale(in);
  at::Tensor out = empty_like_rgb(in);
  blend_bytes(gray.data_ptr<uint8_t>(), in.data_ptr<uint8_t>(), out.data_ptr<uint8_t>(), in.numel(),
              factor);
  return out;
}

at::Tensor contrast(const at::Tensor& img, double factor, bool fix) {
  const at::Tensor in = checked_rgb("contrast", img);
  const int64_t pixels = in.size(0) * in.size(1);
  float mean;
  if (fix) {
    // The mean grey level: what the histogram was meant to give.
    const Grayscale& gray = grayscale_tables();
    const uint8_t* src = in.data_ptr<uint8_t>();
    int64_t sum = 0;
    for (int64_t i = 0; i < pixels; ++i) sum += gray(src + 3 * i);
    mean = static_cast<float>(static_cast<double>(sum) / static_cast<double>(pixels));
  } else {
    // big_vision sums the 256-bin histogram of the grey image (= the pixel count) and divides
    // by 256: a "mean" of (H*W)/256 whatever the image shows (big_vision issue #109).
    mean = static_cast<float>(pixels) / 256.0f;
  }
  return blend_constant(clip_trunc(mean), in, factor);
}

at::Tensor brightness(const at::Tensor& img, double factor) {
  return blend_constant(0, checked_rgb("brightness", img), factor);
}

at::Tensor sharpness(const at::Tensor& img, double factor) {
  const at::Tensor in = checked_rgb("sharpness", img);
  const int64_t h = in.size(0), w = in.size(1);
  // The smoothed image: the original on the border, the 3x3 kernel inside (TF's VALID depthwise
  // conv, accumulated in float32 in kernel row-major order from 0). Images thinner than 3 pixels
  // have no interior and stay as they are.
  at::Tensor smooth = copy_of(in);
  if (h >= 3 && w >= 3) {
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    std::array<float, 256> p1, p5;  // v * k, per value: the same float32 products, looked up
    for (int v = 0; v < 256; ++v) {
      p1[v] = static_cast<float>(v) * k1;
      p5[v] = static_cast<float>(v) * k5;
    }
    const uint8_t* src = in.data_ptr<uint8_t>();
    uint8_t* dst = smooth.data_ptr<uint8_t>();
    const int64_t row = 3 * w;
    for (int64_t y = 1; y + 1 < h; ++y) {
      for (int64_t x = 1; x + 1 < w; ++x) {
        for (int64_t c = 0; c < 3; ++c) {
          const uint8_t* p = src + y * row + 3 * x + c;
          float acc = 0.0f;
          acc += p1[p[-row - 3]];
          acc += p1[p[-row]];
          acc += p1[p[-row + 3]];
          acc += p1[p[-3]];
          acc += p5[p[0]];
          acc += p1[p[3]];
          acc += p1[p[row - 3]];
          acc += p1[p[row]];
          acc += p1[p[row + 3]];
          dst[y * row + 3 * x + c] = clip_trunc(acc);
        }
      }
    }
  }
  at::Tensor out = empty_like_rgb(in);
  blend_bytes(smooth.data_ptr<uint8_t>(), in.data_ptr<uint8_t>(), out.data_ptr<uint8_t>(),
              in.numel(), factor);
  return out;
}

at::Tensor rotate(const at::Tensor& img, double degrees, int64_t fill) {
  const at::Tensor in = checked_rgb("rotate", img);
  const uint8_t f = checked_fill("rotate", fill);
  BV_CHECK(std::isfinite(degrees), "rotate: angle ", degrees, " is not finite");
  // big_vision: radians = degrees * (pi / 180) in Python, then float32 in tfa; tfa's
  // angles_to_projective_transforms rotates about the centre ((w-1)/2, (h-1)/2).
  const float angle = static_cast<float>(degrees * (M_PI / 180.0));
  const float c = std::cos(angle), s = std::sin(angle);
  const float w1 = static_cast<float>(in.size(1)) - 1.0f;
  const float h1 = static_cast<float>(in.size(0)) - 1.0f;
  const float x_offset = (w1 - (c * w1 - s * h1)) / 2.0f;
  const float y_offset = (h1 - (s * w1 + c * h1)) / 2.0f;
  return affine(in, {c, -s, x_offset, s, c, y_offset}, f);
}

at::Tensor shear_x(const at::Tensor& img, double level, int64_t fill) {
  const at::Tensor in = checked_rgb("shear_x", img);
  return affine(in, {1.0f, static_cast<float>(level), 0.0f, 0.0f, 1.0f, 0.0f},
                checked_fill("shear_x", fill));
}

at::Tensor shear_y(const at::Tensor& img, double level, int64_t fill) {
  const at::Tensor in = checked_rgb("shear_y", img);
  return affine(in, {1.0f, 0.0f, 0.0f, static_cast<float>(level), 1.0f, 0.0f},
                checked_fill("shear_y", fill));
}

at::Tensor translate_x(const at::Tensor& img, double pixels, int64_t fill) {
  const at::Tensor in = checked_rgb("translate_x", img);
  return affine(in, {1.0f, 0.0f, static_cast<float>(pixels), 0.0f, 1.0f, 0.0f},
                checked_fill("translate_x", fill));
}

at::Tensor translate_y(const at::Tensor& img, double pixels, int64_t fill) {
  const at::Tensor in = checked_rgb("translate_y", img);
  return affine(in, {1.0f, 0.0f, 0.0f, 0.0f, 1.0f, static_cast<float>(pixels)},
                checked_fill("translate_y", fill));
}

at::Tensor cutout(const at::Tensor& img, int64_t pad, int64_t cy, int64_t cx, int64_t fill) {
  const at::Tensor in = checked_rgb("cutout", img);
  const uint8_t f = checked_fill("cutout", fill);
  const int64_t h = in.size(0), w = in.size(1);
  BV_CHECK(pad >= 0, "cutout: pad ", pad, " must be >= 0");
  BV_CHECK(cy >= 0 && cy < h && cx >= 0 && cx < w, "cutout: centre (y=", cy, ", x=", cx,
           ") is outside the ", h, "x", w, " image");
  at::Tensor out = copy_of(in);
  const int64_t y0 = std::max<int64_t>(0, cy - pad), y1 = std::min(h, cy + pad);
  const int64_t x0 = std::max<int64_t>(0, cx - pad), x1 = std::min(w, cx + pad);
  uint8_t* o = out.data_ptr<uint8_t>();
  for (int64_t y = y0; y < y1; ++y) {
    if (x1 > x0) std::memset(o + 3 * (y * w + x0), f, 3 * (x1 - x0));
  }
  return out;
}

// --- RandAugment ----------------------------------------------------------------------------

at::Tensor augment(const at::Tensor& img, AugmentOp op, double level, Rng* rng, bool fix_contrast) {
  const int index = static_cast<int>(op);
  BV_CHECK(index >= 0 && index < kNumAugmentOps, "augment: no op number ", index);
  const std::string name = kOpNames[index];
  check_level(("augment " + name).c_str(), level);
  const double ratio = level / kMaxLevel;
  // big_vision's _randomly_negate_tensor: keeps the sign when floor(u + 0.5) is 1.
  auto random_sign = [&](double v) {
    BV_CHECK(rng != nullptr, "augment ", name, ": this op is random and needs an rng");
    return rng->uniform() < 0.5 ? -v : v;
  };
  const double enhance = ratio * 1.8 + 0.1;
  switch (op) {
    case AugmentOp::kAutoContrast: return autocontrast(img);
    case AugmentOp::kEqualize: return equalize(img);
    case AugmentOp::kInvert: return invert(img);
    case AugmentOp::kRotate: return rotate(img, random_sign(ratio * 30.0), kReplace);
    case AugmentOp::kPosterize: return posterize(img, py_int(ratio * 4.0));
    case AugmentOp::kSolarize: return solarize(img, py_int(ratio * 256.0));
    case AugmentOp::kColor: return color(img, enhance);
    case AugmentOp::kContrast: return contrast(img, enhance, fix_contrast);
    case AugmentOp::kBrightness: return brightness(img, enhance);
    case AugmentOp::kSharpness: return sharpness(img, enhance);
    case AugmentOp::kShearX: return shear_x(img, random_sign(ratio * 0.3), kReplace);
    case AugmentOp::kShearY: return shear_y(img, random_sign(ratio * 0.3), kReplace);
    case AugmentOp::kTranslateX:
      return translate_x(img, random_sign(ratio * kTranslateConst), kReplace);
    case AugmentOp::kTranslateY:
      return translate_y(img, random_sign(ratio * kTranslateConst), kReplace);
    case AugmentOp::kCutout: {
      const at::Tensor in = checked_rgb("cutout", img);
      BV_CHECK(rng != nullptr, "augment Cutout: this op is random and needs an rng");
      // tf.random_uniform over [0, H) then [0, W).
      const int64_t cy = rng->integer(0, in.size(0) - 1);
      const int64_t cx = rng->integer(0, in.size(1) - 1);
      return cutout(in, py_int(ratio * kCutoutConst), cy, cx, kReplace);
    }
    case AugmentOp::kSolarizeAdd: return solarize_add(img, py_int(ratio * 110.0), 128);
  }
  fail("augment: no op number ", index);
}

at::Tensor randaug(const at::Tensor& img, int num_layers, double magnitude, Rng& rng,
                   bool fix_contrast) {
  at::Tensor out = checked_rgb("randaug", img);
  BV_CHECK(num_layers >= 0, "randaug: num_layers ", num_layers, " must be >= 0");
  check_level("randaug", magnitude);
  if (num_layers == 0) return copy_of(out);
  for (int layer = 0; layer < num_layers; ++layer) {
    const auto op = static_cast<AugmentOp>(rng.integer(0, kNumAugmentOps - 1));
    out = augment(out, op, magnitude, &rng, fix_contrast);
  }
  return out;
}

}  // namespace bv::image
