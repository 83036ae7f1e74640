// RandAugment (runtime/image/randaug.h): each op on tiny images against values worked out by
// hand from big_vision's formulas (the float32 ones checked with a small Python model that
// rounds every product and sum to float32, as TF's kernels do), the level -> argument mapping,
// randaug's draws, determinism, and the errors.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "image/randaug.h"
#include "test_util.h"

namespace img = bv::image;
using img::AugmentOp;

using bv::test::contains;
using bv::test::error_of;

namespace {

// An h x w x 3 uint8 image from h*w*3 values, row-major, pixel by pixel.
at::Tensor rgb(int64_t h, int64_t w, const std::vector<int>& values) {
  REQUIRE(static_cast<int64_t>(values.size()) == h * w * 3);
  at::Tensor t = at::empty({h, w, 3}, at::kByte);
  uint8_t* p = t.data_ptr<uint8_t>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<uint8_t>(values[i]);
  return t;
}

// An h x w x 3 image whose channel k at (y, x) is fn(y, x, k).
at::Tensor pattern(int64_t h, int64_t w, const std::function<int(int, int, int)>& fn) {
  at::Tensor t = at::empty({h, w, 3}, at::kByte);
  auto a = t.accessor<uint8_t, 3>();
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < 3; ++k) a[y][x][k] = static_cast<uint8_t>(fn(y, x, k));
  return t;
}

std::vector<int> values(const at::Tensor& t) {
  REQUIRE(t.scalar_type() == at::kByte);
  at::Tensor c = t.contiguous();
  const uint8_t* p = c.data_ptr<uint8_t>();
  return std::vector<int>(p, p + c.numel());
}

// One channel of an image as rows.
std::vector<std::vector<int>> channel(const at::Tensor& t, int k) {
  auto a = t.accessor<uint8_t, 3>();
  std::vector<std::vector<int>> rows(t.size(0), std::vector<int>(t.size(1)));
  for (int64_t y = 0; y < t.size(0); ++y)
    for (int64_t x = 0; x < t.size(1); ++x) rows[y][x] = a[y][x][k];
  return rows;
}

bool same(const at::Tensor& a, const at::Tensor& b) { return at::equal(a, b); }

// A generic image: every channel spans a wide but not full range, nothing is flat.
at::Tensor generic(int64_t h = 6, int64_t w = 7) {
  return pattern(h, w,
                 [](int y, int x, int k) { return (37 * y + 23 * x * x + 11 * k + 5) % 250; });
}

}  // namespace

TEST_CASE("randaug op names follow big_vision's available_ops order", "[randaug]") {
  CHECK(img::augment_op_name(AugmentOp::kAutoContrast) == "AutoContrast");
  CHECK(img::augment_op_name(AugmentOp::kRotate) == "Rotate");
  CHECK(img::augment_op_name(AugmentOp::kColor) == "Color");
  CHECK(img::augment_op_name(AugmentOp::kCutout) == "Cutout");
  CHECK(img::augment_op_name(AugmentOp::kSolarizeAdd) == "SolarizeAdd");
  CHECK(static_cast<int>(AugmentOp::kSolarizeAdd) == 15);
  CHECK(img::augment_op_from_name("ShearX") == AugmentOp::kShearX);
  CHECK(img::augment_op_from_name("shear_x") == AugmentOp::kShearX);
  CHECK(img::augment_op_from_name("solarize_add") == AugmentOp::kSolarizeAdd);
  CHECK(img::augment_op_from_name("AUTOCONTRAST") == AugmentOp::kAutoContrast);
  const std::string msg = error_of([] { img::augment_op_from_name("Sharpen"); });
  CHECK(contains(msg, "'Sharpen'"));
  CHECK(contains(msg, "TranslateY"));
}

