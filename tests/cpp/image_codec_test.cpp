// Image codecs (runtime/image/codec.h) and draw_line (runtime/image/draw.h): round trips,
// channel conversions, the PNG colour types TF's decoder converts, JPEG IDCT choices, and the
// errors (unknown format, truncation, pixel cap, bad tensors). Test PNGs of unusual colour
// types are assembled here chunk by chunk (zlib + crc32), so each byte of input is known.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <png.h>
#include <turbojpeg.h>
#include <zlib.h>

#include <cmath>
#include <csetjmp>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "image/codec.h"
#include "image/draw.h"
#include "test_util.h"

namespace img = bv::image;

using bv::test::contains;
using bv::test::error_of;

namespace {

// A photo-like uint8 HxWxC image: smooth waves (different per channel) plus a sharp-edged
// block, so JPEG has both easy and hard areas.
at::Tensor test_image(int64_t h, int64_t w, int64_t c) {
  auto y = at::arange(h, at::kFloat).view({h, 1, 1});
  auto x = at::arange(w, at::kFloat).view({1, w, 1});
  auto ch = at::arange(c, at::kFloat).view({1, 1, c});
  auto v = 128 + 90 * at::sin(x * 0.11 + ch * 1.3) * at::cos(y * 0.07 - ch * 0.5);
  v = v.clone();
  v.slice(0, h / 4, h / 2).slice(1, w / 3, w / 2).fill_(240);
  return v.round().clamp(0, 255).to(at::kByte).contiguous();
}

double mean_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().mean().item<double>();
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string chunk(const std::string& type, const std::string& data) {
  std::string body = type + data;
  uint32_t crc = crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size());
  return be32(data.size()) + body + be32(crc);
}

// A PNG from raw (unfiltered) rows; `extra` chunks (PLTE, tRNS) go before IDAT.
std::string raw_png(uint32_t w, uint32_t h, int depth, int color_type,
                    const std::vector<std::string>& rows, const std::string& extra = "") {
  std::string ihdr = be32(w) + be32(h) +
                     std::string{static_cast<char>(depth), static_cast<char>(color_type), 0, 0, 0};
  std::string scanlines;
  for (const auto& row : rows) scanlines += std::string(1, '\0') + row;  // filter type 0
  uLongf n = compressBound(scanlines.size());
  std::string z(n, '\0');
  compress(reinterpret_cast<Bytef*>(&z[0]), &n, reinterpret_cast<const Bytef*>(scanlines.data()),
           scanlines.size());
  z.resize(n);
  return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + extra + chunk("IDAT", z) +
         chunk("IEND", "");
}

std::string bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s += static_cast<char>(b);
  return s;
}

// An Adam7-interlaced RGB PNG of `t` written with libpng itself.
void on_png_error(png_structp png, png_const_charp) { std::longjmp(png_jmpbuf(png), 1); }
void append_png(png_structp png, png_bytep data, png_size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<char*>(data), n);
}
void no_flush(png_structp) {}
bool write_interlaced(png_structp png, png_infop info, png_bytepp rows, int h, int w) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_ADAM7,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_set_interlace_handling(png);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  return true;
}
std::string interlaced_png(const at::Tensor& t) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, on_png_error, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, append_png, no_flush);
  std::vector<png_bytep> rows(t.size(0));
  for (int64_t y = 0; y < t.size(0); ++y) rows[y] = t[y].data_ptr<uint8_t>();
  bool ok = write_interlaced(png, info, rows.data(), t.size(0), t.size(1));
  png_destroy_write_struct(&png, &info);
  REQUIRE(ok);
  return out;
}

// Offset of the JPEG SOF0 marker's height field.
size_t sof_dims_offset(const std::string& jpeg) {
  size_t at = jpeg.find("\xFF\xC0", 2);
  REQUIRE(at != std::string::npos);
  return at + 5;
}

}  // namespace

