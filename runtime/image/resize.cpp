// TF2 tf.image.resize, method by method, as big_vision calls it (then clip + cast back).
//
// What TF2 runs for each (python/ops/image_ops_impl.py, resize_images_v2):
//   bilinear              ResizeBilinear(half_pixel_centers=True): src = (i + 0.5) * in/out - 0.5,
//                         lerp between floor(src) and ceil(src), both clamped to the image.
//   bilinear + antialias  ScaleAndTranslate(kernel_type="triangle", antialias=True).
//   bicubic               ResizeBicubic(half_pixel_centers=True): Keys cubic a = -0.5 read from a
//                         1024-entry table (the fraction is rounded to 1/1024); taps outside the
//                         image get weight 0 and the other weights are renormalised.
//   bicubic + antialias   ScaleAndTranslate(kernel_type="keyscubic", antialias=True).
//   nearest               ResizeNearestNeighbor(half_pixel_centers=True):
//                         src = clamp(floor((i + 0.5) * in/out), 0, in - 1); keeps the dtype.
//   area                  ResizeArea: exact fractional box average; antialias is not used.
// So without antialias TF2 does NOT go through ScaleAndTranslate for bilinear/bicubic (only
// lanczos, gaussian and mitchellcubic always do).
// ScaleAndTranslate with antialias only widens the kernel when downscaling (kernel scale =
// max(in/out, 1)), so for upscaling it is plain triangle/Keys interpolation with renormalised
// border weights.
//
// Each method below follows TF's kernel in the details that decide float32 results: the same
// per-axis weights (computed in float with TF's expressions) and the same order of operations
// (which pass first, which products are summed in which order), so the uint8 truncation lands on
// the same side. (Checked against TF's published test expectations, not bit for bit against a
// TF build.) A separable formulation lets every pass run over contiguous rows with the weights
// computed once per call.
//
// Single-threaded on purpose: the input pipeline resizes many images at once on its workers, and
// at::parallel_for is serial in this build anyway (ATen's OpenMP backend needs -fopenmp in the
// calling translation unit).
#include "image/resize.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/tensor_util.h"