TEST_CASE("randaug invert, posterize, solarize, solarize_add", "[randaug]") {
  const at::Tensor in = rgb(1, 2, {0, 127, 128, 129, 200, 255});
  CHECK(values(img::invert(in)) == std::vector<int>{255, 128, 127, 126, 55, 0});

  // bits 4: x & 0xF0; bits 2: x & 0xC0; bits 8: unchanged.
  CHECK(values(img::posterize(in, 4)) == std::vector<int>{0, 112, 128, 128, 192, 240});
  CHECK(values(img::posterize(in, 2)) == std::vector<int>{0, 64, 128, 128, 192, 192});
  CHECK(values(img::posterize(in, 8)) == values(in));
  // bits 0: the shift 8 is clamped to 7 by TF's RightShift/LeftShift kernels on uint8, so the
  // top bit survives (x & 0x80) and the image is not all zeros. bits 1 gives the same.
  const std::vector<int> top_bit = {0, 0, 128, 128, 128, 128};
  CHECK(values(img::posterize(in, 0)) == top_bit);
  CHECK(values(img::posterize(in, 1)) == top_bit);
  // bits 9 (level 22.5): the shift -1 wraps to 255 as a uint8, then clamps to 7.
  CHECK(values(img::posterize(in, 9)) == top_bit);

  // x < thr ? x : 255 - x
  CHECK(values(img::solarize(in, 128)) == std::vector<int>{0, 127, 127, 126, 55, 0});
  CHECK(values(img::solarize(in, 200)) == std::vector<int>{0, 127, 128, 129, 55, 0});
  const std::vector<int> inverted = values(img::invert(in));
  CHECK(values(img::solarize(in, 0)) == inverted);    // nothing is < 0
  CHECK(values(img::solarize(in, 256)) == inverted);  // 256 is 0 as a uint8 (big_vision issue #110)
  CHECK(values(img::solarize(in, 384)) == values(img::solarize(in, 128)));

  // x < 128 ? min(x + add, 255) : x; 0 + 110, 127 + 110 = 237; 128.. unchanged.
  CHECK(values(img::solarize_add(in, 110)) == std::vector<int>{110, 237, 128, 129, 200, 255});
  CHECK(values(img::solarize_add(in, 200)) == std::vector<int>{200, 255, 128, 129, 200, 255});
  CHECK(values(img::solarize_add(in, -50)) == std::vector<int>{0, 77, 128, 129, 200, 255});
  CHECK(values(img::solarize_add(in, 10, 250)) == std::vector<int>{10, 137, 138, 139, 210, 255});
}

TEST_CASE("randaug blend interpolates with truncation, extrapolates with a clip", "[randaug]") {
  const at::Tensor a = rgb(1, 2, {10, 20, 30, 200, 100, 0});
  const at::Tensor b = rgb(1, 2, {20, 21, 0, 100, 255, 255});
  CHECK(values(img::blend(a, b, 0.0)) == values(a));
  CHECK(values(img::blend(a, b, 1.0)) == values(b));
  // 0.5: 10+5=15, 20+0.5=20.5->20, 30-15=15, 200-50=150, 100+77.5=177.5->177, 127.5->127
  CHECK(values(img::blend(a, b, 0.5)) == std::vector<int>{15, 20, 15, 150, 177, 127});
  // 0.3 (float32 0.30000001): 13.0000001->13, 20.3->20, 30-9.0000004 = 20.9999996 -> 21.0 in
  // float32 -> 21, 200-30=170, 100+46.5=146.5->146, 76.5->76
  CHECK(values(img::blend(a, b, 0.3)) == std::vector<int>{13, 20, 21, 170, 146, 76});
  // 1.5: 25, 21.5->21, 30-45=-15->0, 200-150=50, 100+232.5->255, 382.5->255
  CHECK(values(img::blend(a, b, 1.5)) == std::vector<int>{25, 21, 0, 50, 255, 255});
  CHECK(contains(error_of([&] { img::blend(a, rgb(2, 1, values(b)), 0.5); }), "different shapes"));
}

TEST_CASE("randaug autocontrast stretches each channel in float32", "[randaug]") {
  // R {50, 100, 150}: scale = 255/100 = 2.55f, offset = -127.5 (in float32);
  //   50 -> 0, 100 -> 255 - 127.5 = 127.5 -> 127, 150 -> 382.5 - 127.5 = 255.
  // G flat 9: unchanged. B {0, 255, 7}: scale 1, unchanged.
  const at::Tensor in = rgb(1, 3, {50, 9, 0, 100, 9, 255, 150, 9, 7});
  CHECK(values(img::autocontrast(in)) == std::vector<int>{0, 9, 0, 127, 9, 255, 255, 9, 7});
  // R {3, 4, 200}: scale = 255/197 = 1.2944162f; 200 * scale + (-3 * scale) = 254.99998 in
  // float32, which truncates to 254: the maximum does not reach 255.
  const at::Tensor odd = rgb(1, 3, {3, 0, 0, 4, 0, 0, 200, 0, 0});
  CHECK(channel(img::autocontrast(odd), 0) == std::vector<std::vector<int>>{{0, 1, 254}});
}