TEST_CASE("sniff_format reads the magic bytes", "[codec]") {
  auto rgb = test_image(8, 8, 3);
  CHECK(img::sniff_format(img::encode_png(rgb)) == "png");
  CHECK(img::sniff_format(img::encode_jpeg(rgb)) == "jpeg");
  CHECK(img::sniff_format("GIF89a") == "");
  CHECK(img::sniff_format("") == "");
}

TEST_CASE("PNG round trips are bit-exact for 1 to 4 channels", "[codec][png]") {
  for (int c = 1; c <= 4; ++c) {
    auto t = test_image(13, 17, c);
    std::string png = img::encode_png(t);
    CHECK(img::decode(png, c).equal(t));
    CHECK(img::decode(png, 0).equal(t));  // 0: the file's own channels
    CHECK(img::peek(png).channels == c);
  }
  // HxW is grey: it decodes to HxWx1 with the same values.
  auto grey = test_image(9, 11, 1).squeeze(2);
  CHECK(img::decode(img::encode_png(grey), 1).equal(grey.unsqueeze(2)));
  // Every zlib level gives the same pixels.
  auto t = test_image(20, 30, 3);
  for (int level : {0, 1, 9}) CHECK(img::decode(img::encode_png(t, level)).equal(t));
  CHECK(img::encode_png(t, 1).size() > img::encode_png(t, 9).size());
  CHECK(contains(error_of([&] { img::encode_png(t, 10); }), "compression must be"));
}

TEST_CASE("PNG channel conversions follow tf.io.decode_image", "[codec][png]") {
  auto rgb = test_image(10, 12, 3);
  auto rgba = test_image(10, 12, 4);
  auto grey = test_image(10, 12, 1);

  SECTION("grey -> RGB replicates, grey -> RGBA adds 255") {
    auto out = img::decode(img::encode_png(grey), 3);
    REQUIRE(out.sizes() == at::IntArrayRef({10, 12, 3}));
    for (int c = 0; c < 3; ++c) CHECK(out.select(2, c).equal(grey.select(2, 0)));
    auto out4 = img::decode(img::encode_png(grey), 4);
    CHECK(out4.slice(2, 0, 3).equal(out));
    CHECK(out4.select(2, 3).eq(255).all().item<bool>());
  }
  SECTION("RGBA -> RGB drops alpha (no compositing)") {
    CHECK(img::decode(img::encode_png(rgba), 3).equal(rgba.slice(2, 0, 3)));
    auto ga = img::decode(img::encode_png(rgba), 2);  // grey + the same alpha
    CHECK(ga.select(2, 1).equal(rgba.select(2, 3)));
  }
  SECTION("RGB -> RGBA adds alpha 255") {
    auto out = img::decode(img::encode_png(rgb), 4);
    CHECK(out.slice(2, 0, 3).equal(rgb));
    CHECK(out.select(2, 3).eq(255).all().item<bool>());
  }
  SECTION("RGB -> grey uses libpng's 0.299 / 0.587 / 0.114, as TF's PNG decoder") {
    auto out = img::decode(img::encode_png(rgb), 1);
    REQUIRE(out.sizes() == at::IntArrayRef({10, 12, 1}));
    auto f = rgb.to(at::kFloat);
    auto want = f.select(2, 0) * 0.299 + f.select(2, 1) * 0.587 + f.select(2, 2) * 0.114;
    // libpng works in 15-bit fixed point: within one level of the real-valued formula.
    CHECK((out.select(2, 0).to(at::kFloat) - want).abs().max().item<float>() <= 1.01f);
  }
}