namespace bv::image {

namespace {

// Clip to the output dtype's range, as big_vision's tf.clip_by_value before tf.cast.
template <typename T>
inline T store(float v);

template <>
inline uint8_t store<uint8_t>(float v) {
  v = v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
  return static_cast<uint8_t>(v);  // truncates toward zero, as tf.cast(float -> uint8)
}

template <>
inline float store<float>(float v) {
  constexpr float lo = std::numeric_limits<float>::lowest();
  constexpr float hi = std::numeric_limits<float>::max();
  return v < lo ? lo : (v > hi ? hi : v);  // NaN passes (both comparisons are false)
}

inline int64_t clamp_index(int64_t i, int64_t size) {
  return std::min(size - 1, std::max<int64_t>(0, i));
}

// A row as floats: uint8 rows are widened into `buf` first (one vectorised pass; converting
// inside the gather loops is much slower), float rows are used in place.
inline const float* float_row(const float* row, int64_t, std::vector<float>&) { return row; }
inline const float* float_row(const uint8_t* row, int64_t n, std::vector<float>& buf) {
  buf.resize(n);
  for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(row[i]);
  return buf.data();
}

// in/out as TF's CalculateResizeScale computes it (float32).
inline float resize_scale(int64_t in, int64_t out) {
  return static_cast<float>(in) / static_cast<float>(out);
}

struct Geometry {
  int64_t in_h, in_w, out_h, out_w, c;
};

// ---- nearest ---------------------------------------------------------------------------------

std::vector<int64_t> nearest_axis(int64_t in, int64_t out) {
  const float scale = resize_scale(in, out);
  std::vector<int64_t> src(out);
  for (int64_t i = 0; i < out; ++i) {
    // TF adds the half pixel but not the -0.5: the floor does the rest.
    const auto s = static_cast<int64_t>(std::floor((static_cast<float>(i) + 0.5f) * scale));
    src[i] = clamp_index(s, in);
  }
  return src;
}

template <typename T>
void resize_nearest(const T* in, T* out, const Geometry& g) {
  const std::vector<int64_t> ys = nearest_axis(g.in_h, g.out_h);
  const std::vector<int64_t> xs = nearest_axis(g.in_w, g.out_w);
  const int64_t c = g.c;
  for (int64_t y = 0; y < g.out_h; ++y) {
    const T* row = in + ys[y] * g.in_w * c;
    T* dst = out + y * g.out_w * c;
    for (int64_t x = 0; x < g.out_w; ++x) std::copy_n(row + xs[x] * c, c, dst + x * c);
  }
}

// ---- bilinear (no antialias) -----------------------------------------------------------------

struct Lerp {
  int64_t lo, hi;
  float frac;
};

std::vector<Lerp> bilinear_axis(int64_t in, int64_t out) {
  const float scale = resize_scale(in, out);
  std::vector<Lerp> axis(out);
  for (int64_t i = 0; i < out; ++i) {
    const float src = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
    const float below = std::floor(src);
    // The fraction comes from the unclamped floor; at the borders lo == hi, so it is unused.
    axis[i] = {std::max<int64_t>(static_cast<int64_t>(below), 0),
               std::min<int64_t>(static_cast<int64_t>(std::ceil(src)), in - 1), src - below};
  }
  return axis;
}

// One input row lerped horizontally: left + (right - left) * frac per channel. kC > 0 fixes the
// channel count at compile time so the inner loop unrolls.
template <int kC, typename T>
void lerp_row(const T* row, const std::vector<Lerp>& xs, int64_t channels, float* dst) {
  const int64_t c = kC > 0 ? kC : channels;
  for (size_t x = 0; x < xs.size(); ++x) {
    const T* a = row + xs[x].lo * c;
    const T* b = row + xs[x].hi * c;
    const float f = xs[x].frac;
    for (int64_t ch = 0; ch < c; ++ch) {
      const float left = static_cast<float>(a[ch]);
      dst[x * c + ch] = left + (static_cast<float>(b[ch]) - left) * f;
    }
  }
}

// TF computes top = tl + (tr - tl) * fx, bottom likewise, out = top + (bottom - top) * fy. The
// horizontal lerps of an input row are the same for every output row that reads it, so they are
// computed once per needed input row and then blended vertically: the same float operations.
template <typename T>
void resize_bilinear(const T* in, T* out, const Geometry& g) {
  const std::vector<Lerp> ys = bilinear_axis(g.in_h, g.out_h);
  const std::vector<Lerp> xs = bilinear_axis(g.in_w, g.out_w);
  const int64_t c = g.c, row_out = g.out_w * c;

  std::vector<int64_t> slot(g.in_h, -1);  // input row -> row of `lerped`, -1 when not needed
  std::vector<int64_t> needed;
  for (const Lerp& l : ys) {
    for (int64_t r : {l.lo, l.hi}) {
      if (slot[r] < 0) {
        slot[r] = static_cast<int64_t>(needed.size());
        needed.push_back(r);
      }
    }
  }
  std::vector<float> lerped(needed.size() * row_out);
  std::vector<float> buf;
  for (int64_t k = 0; k < static_cast<int64_t>(needed.size()); ++k) {
    const float* row = float_row(in + needed[k] * g.in_w * c, g.in_w * c, buf);
    float* dst = lerped.data() + k * row_out;
    if (c == 3) {
      lerp_row<3>(row, xs, 3, dst);
    } else if (c == 1) {
      lerp_row<1>(row, xs, 1, dst);
    } else {
      lerp_row<0>(row, xs, c, dst);
    }
  }
  for (int64_t y = 0; y < g.out_h; ++y) {
    const float* top = lerped.data() + slot[ys[y].lo] * row_out;
    const float* bottom = lerped.data() + slot[ys[y].hi] * row_out;
    const float f = ys[y].frac;
    T* dst = out + y * row_out;
    for (int64_t i = 0; i < row_out; ++i) dst[i] = store<T>(top[i] + (bottom[i] - top[i]) * f);
  }
}

// ---- bicubic (no antialias) ------------------------------------------------------------------

constexpr int64_t kCubicTableSize = 1024;

// Keys cubic (a = -0.5) sampled at i/1024: entry 2i is the weight at distance i/1024 (|x| < 1),
// entry 2i+1 the weight at distance 1 + i/1024 (1 <= |x| < 2). Evaluated in double, stored as
// float, like TF's table.
const float* keys_cubic_table() {
  static const std::vector<float> table = [] {
    const double a = -0.5;
    std::vector<float> t((kCubicTableSize + 1) * 2);
    for (int64_t i = 0; i <= kCubicTableSize; ++i) {
      float x = static_cast<float>(i * 1.0 / kCubicTableSize);
      t[i * 2] = static_cast<float>(((a + 2) * x - (a + 3)) * x * x + 1);
      x = static_cast<float>(x + 1.0);
      t[i * 2 + 1] = static_cast<float>(((a * x - 5 * a) * x + 8 * a) * x - 4 * a);
    }
    return t;
  }();
  return table.data();
}

struct Cubic {
  int64_t index[4];
  float weight[4];
};

std::vector<Cubic> bicubic_axis(int64_t in, int64_t out) {
  const float scale = resize_scale(in, out);
  const float* table = keys_cubic_table();
  std::vector<Cubic> axis(out);
  for (int64_t i = 0; i < out; ++i) {
    const float src = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
    const auto base = static_cast<int64_t>(std::floor(src));
    const float delta = src - static_cast<float>(base);
    const int64_t off = std::lrint(delta * static_cast<float>(kCubicTableSize));
    const float w[4] = {table[off * 2 + 1], table[off * 2], table[(kCubicTableSize - off) * 2],
                        table[(kCubicTableSize - off) * 2 + 1]};
    Cubic& cu = axis[i];
    for (int k = 0; k < 4; ++k) {
      const int64_t raw = base - 1 + k;
      cu.index[k] = clamp_index(raw, in);
      cu.weight[k] = cu.index[k] == raw ? w[k] : 0.0f;  // taps outside the image drop out
    }
    const float sum = cu.weight[0] + cu.weight[1] + cu.weight[2] + cu.weight[3];
    if (std::abs(sum) >= 1000.0f * std::numeric_limits<float>::min()) {
      const float inv = 1.0f / sum;
      for (float& wk : cu.weight) wk *= inv;
    }
  }
  return axis;
}

// TF interpolates the four rows first (per input column), then the four columns.
template <typename T>
void resize_bicubic(const T* in, T* out, const Geometry& g) {
  const std::vector<Cubic> ys = bicubic_axis(g.in_h, g.out_h);
  const std::vector<Cubic> xs = bicubic_axis(g.in_w, g.out_w);
  const int64_t c = g.c, row_in = g.in_w * c, row_out = g.out_w * c;
  std::vector<float> column(row_in);
  for (int64_t y = 0; y < g.out_h; ++y) {
    const Cubic& cy = ys[y];
    const T* r0 = in + cy.index[0] * row_in;
    const T* r1 = in + cy.index[1] * row_in;
    const T* r2 = in + cy.index[2] * row_in;
    const T* r3 = in + cy.index[3] * row_in;
    for (int64_t i = 0; i < row_in; ++i) {
      column[i] =
          static_cast<float>(r0[i]) * cy.weight[0] + static_cast<float>(r1[i]) * cy.weight[1] +
          static_cast<float>(r2[i]) * cy.weight[2] + static_cast<float>(r3[i]) * cy.weight[3];
    }
    T* dst = out + y * row_out;
    for (int64_t x = 0; x < g.out_w; ++x) {
      const Cubic& cx = xs[x];
      for (int64_t ch = 0; ch < c; ++ch) {
        dst[x * c + ch] = store<T>(column[cx.index[0] * c + ch] * cx.weight[0] +
                                   column[cx.index[1] * c + ch] * cx.weight[1] +
                                   column[cx.index[2] * c + ch] * cx.weight[2] +
                                   column[cx.index[3] * c + ch] * cx.weight[3]);
      }
    }
  }
}

// ---- scale_and_translate (bilinear / bicubic with antialias) ---------------------------------

struct TriangleKernel {
  static constexpr float kRadius = 1.0f;
  float operator()(float x) const { return x < 1.0f ? 1.0f - x : 0.0f; }
};

struct KeysCubicKernel {
  static constexpr float kRadius = 2.0f;
  float operator()(float x) const {
    if (x >= 2.0f) return 0.0f;
    if (x >= 1.0f) return ((-0.5f * x + 2.5f) * x - 4.0f) * x + 2.0f;
    return ((1.5f * x - 2.5f) * x) * x + 1.0f;
  }
};

// Along one axis, for each output pixel i: count[i] input pixels index[i * stride + k] with
// weights weight[i * stride + k]. Sums over taps start from 0 and go in k order, as TF's do.
struct Taps {
  int64_t stride = 0;
  std::vector<int64_t> count, index;
  std::vector<float> weight;

