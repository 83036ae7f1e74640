// Crops, flips and the inception-crop box sampler (runtime/image/crop.h): window arithmetic,
// values, bounds errors, and TF's SampleDistortedBoundingBox traced by hand with fixed draws.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <cmath>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "image/crop.h"
#include "test_util.h"

using bv::image::Box;
using bv::image::InceptionCropParams;

using bv::test::contains;
using bv::test::error_of;

namespace {

// An HxWxC int64 image whose value at (y, x, c) is 100 * y + 10 * x + c: any window can be
// checked against the formula.
at::Tensor coded_image(int64_t h, int64_t w, int64_t c) {
  at::Tensor img = at::empty({h, w, c}, at::kLong);
  auto a = img.accessor<int64_t, 3>();
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k) a[y][x][k] = 100 * y + 10 * x + k;
  return img;
}

void check_window(const at::Tensor& got, const Box& box, int64_t c) {
  REQUIRE(got.sizes() == at::IntArrayRef({box.height, box.width, c}));
  auto a = got.accessor<int64_t, 3>();
  for (int64_t y = 0; y < box.height; ++y)
    for (int64_t x = 0; x < box.width; ++x)
      for (int64_t k = 0; k < c; ++k)
        REQUIRE(a[y][x][k] == 100 * (box.y + y) + 10 * (box.x + x) + k);
}

// Scripted draws for sample_inception_box_with: hands out the queued values and records the
// ranges it was asked for, so a test can check both the result and every draw's bounds.
struct FakeDraws {
  std::deque<double> ratios;
  std::deque<int64_t> ints;
  std::vector<std::pair<double, double>> ratio_calls;
  std::vector<std::pair<int64_t, int64_t>> int_calls;

  Box run(int64_t h, int64_t w, const InceptionCropParams& params) {
    return bv::image::sample_inception_box_with(
        h, w, params,
        [this](double lo, double hi) {
          ratio_calls.emplace_back(lo, hi);
          REQUIRE(!ratios.empty());
          double v = ratios.front();
          if (ratios.size() > 1) ratios.pop_front();  // the last value repeats
          return v;
        },
        [this](int64_t lo, int64_t hi) {
          int_calls.emplace_back(lo, hi);
          REQUIRE(!ints.empty());
          int64_t v = ints.front();
          ints.pop_front();
          REQUIRE(v >= lo);
          REQUIRE(v <= hi);
          return v;
        });
  }
};

InceptionCropParams params_of(double area_min, double area_max, double ratio_min = 0.75,
                              double ratio_max = 1.33) {
  InceptionCropParams p;
  p.area_min = area_min;
  p.area_max = area_max;
  p.ratio_min = ratio_min;
  p.ratio_max = ratio_max;
  return p;
}

}  // namespace

TEST_CASE("central_box offsets are (H-h)//2 and (W-w)//2", "[image][crop]") {
  CHECK(bv::image::central_box(10, 7, 4, 4) == Box{3, 1, 4, 4});
  CHECK(bv::image::central_box(5, 5, 2, 2) == Box{1, 1, 2, 2});  // odd: extra row below
  CHECK(bv::image::central_box(6, 9, 3, 2) == Box{1, 3, 3, 2});
  CHECK(bv::image::central_box(4, 4, 4, 4) == Box{0, 0, 4, 4});
  CHECK(bv::image::central_box(480, 640, 224, 224) == Box{128, 208, 224, 224});
  std::string msg = error_of([] { bv::image::central_box(4, 8, 5, 9); });
  CHECK(contains(msg, "central_crop"));
  CHECK(contains(msg, "5x9"));
  CHECK(contains(msg, "4x8"));
  CHECK(contains(error_of([] { bv::image::central_box(4, 8, 0, 2); }), "positive"));
}

TEST_CASE("upstream shapes on a 640x480x3 image", "[image][crop]") {
  // big_vision's ops_image_test uses a (640, 480, 3) image.
  at::Tensor img = at::randint(0, 256, {640, 480, 3}, at::kByte);
  bv::Rng rng(0);
  CHECK(bv::image::random_crop(img, 120, 80, rng).sizes() == at::IntArrayRef({120, 80, 3}));
  CHECK(bv::image::central_crop(img, 20, 80).sizes() == at::IntArrayRef({20, 80, 3}));
  CHECK(bv::image::central_crop(img).sizes() == at::IntArrayRef({480, 480, 3}));
  for (int i = 0; i < 20; ++i) {
    Box box = bv::image::sample_inception_box(640, 480, InceptionCropParams{}, rng);
    at::Tensor out = bv::image::crop(img, box);
    CHECK(out.size(2) == 3);
    CHECK(out.dtype() == at::kByte);
  }
}