TEST_CASE("PNG colour types: palette, tRNS, 16 bits, low bit depths, interlacing", "[codec][png]") {
  SECTION("palette with tRNS -> RGBA; palette entries past tRNS are opaque") {
    std::string plte = chunk("PLTE", bytes({255, 0, 0, 0, 255, 0, 0, 0, 255}));
    std::string trns = chunk("tRNS", bytes({10, 20}));  // alpha of entries 0 and 1 only
    std::string png = raw_png(3, 1, 8, PNG_COLOR_TYPE_PALETTE, {bytes({0, 1, 2})}, plte + trns);
    CHECK(img::peek(png).channels == 4);
    auto own = img::decode(png, 0);
    auto want =
        at::tensor({255, 0, 0, 10, 0, 255, 0, 20, 0, 0, 255, 255}, at::kByte).view({1, 3, 4});
    CHECK(own.equal(want));
    CHECK(img::decode(png, 3).equal(want.slice(2, 0, 3)));
    // Without tRNS a palette image is RGB.
    std::string plain = raw_png(3, 1, 8, PNG_COLOR_TYPE_PALETTE, {bytes({2, 1, 0})}, plte);
    CHECK(img::peek(plain).channels == 3);
    CHECK(img::decode(plain, 0).equal(
        at::tensor({0, 0, 255, 0, 255, 0, 255, 0, 0}, at::kByte).view({1, 3, 3})));
  }
  SECTION("16-bit RGB keeps the high byte (png_set_strip_16, as TF)") {
    std::string png =
        raw_png(2, 1, 16, PNG_COLOR_TYPE_RGB,
                {bytes({0x12, 0x34, 0xAB, 0xFF, 0x00, 0x80, 0xFF, 0xFF, 0x01, 0x00, 0x7F, 0xFF})});
    CHECK(img::decode(png, 3).equal(
        at::tensor({0x12, 0xAB, 0x00, 0xFF, 0x01, 0x7F}, at::kByte).view({1, 2, 3})));
  }
  SECTION("1-bit grey expands to 0 / 255; grey tRNS becomes alpha only when asked") {
    std::string trns = chunk("tRNS", bytes({0, 1}));  // grey value 1 is transparent
    std::string png = raw_png(4, 1, 1, PNG_COLOR_TYPE_GRAY, {bytes({0xA0})}, trns);  // 1 0 1 0
    CHECK(img::peek(png).channels == 1);
    CHECK(img::decode(png, 0).equal(at::tensor({255, 0, 255, 0}, at::kByte).view({1, 4, 1})));
    auto rgba = img::decode(png, 4);
    CHECK(rgba.select(2, 3).equal(at::tensor({0, 255, 0, 255}, at::kByte).view({1, 4})));
    CHECK(rgba.select(2, 0).equal(at::tensor({255, 0, 255, 0}, at::kByte).view({1, 4})));
  }
  SECTION("grey+alpha keeps 2 channels with channels=0") {
    std::string png = raw_png(2, 1, 8, PNG_COLOR_TYPE_GRAY_ALPHA, {bytes({50, 7, 200, 9})});
    CHECK(img::peek(png).channels == 2);
    CHECK(img::decode(png, 0).equal(at::tensor({50, 7, 200, 9}, at::kByte).view({1, 2, 2})));
    CHECK(img::decode(png, 4).equal(
        at::tensor({50, 50, 50, 7, 200, 200, 200, 9}, at::kByte).view({1, 2, 4})));
    CHECK(img::decode(png, 1).equal(at::tensor({50, 200}, at::kByte).view({1, 2, 1})));
  }
  SECTION("Adam7-interlaced PNG decodes to the same pixels") {
    auto t = test_image(19, 23, 3);
    CHECK(img::decode(interlaced_png(t)).equal(t));
  }
}