TEST_CASE("randaug equalize builds PIL's lookup table per channel", "[randaug]") {
  // 32x32 = 1024 pixels, pixel i = 32 y + x.
  //   R: 600 pixels of 10, 300 of 20, 124 of 30. step = (1024 - 124) // 255 = 3, step // 2 = 1;
  //      lut[10] = (0 + 1) // 3 = 0, lut[20] = (600 + 1) // 3 = 200,
  //      lut[30] = (900 + 1) // 3 = 300 -> 255.
  //   G: all 77: step = (1024 - 1024) // 255 = 0 -> unchanged.
  //   B: 256 of 100, 256 of 101, 512 of 102: step = 512 // 255 = 2, step // 2 = 1;
  //      lut[100] = 1 // 2 = 0, lut[101] = 257 // 2 = 128, lut[102] = 513 // 2 = 256 -> 255.
  const at::Tensor in = pattern(32, 32, [](int y, int x, int k) {
    const int i = 32 * y + x;
    if (k == 0) return i < 600 ? 10 : i < 900 ? 20 : 30;
    if (k == 1) return 77;
    return i < 256 ? 100 : i < 512 ? 101 : 102;
  });
  const at::Tensor out = img::equalize(in);
  auto a = out.accessor<uint8_t, 3>();
  for (int i = 0; i < 1024; ++i) {
    const int y = i / 32, x = i % 32;
    INFO("pixel " << i);
    REQUIRE(a[y][x][0] == (i < 600 ? 0 : i < 900 ? 200 : 255));
    REQUIRE(a[y][x][1] == 77);
    REQUIRE(a[y][x][2] == (i < 256 ? 0 : i < 512 ? 128 : 255));
  }
  // Fewer than 256 pixels give step 0 for every channel: equalize is the identity there.
  const at::Tensor small = generic(4, 4);
  CHECK(same(img::equalize(small), small));
}

TEST_CASE("randaug grayscale, color and brightness", "[randaug]") {
  // gray = trunc(255.5 * (0.2989 r + 0.587 g + 0.114 b) / 255) in float32:
  //   (255, 0, 0) -> 0.2989 * 255.5 = 76.37 -> 76; (0, 255, 0) -> 149.98 -> 149;
  //   (0, 0, 255) -> 29.13 -> 29; (100, 150, 200) -> 0.55192 * 255.5 = 141.02 -> 141.
  const at::Tensor in = rgb(1, 4, {255, 0, 0, 0, 255, 0, 0, 0, 255, 100, 150, 200});
  CHECK(values(img::grayscale(in)) ==
        std::vector<int>{76, 76, 76, 149, 149, 149, 29, 29, 29, 141, 141, 141});
  // color = blend(gray, img, f). f = 0.1 (level 0): 76 + 0.1 * 179 = 93.9 -> 93,
  // 76 - 7.6 = 68.4 -> 68; ... f = 1.9 (level 10): 100 -> 141 + 1.9 * (100 - 141) = 63.1 -> 63.
  CHECK(values(img::color(in, 0.1)) ==
        std::vector<int>{93, 68, 68, 134, 159, 134, 26, 26, 51, 136, 141, 146});
  CHECK(values(img::color(in, 1.9)) ==
        std::vector<int>{255, 0, 0, 0, 255, 0, 0, 0, 255, 63, 158, 253});
  CHECK(same(img::color(in, 1.0), in));
  // brightness = blend(0, img, f): f = 0.1 truncates 0.1 x; 1.9 clips.
  const at::Tensor b = rgb(1, 2, {10, 30, 99, 255, 0, 1});
  CHECK(values(img::brightness(b, 0.1)) == std::vector<int>{1, 3, 9, 25, 0, 0});
  CHECK(values(img::brightness(b, 1.9)) == std::vector<int>{19, 57, 188, 255, 0, 1});
  CHECK(values(img::brightness(b, 0.0)) == std::vector<int>(6, 0));
}