TEST_CASE("crop returns the source window as a new contiguous tensor", "[image][crop]") {
  at::Tensor img = coded_image(6, 7, 3);
  for (Box box : {Box{0, 0, 6, 7}, Box{1, 2, 3, 4}, Box{5, 6, 1, 1}, Box{0, 3, 6, 2}}) {
    at::Tensor out = bv::image::crop(img, box);
    check_window(out, box, 3);
    CHECK(out.is_contiguous());
  }
  // No aliasing: writing into the crop leaves the source alone, even for the full window.
  at::Tensor full = bv::image::crop(img, Box{0, 0, 6, 7});
  full.fill_(-1);
  CHECK(img[0][0][0].item<int64_t>() == 0);

  // HxW images and other dtypes work the same way.
  at::Tensor gray = at::arange(20, at::kFloat).reshape({4, 5});
  at::Tensor g = bv::image::crop(gray, Box{1, 1, 2, 3});
  CHECK(at::equal(g, gray.slice(0, 1, 3).slice(1, 1, 4)));

  // central_crop and random_crop cut the windows their boxes describe.
  check_window(bv::image::central_crop(img, 3, 3), Box{1, 2, 3, 3}, 3);
  bv::Rng a(7), b(7);
  Box box = bv::image::random_box(6, 7, 2, 3, a);
  check_window(bv::image::random_crop(img, 2, 3, b), box, 3);
}

TEST_CASE("crop errors name the box and the image shape", "[image][crop]") {
  at::Tensor img = coded_image(4, 5, 3);
  std::string msg = error_of([&] { bv::image::crop(img, Box{2, 0, 3, 5}); });
  CHECK(contains(msg, "crop"));
  CHECK(contains(msg, "{y=2, x=0, height=3, width=5}"));
  CHECK(contains(msg, "4x5x3"));
  CHECK(contains(error_of([&] { bv::image::crop(img, Box{0, 1, 4, 5}); }), "4x5x3"));
  CHECK(contains(error_of([&] { bv::image::crop(img, Box{-1, 0, 2, 2}); }), "y=-1"));
  CHECK(contains(error_of([&] { bv::image::crop(img, Box{0, 0, 0, 2}); }), "empty"));
  CHECK(contains(error_of([&] {
                   bv::image::crop(at::zeros({2, 2, 2, 2}), Box{0, 0, 1, 1});
                 }),
                 "2x2x2x2"));
  std::string big = error_of([&] {
    bv::Rng rng(1);
    bv::image::random_crop(img, 5, 2, rng);
  });
  CHECK(contains(big, "random_crop"));
  CHECK(contains(big, "5x2"));
  CHECK(contains(big, "4x5"));
}

TEST_CASE("random_box offsets are uniform on [0, H-h] inclusive and seeded", "[image][crop]") {
  bv::Rng rng(3);
  std::vector<int> seen_y(3, 0), seen_x(2, 0);
  for (int i = 0; i < 600; ++i) {
    Box box = bv::image::random_box(10, 8, 8, 7, rng);
    REQUIRE(box.y >= 0);
    REQUIRE(box.y <= 2);
    REQUIRE(box.x >= 0);
    REQUIRE(box.x <= 1);
    seen_y[box.y]++;
    seen_x[box.x]++;
  }
  for (int n : seen_y) CHECK(n > 150);  // each of 3 values ~200 times
  for (int n : seen_x) CHECK(n > 250);  // each of 2 values ~300 times
  bv::Rng a(11), b(11);
  for (int i = 0; i < 10; ++i) {
    CHECK(bv::image::random_box(100, 90, 10, 20, a) == bv::image::random_box(100, 90, 10, 20, b));
  }
}