TEST_CASE("JPEG round trip at quality 95 is close", "[codec][jpeg]") {
  auto t = test_image(64, 96, 3);
  std::string jpeg = img::encode_jpeg(t, 95);
  auto out = img::decode(jpeg);
  REQUIRE(out.sizes() == t.sizes());
  REQUIRE(out.scalar_type() == at::kByte);
  REQUIRE(out.is_contiguous());
  // Mean absolute error in levels, measured on this image with libjpeg-turbo 2.1.5: 1.54 with
  // the default fast IDCT (which loses accuracy at high qualities), 1.08 with the accurate one;
  // the bounds leave margin for other libjpeg-turbo versions.
  CHECK(mean_abs_diff(out, t) < 2.5);
  CHECK(mean_abs_diff(img::decode(jpeg, 3, true), t) < 2.0);
  // Grey JPEGs have no chroma to subsample (measured 1.09 fast, 0.34 accurate).
  auto g = test_image(64, 96, 1);
  std::string gjpeg = img::encode_jpeg(g, 95);
  auto gout = img::decode(gjpeg, 1);
  CHECK(gout.sizes() == g.sizes());
  CHECK(mean_abs_diff(gout, g) < 1.5);
  CHECK(mean_abs_diff(img::decode(gjpeg, 1, true), g) < 0.6);
  CHECK(img::peek(gjpeg).channels == 1);
  CHECK(img::encode_jpeg(g.squeeze(2), 95) == gjpeg);  // HxW is grey too
  // Lower quality, bigger error, smaller file.
  std::string low = img::encode_jpeg(t, 30);
  CHECK(low.size() < jpeg.size());
  CHECK(mean_abs_diff(img::decode(low), t) > mean_abs_diff(out, t));
}

TEST_CASE("JPEG channel conversions", "[codec][jpeg]") {
  auto t = test_image(32, 48, 3);
  std::string jpeg = img::encode_jpeg(t);
  auto rgb = img::decode(jpeg, 3);
  auto rgba = img::decode(jpeg, 4);
  CHECK(rgba.slice(2, 0, 3).equal(rgb));
  CHECK(rgba.select(2, 3).eq(255).all().item<bool>());
  // Grey is libjpeg's luma channel: close to 0.299 R + 0.587 G + 0.114 B of the decoded RGB.
  auto grey = img::decode(jpeg, 1);
  REQUIRE(grey.sizes() == at::IntArrayRef({32, 48, 1}));
  auto f = rgb.to(at::kFloat);
  auto luma = f.select(2, 0) * 0.299 + f.select(2, 1) * 0.587 + f.select(2, 2) * 0.114;
  CHECK((grey.select(2, 0).to(at::kFloat) - luma).abs().mean().item<float>() < 1.5f);
  auto ga = img::decode(jpeg, 2);
  CHECK(ga.slice(2, 0, 1).equal(grey));
  CHECK(ga.select(2, 1).eq(255).all().item<bool>());
  CHECK(img::decode(jpeg, 0).size(2) == 3);
  // A grey JPEG asked for RGB replicates.
  auto g3 = img::decode(img::encode_jpeg(test_image(16, 16, 1)), 3);
  CHECK(g3.select(2, 0).equal(g3.select(2, 1)));
  CHECK(g3.select(2, 0).equal(g3.select(2, 2)));
}

TEST_CASE("JPEG fast and accurate IDCT both decode and differ slightly", "[codec][jpeg]") {
  auto t = test_image(64, 96, 3);
  std::string jpeg = img::encode_jpeg(t, 95);
  auto fast = img::decode(jpeg, 3, false);
  auto precise = img::decode(jpeg, 3, true);
  // Measured on this image: mean difference 1.13 levels, largest 5; the accurate IDCT is
  // closer to the original (1.08 against 1.54 levels).
  CHECK_FALSE(fast.equal(precise));
  CHECK(mean_abs_diff(fast, precise) < 2.0);
  CHECK((fast.to(at::kFloat) - precise.to(at::kFloat)).abs().max().item<float>() <= 10.0f);
  CHECK(mean_abs_diff(precise, t) < mean_abs_diff(fast, t));
  // PNG has no IDCT: precise changes nothing.
  std::string png = img::encode_png(t);
  CHECK(img::decode(png, 3, true).equal(img::decode(png, 3, false)));
}