TEST_CASE("randaug contrast blends with (H*W)/256, or the mean grey when fixed", "[randaug]") {
  // 16x80 = 1280 pixels -> big_vision's "mean" is 1280 / 256 = 5, whatever the pixels are.
  // A flat 100 image: 5 + 0.5 * (100 - 5) = 52.5 -> 52. Fixed: the grey mean is 100
  // (gray(100, 100, 100) = 100), so the image is unchanged.
  const at::Tensor flat = at::full({16, 80, 3}, 100, at::kByte);
  CHECK(values(img::contrast(flat, 0.5)) == std::vector<int>(16 * 80 * 3, 52));
  CHECK(same(img::contrast(flat, 0.5, true), flat));
  // 4x4: 16 / 256 = 0.0625 -> 0, so contrast is brightness on small images.
  const at::Tensor small = generic(4, 4);
  CHECK(same(img::contrast(small, 0.3), img::brightness(small, 0.3)));

  // big_vision issue #109's calibration: (192, 64, 64) and (64, 192, 192) halves of a 224x224
  // image, factor 1.9. Bug: mean 224 * 224 / 256 = 196: 196 + 1.9 * (192 - 196) = 188.4 -> 188,
  // 196 + 1.9 * (64 - 196) < 0 -> 0, i.e. (188, 0, 0) and (0, 188, 188) as reported there.
  // Fixed: greys 102 and 154, mean 128: 128 + 1.9 * 64 = 249.6 -> 249, 128 - 121.6 = 6.4 -> 6,
  // i.e. (249, 6, 6) and (6, 249, 249), the numbers after the fix.
  const at::Tensor tiles = pattern(224, 224, [](int y, int x, int k) {
    const bool red = x < 112;
    return (k == 0) == red ? 192 : 64;
  });
  const at::Tensor bug = img::contrast(tiles, 1.9);
  const at::Tensor fixed = img::contrast(tiles, 1.9, true);
  auto a = bug.accessor<uint8_t, 3>();
  auto f = fixed.accessor<uint8_t, 3>();
  CHECK(std::vector<int>{a[7][3][0], a[7][3][1], a[7][3][2]} == std::vector<int>{188, 0, 0});
  CHECK(std::vector<int>{a[200][150][0], a[200][150][1], a[200][150][2]} ==
        std::vector<int>{0, 188, 188});
  CHECK(std::vector<int>{f[7][3][0], f[7][3][1], f[7][3][2]} == std::vector<int>{249, 6, 6});
  CHECK(std::vector<int>{f[200][150][0], f[200][150][1], f[200][150][2]} ==
        std::vector<int>{6, 249, 249});
}

TEST_CASE("randaug sharpness smooths the interior, keeps the border", "[randaug]") {
  // 3x3, 13 around a 0 centre: smoothed centre = 8 * 13 / 13 = 8. Blend(smooth, img, f):
  // f = 0.1: 8 + 0.1 * (0 - 8) = 7.2 -> 7; f = 1.9: 8 - 15.2 -> 0. The border stays 13.
  const at::Tensor ring =
      pattern(3, 3, [](int y, int x, int) { return y == 1 && x == 1 ? 0 : 13; });
  CHECK(channel(img::sharpness(ring, 0.1), 2) ==
        std::vector<std::vector<int>>{{13, 13, 13}, {13, 7, 13}, {13, 13, 13}});
  CHECK(channel(img::sharpness(ring, 1.9), 0) ==
        std::vector<std::vector<int>>{{13, 13, 13}, {13, 0, 13}, {13, 13, 13}});

  // 4x5, v = (37 y + 23 x^2 + 11 x y) % 256 in every channel. Smoothed interior (float32):
  //   (1,1): (0 + 23 + 92 + 37 + 5*71 + 151 + 74 + 119 + 210) / 13 = 1061 / 13 = 81.6 -> 81
  //   row 1: 81, 122, 90; row 2: 109, 141, 101.
  // f = 0.55 at (1,1): 81 + 0.55 * (71 - 81) = 75.5 -> 75; f = 1.9 at (1,3): 90 + 1.9 * (21 - 90)
  // < 0 -> 0. The border rows and columns are the input's.
  const at::Tensor in =
      pattern(4, 5, [](int y, int x, int) { return (37 * y + 23 * x * x + 11 * x * y) % 256; });
  using Rows = std::vector<std::vector<int>>;
  const Rows input = {{0, 23, 92, 207, 112},
                      {37, 71, 151, 21, 193},
                      {74, 119, 210, 91, 18},
                      {111, 167, 13, 161, 99}};
  REQUIRE(channel(in, 0) == input);
  CHECK(channel(img::sharpness(in, 0.0), 1) == Rows{{0, 23, 92, 207, 112},
                                                    {37, 81, 122, 90, 193},
                                                    {74, 109, 141, 101, 18},
                                                    {111, 167, 13, 161, 99}});
  CHECK(channel(img::sharpness(in, 0.55), 0) == Rows{{0, 23, 92, 207, 112},
                                                     {37, 75, 137, 52, 193},
                                                     {74, 114, 178, 95, 18},
                                                     {111, 167, 13, 161, 99}});
  CHECK(channel(img::sharpness(in, 1.9), 2) == Rows{{0, 23, 92, 207, 112},
                                                    {37, 62, 177, 0, 193},
                                                    {74, 128, 255, 82, 18},
                                                    {111, 167, 13, 161, 99}});
  CHECK(same(img::sharpness(in, 1.0), in));
  // Accumulating nine float32 products of a flat 3 gives 2.9999998, which truncates to 2: our
  // model of TF's float32 depthwise conv (row-major, no FMA) keeps that quirk.
  const at::Tensor threes = at::full({3, 3, 3}, 3, at::kByte);
  CHECK(channel(img::sharpness(threes, 0.0), 0)[1][1] == 2);
  // Thinner than 3 pixels: no interior, nothing changes.
  CHECK(same(img::sharpness(generic(2, 5), 1.9), generic(2, 5)));
}