TEST_CASE("flip_lr and flip_ud on a 2x3 image", "[image][flip]") {
  at::Tensor img = at::tensor({1, 2, 3, 4, 5, 6}, at::kByte).reshape({2, 3});
  at::Tensor lr = bv::image::flip_lr(img);
  at::Tensor ud = bv::image::flip_ud(img);
  CHECK(at::equal(lr, at::tensor({3, 2, 1, 6, 5, 4}, at::kByte).reshape({2, 3})));
  CHECK(at::equal(ud, at::tensor({4, 5, 6, 1, 2, 3}, at::kByte).reshape({2, 3})));

  // 2x3x2: the channels of a pixel travel together.
  at::Tensor rgb = at::arange(12, at::kLong).reshape({2, 3, 2});
  std::vector<int64_t> want_lr = {4, 5, 2, 3, 0, 1, 10, 11, 8, 9, 6, 7};
  std::vector<int64_t> want_ud = {6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5};
  CHECK(at::equal(bv::image::flip_lr(rgb), at::tensor(want_lr, at::kLong).reshape({2, 3, 2})));
  CHECK(at::equal(bv::image::flip_ud(rgb), at::tensor(want_ud, at::kLong).reshape({2, 3, 2})));
}

TEST_CASE("flips match at::flip for every dtype, channel count and layout", "[image][flip]") {
  for (auto dtype : {at::kByte, at::kFloat, at::kDouble, at::kShort, at::kBFloat16}) {
    for (int64_t c : {1, 2, 3, 4, 5}) {
      at::Tensor img = at::randint(0, 200, {5, 7, c}, at::kLong).to(dtype);
      at::Tensor lr = bv::image::flip_lr(img);
      at::Tensor ud = bv::image::flip_ud(img);
      INFO("dtype " << dtype << " channels " << c);
      CHECK(at::equal(lr, at::flip(img, {1})));
      CHECK(at::equal(ud, at::flip(img, {0})));
      CHECK(lr.is_contiguous());
      CHECK(lr.dtype() == img.dtype());
    }
  }
  // A strided (transposed) input is read through its strides.
  at::Tensor t = at::randint(0, 255, {6, 4, 3}, at::kByte).transpose(0, 1);
  CHECK(!t.is_contiguous());
  CHECK(at::equal(bv::image::flip_lr(t), at::flip(t, {1})));
  CHECK(at::equal(bv::image::flip_ud(t), at::flip(t, {0})));
  CHECK(contains(error_of([] { bv::image::flip_lr(at::zeros({3})); }), "flip_lr"));
}