  Taps(int64_t out, int64_t max_taps)
      : stride(max_taps), count(out, 0), index(out * max_taps, 0), weight(out * max_taps, 0.0f) {}
};

// dst[x * C + ch] = put(sum over x's taps of weight * row[index * C + ch]) for one row of pixels.
// One, three and four channels get loops the compiler can unroll.
template <int kC, typename In, typename Put>
void gather_fixed(const In* row, const Taps& t, int64_t out_w, const Put& put) {
  for (int64_t x = 0; x < out_w; ++x) {
    const int64_t* idx = t.index.data() + x * t.stride;
    const float* w = t.weight.data() + x * t.stride;
    float acc[kC] = {};
    for (int64_t k = 0; k < t.count[x]; ++k) {
      const In* p = row + idx[k] * kC;
      for (int ch = 0; ch < kC; ++ch) acc[ch] += w[k] * static_cast<float>(p[ch]);
    }
    for (int ch = 0; ch < kC; ++ch) put(x * kC + ch, acc[ch]);
  }
}

template <typename In, typename Put>
void gather(const In* row, int64_t c, const Taps& t, int64_t out_w, const Put& put) {
  if (c == 3) return gather_fixed<3>(row, t, out_w, put);
  if (c == 1) return gather_fixed<1>(row, t, out_w, put);
  if (c == 4) return gather_fixed<4>(row, t, out_w, put);
  for (int64_t x = 0; x < out_w; ++x) {
    const int64_t* idx = t.index.data() + x * t.stride;
    const float* w = t.weight.data() + x * t.stride;
    for (int64_t ch = 0; ch < c; ++ch) {
      float acc = 0.0f;
      for (int64_t k = 0; k < t.count[x]; ++k) {
        acc += w[k] * static_cast<float>(row[idx[k] * c + ch]);
      }
      put(x * c + ch, acc);
    }
  }
}

// acc[j] = sum over the taps of output row y of weight * rows[index][j], for a whole row of n.
template <typename In>
void blend_rows(const In* image, int64_t row_len, const Taps& t, int64_t y, float* acc) {
  std::fill(acc, acc + row_len, 0.0f);
  for (int64_t k = 0; k < t.count[y]; ++k) {
    const In* src = image + t.index[y * t.stride + k] * row_len;
    const float w = t.weight[y * t.stride + k];
    for (int64_t j = 0; j < row_len; ++j) acc[j] += w * static_cast<float>(src[j]);
  }
}

template <typename Kernel>
Taps scale_taps(int64_t in, int64_t out) {
  const Kernel kernel;
  const float scale = static_cast<float>(out) / static_cast<float>(in);
  const auto inv_scale = static_cast<float>(1.0 / scale);
  // Downscaling widens the kernel (a low-pass filter); upscaling only interpolates.
  const float kernel_scale = std::max(inv_scale, 1.0f);
  const float reach = Kernel::kRadius * kernel_scale;
  const float one_over_kernel_scale = 1.0f / kernel_scale;
  Taps t(out, std::min<int64_t>(2 * static_cast<int64_t>(std::ceil(reach)) + 1, in));
  for (int64_t i = 0; i < out; ++i) {
    const float sample = (static_cast<float>(i) + 0.5f) * inv_scale;
    if (sample < 0 || sample > static_cast<float>(in)) continue;  // no taps: output 0
    const int64_t first = clamp_index(static_cast<int64_t>(std::ceil(sample - reach - 0.5f)), in);
    const int64_t last = clamp_index(static_cast<int64_t>(std::floor(sample + reach - 0.5f)), in);
    const int64_t n = std::min(last + 1 - first, t.stride);
    float* w = t.weight.data() + i * t.stride;
    float total = 0.0f;
    for (int64_t k = 0; k < n; ++k) {
      const float pos = static_cast<float>(first + k) + 0.5f - sample;
      w[k] = kernel(std::abs(pos * one_over_kernel_scale));
      total += w[k];
      t.index[i * t.stride + k] = first + k;
    }
    if (std::abs(total) < 1000.0f * std::numeric_limits<float>::min()) continue;  // all zero
    const float inv = 1.0f / total;
    for (int64_t k = 0; k < n; ++k) w[k] *= inv;
    t.count[i] = n;
  }
  return t;
}

// TF gathers rows first (each output row a weighted sum of whole input rows), then columns of
// that intermediate image.
template <typename T, typename Kernel>
void resize_scaled(const T* in, T* out, const Geometry& g) {
  const Taps ys = scale_taps<Kernel>(g.in_h, g.out_h);
  const Taps xs = scale_taps<Kernel>(g.in_w, g.out_w);
  const int64_t c = g.c, row_in = g.in_w * c, row_out = g.out_w * c;
  std::vector<float> rows(row_in);
  for (int64_t y = 0; y < g.out_h; ++y) {
    blend_rows(in, row_in, ys, y, rows.data());
    T* dst = out + y * row_out;
    gather(rows.data(), c, xs, g.out_w, [dst](int64_t j, float v) { dst[j] = store<T>(v); });
  }
}

// ---- area ------------------------------------------------------------------------------------

// How much of input cell i lies inside the output cell [lo, hi) (in input coordinates), with TF's
// float expressions: interior cells count 1, the partial cells at either end their fraction.
inline float area_coverage(int64_t i, float lo, float hi, float scale) {
  const auto fi = static_cast<float>(i);
  if (fi < lo) return fi + 1.0f > hi ? scale : static_cast<float>(i + 1) - lo;
  return fi + 1.0f > hi ? hi - fi : 1.0f;
}

// Output cell i covers input [i * scale, (i + 1) * scale). Float rounding can make the last cell
// reach one cell past the image; TF clamps that index (counting the edge pixel twice with a
// tiny weight), and so does this.
Taps area_taps(int64_t in, int64_t out, float scale) {
  Taps t(out, static_cast<int64_t>(std::ceil(scale)) + 2);
  for (int64_t i = 0; i < out; ++i) {
    const float lo = static_cast<float>(i) * scale, hi = static_cast<float>(i + 1) * scale;
    const auto first = static_cast<int64_t>(std::floor(lo));
    const auto last = static_cast<int64_t>(std::ceil(hi));
    BV_CHECK(last - first <= t.stride, "resize area: ", last - first, " taps for cell ", i);
    for (int64_t j = first; j < last; ++j) {
      t.index[i * t.stride + j - first] = clamp_index(j, in);
      t.weight[i * t.stride + j - first] = area_coverage(j, lo, hi, scale);
    }
    t.count[i] = last - first;
  }
  return t;
}

// TF's resize_area: output pixel = (sum over covered input cells of value * coverage) * out/in
// per axis. Each input row is summed horizontally once (TF: first cell * its coverage, interior
// cells as they are, i.e. * 1, last cell * its coverage), then those row sums are combined
// vertically in row order and scaled: the same float operations as TF, which recomputes the row
// sums for every output row.
template <typename T>
void resize_area(const T* in, T* out, const Geometry& g) {
  const float hs = resize_scale(g.in_h, g.out_h), ws = resize_scale(g.in_w, g.out_w);
  const auto scale = static_cast<float>(1.0 / (hs * ws));
  const Taps ys = area_taps(g.in_h, g.out_h, hs);
  const Taps xs = area_taps(g.in_w, g.out_w, ws);
  const int64_t c = g.c, row_in = g.in_w * c, row_out = g.out_w * c;

  std::vector<float> sums(g.in_h * row_out);
  std::vector<float> buf;
  for (int64_t r = 0; r < g.in_h; ++r) {
    float* dst = sums.data() + r * row_out;
    const float* row = float_row(in + r * row_in, row_in, buf);
    gather(row, c, xs, g.out_w, [dst](int64_t j, float v) { dst[j] = v; });
  }
  std::vector<float> acc(row_out);
  for (int64_t y = 0; y < g.out_h; ++y) {
    blend_rows(sums.data(), row_out, ys, y, acc.data());
    T* dst = out + y * row_out;
    for (int64_t j = 0; j < row_out; ++j) dst[j] = store<T>(acc[j] * scale);
  }
}

// ---- dispatch --------------------------------------------------------------------------------

template <typename T>
void run(ResizeMethod method, bool antialias, const T* in, T* out, const Geometry& g) {
  switch (method) {
    case ResizeMethod::kNearest: return resize_nearest(in, out, g);
    case ResizeMethod::kArea: return resize_area(in, out, g);
    case ResizeMethod::kBilinear:
      if (antialias) return resize_scaled<T, TriangleKernel>(in, out, g);
      return resize_bilinear(in, out, g);
    case ResizeMethod::kBicubic:
      if (antialias) return resize_scaled<T, KeysCubicKernel>(in, out, g);
      return resize_bicubic(in, out, g);
  }
}

std::string describe(const at::Tensor& img) {
  return str("image ", shape_string(img), " ", dtype_name(img.scalar_type()));
}

// Checks what every entry point needs: a CPU HxW or HxWxC uint8/float32 image with pixels.
void check_image(const char* op, const at::Tensor& img) {
  BV_CHECK(img.defined(), op, ": expected an image tensor, got an undefined tensor");
  BV_CHECK(img.dim() == 2 || img.dim() == 3, op, ": expected an HxWxC or HxW image, got ",
           describe(img));
  BV_CHECK(img.scalar_type() == at::kByte || img.scalar_type() == at::kFloat, op,
           ": unsupported dtype for ", describe(img), " (expected uint8 or float32)");
  BV_CHECK(img.device().is_cpu(), op, ": expected a CPU image, got ", describe(img), " on ",
           img.device().str());
  BV_CHECK(img.size(0) > 0 && img.size(1) > 0 && (img.dim() == 2 || img.size(2) > 0), op,
           ": cannot resize an empty ", describe(img));
}

at::Tensor resize_checked(const char* op, const at::Tensor& img, int64_t height, int64_t width,
                          ResizeMethod method, bool antialias) {
  BV_CHECK(height > 0 && width > 0, op, ": target size must be positive, got ", height, "x", width,
           " for ", describe(img));
  const at::Tensor src = (img.dim() == 2 ? img.unsqueeze(2) : img).contiguous();
  const Geometry g{src.size(0), src.size(1), height, width, src.size(2)};
  at::Tensor dst = at::empty({height, width, g.c}, src.options());
  if (src.scalar_type() == at::kByte) {
    run<uint8_t>(method, antialias, src.data_ptr<uint8_t>(), dst.data_ptr<uint8_t>(), g);
  } else {
    run<float>(method, antialias, src.data_ptr<float>(), dst.data_ptr<float>(), g);
  }
  return img.dim() == 2 ? dst.squeeze(2) : dst;
}

// big_vision's resize_small/resize_long: factor and new sizes in float32, tf.round (half to even).
at::Tensor resize_by_side(const char* op, const at::Tensor& img, int64_t side, bool smaller,
                          ResizeMethod method, bool antialias) {
  check_image(op, img);
  BV_CHECK(side > 0, op, ": size must be positive, got ", side, " for ", describe(img));
  const int64_t h = img.size(0), w = img.size(1);
  const float factor =
      static_cast<float>(side) / static_cast<float>(smaller ? std::min(h, w) : std::max(h, w));
  const auto new_h = static_cast<int64_t>(std::nearbyint(static_cast<float>(h) * factor));
  const auto new_w = static_cast<int64_t>(std::nearbyint(static_cast<float>(w) * factor));
  return resize_checked(op, img, new_h, new_w, method, antialias);
}

}  // namespace

ResizeMethod resize_method_from_name(const std::string& name) {
  if (name == "bilinear") return ResizeMethod::kBilinear;
  if (name == "nearest") return ResizeMethod::kNearest;
  if (name == "bicubic") return ResizeMethod::kBicubic;
  if (name == "area") return ResizeMethod::kArea;
  fail("unknown resize method '", name, "' (valid: bilinear, nearest, bicubic, area)");
}

std::string resize_method_name(ResizeMethod method) {
  switch (method) {
    case ResizeMethod::kBilinear: return "bilinear";
    case ResizeMethod::kNearest: return "nearest";
    case ResizeMethod::kBicubic: return "bicubic";
    case ResizeMethod::kArea: return "area";
  }
  return "?";
}

at::Tensor resize(const at::Tensor& img, int64_t height, int64_t width, ResizeMethod method,
                  bool antialias) {
  check_image("resize", img);
  return resize_checked("resize", img, height, width, method, antialias);
}

at::Tensor resize_small(const at::Tensor& img, int64_t smaller_size, ResizeMethod method,
                        bool antialias) {
  return resize_by_side("resize_small", img, smaller_size, true, method, antialias);
}

at::Tensor resize_long(const at::Tensor& img, int64_t longer_size, ResizeMethod method,
                       bool antialias) {
  return resize_by_side("resize_long", img, longer_size, false, method, antialias);
}

}  // namespace bv::image