TEST_CASE("randaug rotate by 90 degrees: tfa's nearest rotation about the centre", "[randaug]") {
  // Square 4x4: c = cos(pi/2) ~ -4e-8, s = 1, offsets (3, 0): output (y, x) reads input
  // (row x, column 3 - y), a counterclockwise quarter turn with nothing to fill.
  const at::Tensor sq = pattern(4, 4, [](int y, int x, int k) { return 10 * y + x + 50 * k; });
  const at::Tensor turned = img::rotate(sq, 90.0);
  auto a = turned.accessor<uint8_t, 3>();
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x)
      for (int k = 0; k < 3; ++k) REQUIRE(a[y][x][k] == 10 * x + (3 - y) + 50 * k);
  CHECK(same(img::rotate(sq, 0.0), sq));

  // 3 rows x 5 columns: offsets x_off = (4 - (0 - 2)) / 2 = 3, y_off = (2 - (4 + 0)) / 2 = -1,
  // so output (y, x) reads input (row x - 1, column 3 - y): columns 0 and 4 have no source and
  // get the fill; the middle columns hold input columns 3, 2, 1 turned counterclockwise.
  const at::Tensor wide = pattern(3, 5, [](int y, int x, int k) { return 10 * y + x + 50 * k; });
  using Rows = std::vector<std::vector<int>>;
  CHECK(channel(img::rotate(wide, 90.0), 0) ==
        Rows{{128, 3, 13, 23, 128}, {128, 2, 12, 22, 128}, {128, 1, 11, 21, 128}});
  CHECK(channel(img::rotate(wide, 90.0, 7), 1) ==
        Rows{{7, 53, 63, 73, 7}, {7, 52, 62, 72, 7}, {7, 51, 61, 71, 7}});
  // -90: x_off = 1, y_off = 3; output (y, x) reads (row 3 - x, column y + 1), clockwise.
  CHECK(channel(img::rotate(wide, -90.0), 0) ==
        Rows{{128, 21, 11, 1, 128}, {128, 22, 12, 2, 128}, {128, 23, 13, 3, 128}});
}