TEST_CASE("CMYK JPEGs decode to RGB (Adobe inverted CMYK)", "[codec][jpeg]") {
  // TurboJPEG writes CMYK input as a YCCK JPEG with an Adobe marker, like Photoshop. Stored
  // C=255 M=128 Y=0 K=255 mean "no cyan, half magenta, full yellow, no black": RGB 255, 128, 0.
  int w = 16, h = 16;
  std::vector<unsigned char> cmyk(w * h * 4);
  for (int i = 0; i < w * h; ++i) {
    cmyk[4 * i] = 255, cmyk[4 * i + 1] = 128, cmyk[4 * i + 2] = 0, cmyk[4 * i + 3] = 255;
  }
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  REQUIRE(tjCompress2(tj, cmyk.data(), w, 0, h, TJPF_CMYK, &buf, &size, TJSAMP_444, 95, 0) == 0);
  std::string jpeg(reinterpret_cast<char*>(buf), size);
  tjFree(buf);
  tjDestroy(tj);
  REQUIRE(jpeg.find("Adobe") != std::string::npos);
  auto rgb = img::decode(jpeg, 3);
  REQUIRE(rgb.sizes() == at::IntArrayRef({16, 16, 3}));
  auto want = at::tensor({255.0f, 128.0f, 0.0f}).view({1, 1, 3});
  CHECK((rgb.to(at::kFloat) - want).abs().max().item<float>() <= 3.0f);
  CHECK(img::peek(jpeg).channels == 3);
  CHECK(img::decode(jpeg, 0).size(2) == 3);
  CHECK(img::decode(jpeg, 4).select(2, 3).eq(255).all().item<bool>());
  CHECK(img::decode(jpeg, 1).size(2) == 1);
}

TEST_CASE("decode errors name the problem", "[codec][errors]") {
  auto t = test_image(40, 50, 3);
  std::string jpeg = img::encode_jpeg(t);
  std::string png = img::encode_png(t);

  SECTION("garbage names its first bytes in hex") {
    auto msg = error_of([] { img::decode("hello, not an image"); });
    CHECK(contains(msg, "unknown image format"));
    CHECK(contains(msg, "68 65 6c 6c 6f 2c 20 6e"));
    CHECK(contains(error_of([] { img::decode(""); }), "empty image data"));
    CHECK(
        contains(error_of([] { img::decode("GIF89a\x01\x00"); }), "GIF images are not supported"));
  }
  SECTION("truncated JPEG fails, as in TF, in the header or in the scan") {
    for (size_t keep : {jpeg.size() - 2, jpeg.size() * 2 / 3, size_t{200}, size_t{20}, size_t{3}}) {
      INFO("kept " << keep << " of " << jpeg.size() << " bytes");
      auto msg = error_of([&] { img::decode(jpeg.substr(0, keep)); });
      CHECK((contains(msg, "truncated") || contains(msg, "corrupt")));
      CHECK(contains(msg, "JPEG"));
    }
    CHECK(contains(error_of([&] { img::decode(jpeg.substr(0, jpeg.size() / 2)); }),
                   "truncated JPEG"));
  }
  SECTION("JPEG warnings libjpeg recovers from are tolerated, as TF does") {
    // Two stray bytes after the APP0 (JFIF) segment: "extraneous bytes before marker".
    REQUIRE(jpeg.substr(2, 4) == bytes({0xFF, 0xE0, 0x00, 0x10}));
    std::string stray = jpeg.substr(0, 20) + std::string("\x12\x34", 2) + jpeg.substr(20);
    CHECK(img::decode(stray).equal(img::decode(jpeg)));
    CHECK(img::peek(stray).height == 40);
    // ... but not together with truncation.
    CHECK(contains(error_of([&] { img::decode(stray.substr(0, stray.size() / 2)); }), "truncated"));
  }
  SECTION("chroma sampling TurboJPEG has no name for does not stop the header") {
    // Luma sampled 4x2 against chroma 1x1 (4:1:0): TurboJPEG 2.1's header call reports an error
    // after reading the header, though libjpeg decodes such files. (The scan data, written for
    // 4:2:0, no longer matches; only the header is read here.)
    std::string odd = jpeg;
    size_t sof = sof_dims_offset(odd) - 5;
    REQUIRE(static_cast<unsigned char>(odd[sof + 9]) == 3);  // three components
    odd[sof + 11] = 0x42;                                    // component 1: H=4, V=2
    auto info = img::peek(odd);
    CHECK(info.height == 40);
    CHECK(info.width == 50);
    CHECK(info.channels == 3);
  }
  SECTION("truncated or corrupt PNG fails") {
    CHECK(contains(error_of([&] { img::decode(png.substr(0, png.size() / 2)); }), "PNG"));
    CHECK(contains(error_of([&] { img::decode(png.substr(0, png.size() - 12)); }), "truncated"));
    CHECK(contains(error_of([&] { img::decode(png.substr(0, 30)); }), "PNG"));
    std::string bad = png;
    bad[png.size() / 2] ^= 0x55;  // inside IDAT: the chunk's CRC no longer matches
    CHECK(contains(error_of([&] { img::decode(bad); }), "corrupt or truncated PNG"));
  }
  SECTION("bad channels") {
    CHECK(contains(error_of([&] { img::decode(png, 5); }), "channels must be"));
  }
}