TEST_CASE("inception box: one attempt traced by hand", "[image][inception]") {
  SECTION("default params, 480x640, ratio 1") {
    // min_area = 0.05*640*480 = 15360, h = rint(sqrt(15360)) = 124; max_area = 307200,
    // rint(sqrt(307200)) = 554 -> capped at H = 480. Height 124 + draw in [0, 356]; draw 100 ->
    // 224 x 224. Offsets: y in [0, 480-224-1], x in [0, 640-224-1] (exclusive upper bounds).
    FakeDraws d;
    d.ratios = {1.0};
    d.ints = {100, 7, 9};
    CHECK(d.run(480, 640, InceptionCropParams{}) == Box{7, 9, 224, 224});
    REQUIRE(d.ratio_calls.size() == 1);
    CHECK(d.ratio_calls[0].first == Approx(0.75));
    CHECK(d.ratio_calls[0].second == Approx(1.33));
    CHECK(d.int_calls == std::vector<std::pair<int64_t, int64_t>>{{0, 356}, {0, 255}, {0, 415}});
  }
  SECTION("a wide ratio caps the height so that the width fits") {
    // 100x100, ratio 2: rint(sqrt(10000/2)) = 71 but rint(71*2) = 142 > 100, so
    // max_height = int((100 + 0.5 - 1e-7)/2) = 50. h = rint(sqrt(500/2)) = 16; draw 34 -> 50,
    // w = 100 = W: no x draw, x = 0.
    FakeDraws d;
    d.ratios = {2.0};
    d.ints = {34, 49};
    CHECK(d.run(100, 100, params_of(0.05, 1.0, 1.5, 2.5)) == Box{49, 0, 50, 100});
    CHECK(d.int_calls == std::vector<std::pair<int64_t, int64_t>>{{0, 34}, {0, 49}});
  }
  SECTION("too small after rounding: one row more") {
    // 10x10, area [0.5, 1], ratio 1: h = rint(sqrt(50)) = 7, 7*7 = 49 < 50 -> 8x8.
    FakeDraws d;
    d.ratios = {1.0};
    d.ints = {0, 1, 0};
    CHECK(d.run(10, 10, params_of(0.5, 1.0, 0.5, 2.0)) == Box{1, 0, 8, 8});
    CHECK(d.int_calls == std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {0, 1}, {0, 1}});
  }
  SECTION("too big after rounding: one row less") {
    // 10x10, area [0.1, 0.4], ratio 1.5: h = rint(sqrt(10/1.5)) = 3,
    // max_height = rint(sqrt(40/1.5)) = 5; draw 2 -> 5, w = rint(7.5) = 8 (half to even),
    // 40 is not > 40, kept. With area_max 0.39 the same draw gives 40 > 39 -> h = 4,
    // w = rint(6) = 6, 24 >= 10.
    FakeDraws a;
    a.ratios = {1.5};
    a.ints = {2, 0, 0};
    CHECK(a.run(10, 10, params_of(0.1, 0.4, 1.0, 2.0)) == Box{0, 0, 5, 8});
    FakeDraws b;
    b.ratios = {1.5};
    b.ints = {2, 3, 2};
    CHECK(b.run(10, 10, params_of(0.1, 0.39, 1.0, 2.0)) == Box{3, 2, 4, 6});
    CHECK(b.int_calls == std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {0, 5}, {0, 3}});
  }
  SECTION("widths round half to even") {
    // 10x10, area [0.1, 1], ratio 0.5: h = rint(sqrt(20)) = 4, max rint(sqrt(200)) = 14 -> 10;
    // draw 1 -> 5, w = rint(2.5) = 2 (not 3), area 10 >= 10.
    FakeDraws d;
    d.ratios = {0.5};
    d.ints = {1, 4, 7};
    CHECK(d.run(10, 10, params_of(0.1, 1.0, 0.5, 1.0)) == Box{4, 7, 5, 2});
    CHECK(d.int_calls == std::vector<std::pair<int64_t, int64_t>>{{0, 6}, {0, 4}, {0, 7}});
  }
  SECTION("a rejected attempt is followed by a fresh one") {
    // 10x10, area [0.5, 0.5]. Ratio 3 first: max_height capped to int(10.5/3) = 3, h = 3,
    // w = 9, area 27 < 50 -> h 4, w 12: area 48 < 50 and 12 > 10, rejected with no int draw.
    // Then ratio 0.5: h = rint(sqrt(100)) = 10 = max height, w = 5, area 50: accepted; y = 0
    // (full height, no draw), x drawn in [0, 4].
    FakeDraws d;
    d.ratios = {3.0, 0.5};
    d.ints = {0};
    CHECK(d.run(10, 10, params_of(0.5, 0.5, 0.5, 3.0)) == Box{0, 0, 10, 5});
    CHECK(d.ratio_calls.size() == 2);
    CHECK(d.int_calls == std::vector<std::pair<int64_t, int64_t>>{{0, 4}});
  }
}

TEST_CASE("inception box falls back to the whole image", "[image][inception]") {
  // A 1x1000 strip: the height is capped at 1, so no box reaches 5% of the area.
  FakeDraws d;
  d.ratios = {1.0};
  InceptionCropParams p;
  p.max_attempts = 7;
  CHECK(d.run(1, 1000, p) == Box{0, 0, 1, 1000});
  CHECK(d.ratio_calls.size() == 7);  // every attempt drew its ratio
  CHECK(d.int_calls.empty());
  bv::Rng rng(5);
  CHECK(bv::image::sample_inception_box(1, 1000, InceptionCropParams{}, rng) == Box{0, 0, 1, 1000});
  // area_min > area_max: TF accepts the arguments but no attempt can succeed.
  CHECK(bv::image::sample_inception_box(50, 60, params_of(0.8, 0.2), rng) == Box{0, 0, 50, 60});
}