TEST_CASE("randaug shear and translate fill the uncovered pixels with 128", "[randaug]") {
  const at::Tensor in = pattern(4, 4, [](int y, int x, int k) { return 10 * y + x + 50 * k; });
  using Rows = std::vector<std::vector<int>>;
  // shear_x(0.5): row y reads columns round(x + 0.5 y), half away from zero:
  //   y=1, 2: x + 1 (round(x + 0.5) = x + 1); y=3: x + 2.
  CHECK(channel(img::shear_x(in, 0.5), 0) ==
        Rows{{0, 1, 2, 3}, {11, 12, 13, 128}, {21, 22, 23, 128}, {32, 33, 128, 128}});
  // shear_x(-0.5): y=1 reads round(x - 0.5) = -1, 1, 2, 3 (away from zero: -0.5 -> -1);
  //   y=2: x - 1; y=3: round(x - 1.5) = -2, -1, 1, 2.
  CHECK(channel(img::shear_x(in, -0.5), 0) ==
        Rows{{0, 1, 2, 3}, {128, 11, 12, 13}, {128, 20, 21, 22}, {128, 128, 31, 32}});
  // shear_y(0.5): column x reads rows round(y + 0.5 x): column 0 rows y, columns 1 and 2
  // rows y + 1, column 3 rows y + 2.
  CHECK(channel(img::shear_y(in, 0.5), 0) ==
        Rows{{0, 11, 12, 23}, {10, 21, 22, 33}, {20, 31, 32, 128}, {30, 128, 128, 128}});
  // translate_x(1): reads x + 1, content moves left; translate_x(-2): the first two columns fill.
  CHECK(
      channel(img::translate_x(in, 1.0), 2) ==
      Rows{{101, 102, 103, 128}, {111, 112, 113, 128}, {121, 122, 123, 128}, {131, 132, 133, 128}});
  CHECK(channel(img::translate_x(in, -2.0), 0) ==
        Rows{{128, 128, 0, 1}, {128, 128, 10, 11}, {128, 128, 20, 21}, {128, 128, 30, 31}});
  // -0.5 px: round(x - 0.5) is -1 for x = 0 and x otherwise: only column 0 fills.
  CHECK(channel(img::translate_x(in, -0.5), 0) ==
        Rows{{128, 1, 2, 3}, {128, 11, 12, 13}, {128, 21, 22, 23}, {128, 31, 32, 33}});
  // translate_y(1.5): reads row round(y + 1.5) = y + 2.
  CHECK(channel(img::translate_y(in, 1.5), 0) ==
        Rows{{20, 21, 22, 23}, {30, 31, 32, 33}, {128, 128, 128, 128}, {128, 128, 128, 128}});
  CHECK(same(img::translate_y(in, 0.0), in));
  CHECK(same(img::shear_x(in, 0.0), in));
  // Every pixel of a shifted-out image is the fill, in every channel.
  CHECK(values(img::translate_y(in, 100.0, 9)) == std::vector<int>(48, 9));
  CHECK(contains(error_of([&] { img::translate_x(in, 1.0, 256); }), "fill value 256"));
}

TEST_CASE("randaug cutout fills a square clipped to the image", "[randaug]") {
  const at::Tensor in = pattern(4, 4, [](int y, int x, int k) { return 10 * y + x + 50 * k; });
  using Rows = std::vector<std::vector<int>>;
  // pad 1 at (0, 3): rows [-1, 1) -> [0, 1), columns [2, 4).
  CHECK(channel(img::cutout(in, 1, 0, 3), 0) ==
        Rows{{0, 1, 128, 128}, {10, 11, 12, 13}, {20, 21, 22, 23}, {30, 31, 32, 33}});
  // pad 2 at (1, 1): rows [-1, 3) -> [0, 3), columns [-1, 3) -> [0, 3).
  CHECK(channel(img::cutout(in, 2, 1, 1, 0), 1) ==
        Rows{{0, 0, 0, 53}, {0, 0, 0, 63}, {0, 0, 0, 73}, {80, 81, 82, 83}});
  CHECK(same(img::cutout(in, 0, 2, 2), in));  // pad 0: an empty square
  CHECK(values(img::cutout(in, 40, 3, 0)) == std::vector<int>(48, 128));
  CHECK(contains(error_of([&] { img::cutout(in, 1, 4, 0); }), "outside the 4x4 image"));
  CHECK(contains(error_of([&] { img::cutout(in, -1, 0, 0); }), "pad -1"));
}