TEST_CASE("the pixel cap stops huge images before allocation", "[codec][errors]") {
  auto t = test_image(40, 50, 3);
  std::string jpeg = img::encode_jpeg(t), png = img::encode_png(t);
  for (const auto& data : {jpeg, png}) {
    auto msg = error_of([&] { img::decode(data, 3, false, 1999); });
    CHECK(contains(msg, "image of 40x50 pixels (height x width) exceeds the cap of 1999 "
                        "(max_pixels)"));
    CHECK(img::decode(data, 3, false, 2000).sizes() == t.sizes());
  }
  // Headers claiming 20000x20000 (400 Mpx) fail on the default cap of 2^27, without trying to
  // allocate 1.2 GB.
  std::string big_jpeg = jpeg;
  size_t at = sof_dims_offset(big_jpeg);
  big_jpeg.replace(at, 4, bytes({0x4E, 0x20, 0x4E, 0x20}));  // 20000, 20000
  CHECK(img::peek(big_jpeg).height == 20000);
  CHECK(contains(error_of([&] { img::decode(big_jpeg); }),
                 "image of 20000x20000 pixels (height x width) exceeds the cap of 134217728"));
  std::string big_png = raw_png(20000, 20000, 8, PNG_COLOR_TYPE_RGB, {});
  CHECK(img::peek(big_png).width == 20000);
  CHECK(contains(error_of([&] { img::decode(big_png); }), "20000x20000 pixels"));
}

TEST_CASE("peek reads the header without decoding the pixels", "[codec]") {
  auto t = test_image(30, 70, 3);
  std::string jpeg = img::encode_jpeg(t), png = img::encode_png(t);
  // Cut in the middle of the pixel data: decode fails, peek still answers.
  std::string half_jpeg = jpeg.substr(0, jpeg.size() * 3 / 4);
  std::string half_png = png.substr(0, png.size() * 3 / 4);
  CHECK_THROWS_AS(img::decode(half_jpeg), bv::Error);
  CHECK_THROWS_AS(img::decode(half_png), bv::Error);
  auto j = img::peek(half_jpeg);
  CHECK(j.height == 30);
  CHECK(j.width == 70);
  CHECK(j.channels == 3);
  CHECK(j.format == "jpeg");
  auto p = img::peek(half_png);
  CHECK(p.height == 30);
  CHECK(p.width == 70);
  CHECK(p.channels == 3);
  CHECK(p.format == "png");
  CHECK(contains(error_of([] { img::peek("not an image"); }), "unknown image format"));
}