TEST_CASE("inception box arguments are checked as TF checks them", "[image][inception]") {
  bv::Rng rng(0);
  auto sample = [&](InceptionCropParams p) { bv::image::sample_inception_box(10, 10, p, rng); };
  CHECK(contains(error_of([&] { sample(params_of(1.5, 1.0)); }), "area range [1.5, 1]"));
  CHECK(contains(error_of([&] { sample(params_of(0.0, 1.0)); }), "(0, 1]"));
  CHECK(contains(error_of([&] { sample(params_of(0.1, 1.0, -1, 1)); }), "aspect ratio"));
  CHECK(contains(error_of([&] { sample(params_of(0.1, 1.0, 2, 1)); }), "reversed"));
  InceptionCropParams zero;
  zero.max_attempts = 0;
  CHECK(contains(error_of([&] { sample(zero); }), "max_attempts"));
  CHECK(contains(error_of([&] { bv::image::sample_inception_box(0, 10, {}, rng); }), "0x10"));
}

TEST_CASE("inception boxes are deterministic per seed", "[image][inception]") {
  bv::Rng a(42), b(42), c(43);
  int differ = 0;
  for (int i = 0; i < 50; ++i) {
    Box ba = bv::image::sample_inception_box(480, 640, InceptionCropParams{}, a);
    Box bb = bv::image::sample_inception_box(480, 640, InceptionCropParams{}, b);
    Box bc = bv::image::sample_inception_box(480, 640, InceptionCropParams{}, c);
    CHECK(ba == bb);
    differ += !(ba == bc);
  }
  CHECK(differ > 40);
}

TEST_CASE("every sampled inception box satisfies TF's constraints", "[image][inception]") {
  struct Case {
    int64_t h, w;
    InceptionCropParams p;
  };
  std::vector<Case> cases = {{480, 640, InceptionCropParams{}},
                             {640, 480, InceptionCropParams{}},
                             {37, 500, InceptionCropParams{}},
                             {224, 224, params_of(0.3, 0.6, 0.5, 2.0)},
                             {13, 17, params_of(0.08, 1.0, 0.75, 1.333)}};
  bv::Rng rng(2024);
  for (const Case& c : cases) {
    INFO("image " << c.h << "x" << c.w);
    const double area = static_cast<double>(c.h * c.w);
    int fallbacks = 0;
    for (int i = 0; i < 3000; ++i) {
      Box b = bv::image::sample_inception_box(c.h, c.w, c.p, rng);
      INFO(bv::image::box_string(b));
      if (b == Box{0, 0, c.h, c.w}) {
        fallbacks++;
        continue;
      }
      // Inside the image, with TF's exclusive offset bound: a box shorter (narrower) than the
      // image never reaches its last row (column).
      REQUIRE(b.height >= 1);
      REQUIRE(b.width >= 1);
      REQUIRE(b.y >= 0);
      REQUIRE(b.x >= 0);
      REQUIRE(b.y + b.height <= c.h);
      REQUIRE(b.x + b.width <= c.w);
      if (b.height < c.h) REQUIRE(b.y + b.height < c.h);
      if (b.width < c.w) REQUIRE(b.x + b.width < c.w);
      // TF rejects any box whose area falls outside the range after its +-1 row adjustments,
      // so the area fraction is within [area_min, area_max] (up to float rounding).
      const double frac = static_cast<double>(b.height * b.width) / area;
      REQUIRE(frac >= c.p.area_min * (1 - 1e-6));
      REQUIRE(frac <= c.p.area_max * (1 + 1e-6));
      // width = rint(height * ratio) with ratio in [min, max): within half a pixel.
      REQUIRE(b.width >= c.p.ratio_min * b.height - 0.5 - 1e-4);
      REQUIRE(b.width <= c.p.ratio_max * b.height + 0.5 + 1e-4);
    }
    // The fallback is rare unless the image is so thin that few boxes fit.
    if (c.h >= 224) CHECK(fallbacks == 0);
  }
}

TEST_CASE("inception boxes: mean area fraction matches TF's distribution", "[image][inception]") {
  // 0.34249 is the exact expectation for a 480x640 image with big_vision's defaults, computed
  // offline (numpy, float32 like TF) by integrating over 200k aspect ratios: for each, every
  // height in [h_min, h_max] equally likely, TF's rounding adjustments and rejections applied.
  // 20000 samples give a standard error of about 0.002.
  bv::Rng rng(9);
  const int n = 20000;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    Box b = bv::image::sample_inception_box(480, 640, InceptionCropParams{}, rng);
    sum += static_cast<double>(b.height * b.width) / (480.0 * 640.0);
  }
  CHECK(sum / n == Approx(0.34249).margin(0.008));
}