TEST_CASE("randaug augment maps levels to big_vision's arguments", "[randaug]") {
  const at::Tensor in = generic();
  bv::Rng rng(3);
  auto at_level = [&](AugmentOp op, double level) { return img::augment(in, op, level, &rng); };
  // Posterize: bits = int(M / 10 * 4): level 5 -> 2, level 10 -> 4, level 0 -> 0 (x & 128).
  CHECK(same(at_level(AugmentOp::kPosterize, 5), img::posterize(in, 2)));
  CHECK(same(at_level(AugmentOp::kPosterize, 10), img::posterize(in, 4)));
  CHECK(same(at_level(AugmentOp::kPosterize, 0), img::posterize(in, 0)));
  // Solarize: int(M / 10 * 256): level 0 and 10 (256 = 0) invert, level 5 -> 128, 3 -> 76.
  CHECK(same(at_level(AugmentOp::kSolarize, 0), img::invert(in)));
  CHECK(same(at_level(AugmentOp::kSolarize, 10), img::invert(in)));
  CHECK(same(at_level(AugmentOp::kSolarize, 5), img::solarize(in, 128)));
  CHECK(same(at_level(AugmentOp::kSolarize, 3), img::solarize(in, 76)));
  // SolarizeAdd: int(M / 10 * 110): level 10 -> 110, level 0 -> 0 (identity).
  CHECK(same(at_level(AugmentOp::kSolarizeAdd, 10), img::solarize_add(in, 110)));
  CHECK(same(at_level(AugmentOp::kSolarizeAdd, 0), in));
  // Enhancers: f = M / 10 * 1.8 + 0.1: level 0 -> 0.1, level 5 -> 1.0 (identity), 10 -> 1.9.
  CHECK(same(at_level(AugmentOp::kColor, 0), img::color(in, 0.1)));
  CHECK(same(at_level(AugmentOp::kColor, 5), in));
  CHECK(same(at_level(AugmentOp::kBrightness, 10), img::brightness(in, 1.9)));
  CHECK(same(at_level(AugmentOp::kSharpness, 2.5), img::sharpness(in, 0.55)));
  CHECK(same(at_level(AugmentOp::kContrast, 10), img::contrast(in, 1.9)));
  CHECK(same(img::augment(in, AugmentOp::kContrast, 10, nullptr, true),
             img::contrast(in, 1.9, true)));
  CHECK(!same(img::contrast(in, 1.9), img::contrast(in, 1.9, true)));

  // Signed ops: the argument is negated when rng.uniform() < 0.5, drawn once per call.
  auto signed_arg = [](uint64_t seed, double v) {
    bv::Rng r(seed);
    return r.uniform() < 0.5 ? -v : v;
  };
  for (uint64_t seed = 0; seed < 6; ++seed) {
    bv::Rng r(seed);
    INFO("seed " << seed);
    CHECK(
        same(img::augment(in, AugmentOp::kRotate, 10, &r), img::rotate(in, signed_arg(seed, 30))));
    r = bv::Rng(seed);
    CHECK(same(img::augment(in, AugmentOp::kShearX, 10, &r),
               img::shear_x(in, signed_arg(seed, 0.3))));
    r = bv::Rng(seed);
    CHECK(same(img::augment(in, AugmentOp::kShearY, 5, &r),
               img::shear_y(in, signed_arg(seed, 0.15))));
    r = bv::Rng(seed);
    CHECK(same(img::augment(in, AugmentOp::kTranslateX, 0.3, &r),
               img::translate_x(in, signed_arg(seed, 3))));
    r = bv::Rng(seed);
    CHECK(same(img::augment(in, AugmentOp::kTranslateY, 0.2, &r),
               img::translate_y(in, signed_arg(seed, 2))));
    // Cutout: pad = int(M / 10 * 40) = 4 at level 1; the centre row then column.
    r = bv::Rng(seed);
    bv::Rng c(seed);
    const int64_t cy = c.integer(0, in.size(0) - 1), cx = c.integer(0, in.size(1) - 1);
    CHECK(same(img::augment(in, AugmentOp::kCutout, 1, &r), img::cutout(in, 4, cy, cx)));
  }
  bool both_signs[2] = {false, false};
  for (uint64_t seed = 0; seed < 20; ++seed) both_signs[signed_arg(seed, 1) > 0] = true;
  CHECK((both_signs[0] && both_signs[1]));

  CHECK(contains(error_of([&] { img::augment(in, AugmentOp::kRotate, 5, nullptr); }),
                 "needs an rng"));
  CHECK(contains(error_of([&] { img::augment(in, AugmentOp::kCutout, 5, nullptr); }),
                 "needs an rng"));
  CHECK(
      contains(error_of([&] { img::augment(in, AugmentOp::kInvert, -1, &rng); }), "magnitude -1"));
}

TEST_CASE("randaug at level 0 only geometric ops and SolarizeAdd are identities", "[randaug]") {
  // 400 pixels, so that equalize's step is not 0; no channel spans 0..255 (autocontrast acts).
  const at::Tensor in = generic(20, 20);
  for (int i = 0; i < img::kNumAugmentOps; ++i) {
    const auto op = static_cast<AugmentOp>(i);
    bv::Rng rng(11);
    const bool identity = op == AugmentOp::kRotate || op == AugmentOp::kShearX ||
                          op == AugmentOp::kShearY || op == AugmentOp::kTranslateX ||
                          op == AugmentOp::kTranslateY || op == AugmentOp::kCutout ||
                          op == AugmentOp::kSolarizeAdd;
    INFO(img::augment_op_name(op));
    CHECK(same(img::augment(in, op, 0, &rng), in) == identity);
  }
}