TEST_CASE("decode_crop equals decode then crop", "[codec]") {
  auto t = test_image(37, 53, 3);
  for (const auto& data : {img::encode_jpeg(t), img::encode_png(t)}) {
    auto full = img::decode(data);
    auto crop = img::decode_crop(data, 5, 7, 20, 31);
    CHECK(crop.is_contiguous());
    CHECK(crop.equal(full.slice(0, 5, 25).slice(1, 7, 38)));
    CHECK(img::decode_crop(data, 0, 0, 37, 53).equal(full));
    CHECK(img::decode_crop(data, 36, 52, 1, 1).equal(full.slice(0, 36, 37).slice(1, 52, 53)));
    auto grey = img::decode_crop(data, 1, 2, 3, 4, 1);
    CHECK(grey.equal(img::decode(data, 1).slice(0, 1, 4).slice(1, 2, 6)));
    auto msg = error_of([&] { img::decode_crop(data, 30, 0, 8, 10); });
    CHECK(contains(msg, "window y=30 x=0 h=8 w=10"));
    CHECK(contains(msg, "37x53 image"));
    CHECK_THROWS_AS(img::decode_crop(data, 0, 0, 0, 5), bv::Error);
    CHECK_THROWS_AS(img::decode_crop(data, -1, 0, 5, 5), bv::Error);
  }
  auto precise = img::decode_crop(img::encode_jpeg(t), 2, 3, 10, 10, 3, true);
  CHECK(precise.equal(img::decode(img::encode_jpeg(t), 3, true).slice(0, 2, 12).slice(1, 3, 13)));
}

TEST_CASE("encoders reject bad tensors, naming shape and dtype", "[codec][errors]") {
  auto msg = error_of([] { img::encode_png(at::zeros({4, 5, 3})); });
  CHECK(contains(msg, "encode_png"));
  CHECK(contains(msg, "float32 [4x5x3]"));
  CHECK(contains(error_of([] {
                   img::encode_png(at::zeros({4, 5, 5}, at::kByte));
                 }),
                 "uint8 [4x5x5]"));
  CHECK(contains(error_of([] { img::encode_png(at::zeros({4}, at::kByte)); }), "uint8 [4]"));
  CHECK(contains(error_of([] {
                   img::encode_png(at::zeros({0, 5, 3}, at::kByte));
                 }),
                 "empty image"));
  CHECK(contains(error_of([] {
                   img::encode_jpeg(at::zeros({4, 5, 4}, at::kByte));
                 }),
                 "uint8 [4x5x4]"));
  CHECK(contains(error_of([] { img::encode_jpeg(at::zeros({4, 5, 2}, at::kByte)); }), "no alpha"));
  CHECK(contains(error_of([] {
                   img::encode_jpeg(at::zeros({4, 5, 3}, at::kInt));
                 }),
                 "int32 [4x5x3]"));
  CHECK(contains(error_of([] {
                   img::encode_jpeg(at::zeros({4, 5, 3}, at::kByte), 0);
                 }),
                 "quality must be 1..100"));
  // A non-contiguous view encodes its own values.
  auto t = test_image(10, 12, 3);
  auto view = t.transpose(0, 1);
  CHECK(img::decode(img::encode_png(view)).equal(view.contiguous()));
}

TEST_CASE("draw_line paints pixels within thickness/2 of the segment", "[draw]") {
  auto canvas = at::zeros({9, 12, 3}, at::kByte);
  // Horizontal, radius 1.5: rows 3..5; the round ends reach one column past each end point
  // ((0, 3) is sqrt(2) from (1, 4)) but not two rows away.
  img::draw_line(canvas, 1, 4, 10, 4, {255, 0, 0}, 3);
  auto red = canvas.select(2, 0);
  CHECK(red.slice(0, 3, 6).eq(255).all().item<bool>());
  CHECK(red.sum().item<int64_t>() == 255 * 3 * 12);
  CHECK(canvas.select(2, 1).eq(0).all().item<bool>());
  // Clipped at the border; a point is a dot.
  img::draw_line(canvas, -5, 0, 20, 0, {0, 9, 0}, 1);
  CHECK(canvas.select(2, 1)[0].eq(9).all().item<bool>());
  img::draw_line(canvas, 6, 7, 6, 7, {0, 0, 7}, 1);
  CHECK(canvas.select(2, 2).sum().item<int64_t>() == 7);
  CHECK(contains(error_of([&] { img::draw_line(canvas, 0, 0, 1, 1, {1, 2}, 1); }), "colour"));
  auto f = at::zeros({4, 4, 3});
  CHECK(contains(error_of([&] { img::draw_line(f, 0, 0, 1, 1, {1, 2, 3}, 1); }), "float32"));
}