TEST_CASE("randaug draws an op per layer, then that op's draws", "[randaug]") {
  const at::Tensor in = generic(9, 11);
  for (uint64_t seed = 0; seed < 30; ++seed) {
    INFO("seed " << seed);
    bv::Rng a(seed), b(seed);
    const at::Tensor got = img::randaug(in, 2, 9, a);
    at::Tensor want = in;
    for (int layer = 0; layer < 2; ++layer) {
      const auto op = static_cast<AugmentOp>(b.integer(0, 15));
      want = img::augment(want, op, 9, &b);
    }
    REQUIRE(same(got, want));
    REQUIRE(a.next_u64() == b.next_u64());  // both streams used up the same draws
  }
}

TEST_CASE("randaug is deterministic per seed, keeps shape and dtype", "[randaug]") {
  const at::Tensor in = generic(12, 10);
  const at::Tensor before = in.clone();
  bv::Rng r1(42), r2(42);
  const at::Tensor a = img::randaug(in, 3, 10, r1);
  const at::Tensor b = img::randaug(in, 3, 10, r2);
  CHECK(same(a, b));
  CHECK(a.sizes() == in.sizes());
  CHECK(a.scalar_type() == at::kByte);
  CHECK(same(in, before));  // the input is left alone
  int differ = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    bv::Rng r(seed);
    differ += !same(img::randaug(in, 3, 10, r), a);
  }
  CHECK(differ >= 5);
  // Zero layers: an unchanged copy, no draws.
  bv::Rng r3(5), r4(5);
  const at::Tensor none = img::randaug(in, 0, 10, r3);
  CHECK(same(none, in));
  CHECK(none.data_ptr() != in.data_ptr());
  CHECK(r3.next_u64() == r4.next_u64());
  // A non-contiguous input (a transposed view) is read correctly.
  const at::Tensor view = generic(10, 12).transpose(0, 1);
  bv::Rng r5(8), r6(8);
  CHECK(same(img::randaug(view, 2, 7, r5), img::randaug(view.contiguous(), 2, 7, r6)));
}

TEST_CASE("randaug(2, 0) is not the identity: level-0 ops can be destructive", "[randaug]") {
  // big_vision's light1 preset. Posterize (x & 128), Solarize (inversion), Invert and the
  // factor-0.1 enhancers all change the image at level 0.
  const at::Tensor in = generic(8, 8);
  int changed = 0, kept = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    bv::Rng rng(seed);
    (same(img::randaug(in, 2, 0, rng), in) ? kept : changed) += 1;
  }
  CHECK(changed > 0);
  CHECK(kept > 0);  // two identity ops (Rotate 0, Cutout 0, ...) in a row happen too
}

TEST_CASE("randaug ops reject other shapes and dtypes, naming them", "[randaug]") {
  bv::Rng rng(0);
  const std::string f32 = error_of([&] { img::randaug(at::zeros({4, 4, 3}), 2, 10, rng); });
  CHECK(contains(f32, "randaug: expected a uint8 HxWx3 image"));
  CHECK(contains(f32, "[4x4x3] float32"));
  const std::string hw = error_of([&] { img::randaug(at::zeros({4, 4}, at::kByte), 2, 10, rng); });
  CHECK(contains(hw, "[4x4] uint8"));
  const std::string rgba = error_of([&] { img::posterize(at::zeros({2, 3, 4}, at::kByte), 4); });
  CHECK(contains(rgba, "posterize: expected a uint8 HxWx3 image, got [2x3x4] uint8"));
  CHECK(contains(error_of([&] { img::equalize(at::zeros({0, 3, 3}, at::kByte)); }), "empty"));
  CHECK(contains(error_of([&] { img::randaug(generic(), -1, 10, rng); }), "num_layers -1"));
  CHECK(contains(error_of([&] { img::randaug(generic(), 2, -3, rng); }), "magnitude -3"));
  CHECK(contains(error_of([&] { img::randaug(generic(), 2, NAN, rng); }), "magnitude nan"));
}

TEST_CASE("randaug on a 224x224 image takes about a millisecond", "[randaug][.timing]") {
  // Hidden from the default run ([.timing]): a rough figure for the report, not a pass/fail.
  const at::Tensor in =
      pattern(224, 224, [](int y, int x, int k) { return (y * 7 + x * 3 + k) % 256; });
  bv::Rng rng(0);
  const int reps = 200;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) img::randaug(in, 2, 10, rng);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  WARN("randaug(2, 10) on 224x224: " << ms / reps << " ms per image");
  CHECK(ms / reps < 5.0);
}
