#include "image/codec.h"

#include <ATen/ATen.h>
#include <png.h>
#include <turbojpeg.h>
#include <zlib.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor_util.h"

namespace bv::image {

namespace {

const unsigned char* as_bytes(const std::string& s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

bool starts_with(const std::string& bytes, const char* magic, size_t n) {
  return bytes.size() >= n && std::memcmp(bytes.data(), magic, n) == 0;
}

// "47 49 46 38 39 61 ..." of the first few bytes, for "unknown format" messages.
std::string hex_prefix(const std::string& bytes) {
  std::string out;
  size_t n = std::min<size_t>(bytes.size(), 8);
  for (size_t i = 0; i < n; ++i) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%s%02x", i ? " " : "", static_cast<unsigned char>(bytes[i]));
    out += buf;
  }
  if (bytes.size() > n) out += " ...";
  return out;
}

// The format of `bytes`, or an error that says what the bytes look like instead.
std::string require_format(const char* op, const std::string& bytes) {
  std::string format = sniff_format(bytes);
  if (!format.empty()) return format;
  BV_CHECK(!bytes.empty(), op, ": empty image data (0 bytes)");
  // tf.io.decode_image also reads these; say so rather than "unknown".
  const char* known = starts_with(bytes, "GIF8", 4) ? "GIF"
                      : starts_with(bytes, "BM", 2) ? "BMP"
                                                    : nullptr;
  if (known) fail(op, ": ", known, " images are not supported (only JPEG and PNG)");
  fail(op, ": unknown image format (first bytes ", hex_prefix(bytes), "; ", bytes.size(),
       " bytes in all); only JPEG (ff d8 ff) and PNG (89 50 4e 47) are supported");
}

void check_channels(const char* op, int channels) {
  BV_CHECK(channels >= 0 && channels <= 4, op, ": channels must be 0 (the file's own), 1, 2, 3 ",
           "or 4, got ", channels);
}

// Before any pixel buffer exists: the header's size against the cap (named cap_name).
void check_cap(const char* op, int64_t height, int64_t width, int64_t max_pixels,
               const std::string& cap_name) {
  BV_CHECK(max_pixels > 0, op, ": ", cap_name, " must be positive, got ", max_pixels);
  BV_CHECK(height * width <= max_pixels, op, ": image of ", height, "x", width,
           " pixels (height x width) exceeds the cap of ", max_pixels, " (", cap_name, ")");
}

// Adds an opaque alpha channel to a contiguous uint8 [H, W, C] image.
at::Tensor add_alpha(const at::Tensor& img) {
  at::Tensor alpha = at::full({img.size(0), img.size(1), 1}, 255, img.options());
  return at::cat({img, alpha}, 2).contiguous();
}

// ---------------------------------------------------------------------------------------------
// JPEG (TurboJPEG)

// One TurboJPEG handle per call: a handle that failed mid-header (tables-only streams) is left
// in a state that breaks the next call on it, and a fresh one costs microseconds.
struct TjHandle {
  tjhandle h;
  explicit TjHandle(bool compress) : h(compress ? tjInitCompress() : tjInitDecompress()) {
    BV_CHECK(h, "TurboJPEG: cannot create a handle: ", tjGetErrorStr2(nullptr));
  }
  ~TjHandle() { tjDestroy(h); }
  TjHandle(const TjHandle&) = delete;
  TjHandle& operator=(const TjHandle&) = delete;
  std::string error() const { return tjGetErrorStr2(h); }
  bool warning_only() const { return tjGetErrorCode(h) == TJERR_WARNING; }
};

struct JpegHeader {
  int height = 0, width = 0, subsamp = -1, colorspace = -1;
  bool cmyk() const { return colorspace == TJCS_CMYK || colorspace == TJCS_YCCK; }
  int own_channels() const { return colorspace == TJCS_GRAY ? 1 : 3; }
};

JpegHeader read_jpeg_header(const char* op, TjHandle& tj, const std::string& bytes) {
  JpegHeader hd;
  int rc = tjDecompressHeader3(tj.h, as_bytes(bytes), bytes.size(), &hd.width, &hd.height,
                               &hd.subsamp, &hd.colorspace);
  // Judge by what was filled in, not by rc: TurboJPEG 2.1 fails after reading the header when
  // the chroma sampling is not one it names (4:1:0, say), though it decodes such files; and a
  // warning (stray bytes between markers) fails it too. A broken header leaves the fields
  // unset, and so does a tables-only or very short stream, for which it returns success.
  bool ok = hd.width > 0 && hd.height > 0 && hd.colorspace >= 0;
  if (!ok) {
    fail(op, ": corrupt or truncated JPEG (", bytes.size(),
         " bytes): ", rc == 0 ? "no frame header" : tj.error());
  }
  return hd;
}

// True when the stream carries an APP14 "Adobe" marker, which is how Photoshop flags inverted
// CMYK. Walks the marker segments up to the start of scan.
bool has_adobe_marker(const std::string& bytes) {
  const auto* p = as_bytes(bytes);
  size_t n = bytes.size(), i = 2;
  while (i + 4 <= n) {
    if (p[i] != 0xFF) return false;
    unsigned char marker = p[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return false;  // start of scan, end of image
    size_t len = (size_t{p[i + 2]} << 8) | p[i + 3];
    if (marker == 0xEE && len >= 7 && i + 4 + 5 <= n && std::memcmp(p + i + 4, "Adobe", 5) == 0) {
      return true;
    }
    i += 2 + len;
  }
  return false;
}

// CMYK samples to RGB, as TF's JPEG decoder: Adobe files store inverted ink (255 = none).
void cmyk_to_rgb(const uint8_t* cmyk, uint8_t* rgb, int64_t pixels, bool inverted) {
  for (int64_t i = 0; i < pixels; ++i, cmyk += 4, rgb += 3) {
    int k = inverted ? cmyk[3] : 255 - cmyk[3];
    for (int c = 0; c < 3; ++c) {
      int v = inverted ? cmyk[c] : 255 - cmyk[c];
      rgb[c] = static_cast<uint8_t>((v * k + 127) / 255);
    }
  }
}

// libjpeg's own RGB -> luma weights (0.299, 0.587, 0.114 in 16-bit fixed point), for CMYK
// files asked for grey.
at::Tensor rgb_to_luma(const at::Tensor& rgb) {
  at::Tensor out = at::empty({rgb.size(0), rgb.size(1), 1}, rgb.options());
  const uint8_t* s = rgb.data_ptr<uint8_t>();
  uint8_t* d = out.data_ptr<uint8_t>();
  for (int64_t i = 0, n = out.numel(); i < n; ++i, s += 3) {
    d[i] = static_cast<uint8_t>((19595 * s[0] + 38470 * s[1] + 7471 * s[2] + 32768) >> 16);
  }
  return out;
}

// Decompresses into `out` (H * W * pixel size bytes). libjpeg recovers from many defects with
// a warning; TF accepts those images, except a truncated file, which it fails. A truncated
// stream makes libjpeg's memory source report "Premature end of JPEG file" and invent an end
// marker; a complete one ends with its own end marker (FF D9).
void jpeg_decompress(const char* op, TjHandle& tj, const std::string& bytes, const JpegHeader& hd,
                     int pixel_format, bool precise, uint8_t* out) {
  int flags = precise ? TJFLAG_ACCURATEDCT : TJFLAG_FASTDCT;  // fancy upsampling: the default
  int rc = tjDecompress2(tj.h, as_bytes(bytes), bytes.size(), out, hd.width, 0, hd.height,
                         pixel_format, flags);
  if (rc == 0) return;
  std::string message = tj.error();
  size_t n = bytes.size();
  bool complete = n >= 2 && static_cast<unsigned char>(bytes[n - 2]) == 0xFF &&
                  static_cast<unsigned char>(bytes[n - 1]) == 0xD9;
  bool truncated = !complete || message.find("Premature end") != std::string::npos;
  if (tj.warning_only() && !truncated) return;
  fail(op, ": ", truncated ? "truncated" : "corrupt", " JPEG (", hd.height, "x", hd.width, ", ",
       bytes.size(), " bytes): ", message);
}

at::Tensor decode_jpeg(const std::string& bytes, int channels, bool precise, int64_t max_pixels,
                       const std::string& cap_name) {
  const char* op = "decode";
  TjHandle tj(false);
  JpegHeader hd = read_jpeg_header(op, tj, bytes);
  check_cap(op, hd.height, hd.width, max_pixels, cap_name);
  if (channels == 0) channels = hd.own_channels();
  auto u8 = at::TensorOptions().dtype(at::kByte);

  // Zeros, not empty: a corrupt stream that libjpeg only warns about (accepted above, as TF
  // does) may end before every row is written, and the rows left would be whatever the memory
  // held, a different image on each decode (found by tests/fuzz/image_fuzz); zeroed, they are
  // black, the same every time.
  if (hd.cmyk()) {  // libjpeg cannot convert CMYK to RGB itself
    at::Tensor cmyk = at::zeros({hd.height, hd.width, 4}, u8);
    jpeg_decompress(op, tj, bytes, hd, TJPF_CMYK, precise, cmyk.data_ptr<uint8_t>());
    at::Tensor rgb = at::empty({hd.height, hd.width, 3}, u8);
    cmyk_to_rgb(cmyk.data_ptr<uint8_t>(), rgb.data_ptr<uint8_t>(), int64_t{hd.height} * hd.width,
                has_adobe_marker(bytes));
    if (channels == 3) return rgb;
    if (channels == 4) return add_alpha(rgb);
    at::Tensor grey = rgb_to_luma(rgb);
    return channels == 1 ? grey : add_alpha(grey);
  }

  // Grey and RGBA come straight from TurboJPEG (TJPF_RGBA's alpha is always 255); grey+alpha
  // is grey plus a column of 255.
  bool grey = channels <= 2;
  int pixel_format = grey ? TJPF_GRAY : channels == 3 ? TJPF_RGB : TJPF_RGBA;
  at::Tensor img = at::zeros({hd.height, hd.width, grey ? 1 : channels}, u8);
  jpeg_decompress(op, tj, bytes, hd, pixel_format, precise, img.data_ptr<uint8_t>());
  return channels == 2 ? add_alpha(img) : img;
}

// ---------------------------------------------------------------------------------------------
// PNG (libpng)
//
// libpng reports errors by longjmp. The setjmp frames below hold only plain C data, so the jump
// skips no destructor; all C++ objects (tensors, vectors, the png structs' owner) live in the
// callers, which turn a `false` into a bv::Error carrying libpng's message.

struct PngSource {
  const unsigned char* data = nullptr;
  size_t size = 0, pos = 0;
  char message[200] = {0};
};

void png_on_error(png_structp png, png_const_charp msg) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof src->message, "%s", msg);
  std::longjmp(png_jmpbuf(png), 1);
}

// Warnings (an odd ICC profile, a bad CRC in an ancillary chunk) change nothing in the pixels.
void png_on_warning(png_structp, png_const_charp) {}

void png_read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (src->size - src->pos < n) {
    png_error(png, "truncated file (more bytes requested than present)");
  }
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

// Owns the read structs, so every exit path frees them.
struct PngReader {
  PngSource src;
  png_structp png = nullptr;
  png_infop info = nullptr;

  explicit PngReader(const std::string& bytes) {
    src.data = as_bytes(bytes);
    src.size = bytes.size();
    png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    BV_CHECK(png, "libpng: cannot create a read struct");
    info = png_create_info_struct(png);
    if (!info) {
      png_destroy_read_struct(&png, nullptr, nullptr);
      fail("libpng: cannot create an info struct");
    }
    png_set_read_fn(png, &src, png_read_bytes);
  }
  ~PngReader() { png_destroy_read_struct(&png, &info, nullptr); }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;
};

struct PngLayout {
  int channels = 0;       // in: wanted (0 = the file's own); out: what the rows will hold
  bool transform = true;  // false: read the header only
  png_uint_32 height = 0, width = 0;
  int own_channels = 0;
  size_t row_bytes = 0;
};

// Reads the header and sets up the conversions TF's PNG decoder asks for.
bool png_read_layout(png_structp png, png_infop info, PngLayout* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  out->width = png_get_image_width(png, info);
  out->height = png_get_image_height(png, info);
  int color_type = png_get_color_type(png, info);
  int depth = png_get_bit_depth(png, info);
  bool has_trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  bool has_alpha = (color_type & PNG_COLOR_MASK_ALPHA) != 0;
  bool is_grey = (color_type & PNG_COLOR_MASK_COLOR) == 0;
  // A palette's tRNS chunk makes RGBA; elsewhere tRNS only appears when alpha is asked for.
  out->own_channels = color_type == PNG_COLOR_TYPE_PALETTE ? (has_trns ? 4 : 3)
                                                           : png_get_channels(png, info);
  if (!out->transform) return true;
  int want = out->channels == 0 ? out->own_channels : out->channels;
  if (want % 2 == 0) {  // grey+alpha or RGBA
    if (!has_alpha) {
      if (has_trns) {
        png_set_tRNS_to_alpha(png);
      } else {
        png_set_add_alpha(png, 0xFFFF, PNG_FILLER_AFTER);  // low byte used after strip_16
      }
    }
  } else if (has_alpha || has_trns) {
    png_set_strip_alpha(png);
  }
  if (depth == 16) png_set_strip_16(png);
  png_set_packing(png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (is_grey && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (want < 3 && !is_grey) png_set_rgb_to_gray_fixed(png, 1, 29900, 58700);  // 0.299, 0.587
  if (want >= 3 && is_grey) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out->channels = png_get_channels(png, info);
  out->row_bytes = png_get_rowbytes(png, info);
  return true;
}

bool png_read_pixels(png_structp png, png_infop info, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, nullptr);  // checks the trailing chunks: a file cut after IDAT fails here
  return true;
}

[[noreturn]] void png_fail(const char* op, const std::string& bytes, const PngReader& r) {
  fail(op, ": corrupt or truncated PNG (", bytes.size(), " bytes): ", r.src.message);
}

at::Tensor decode_png(const std::string& bytes, int channels, int64_t max_pixels,
                      const std::string& cap_name) {
  const char* op = "decode";
  PngReader r(bytes);
  PngLayout layout;
  layout.channels = channels;
  if (!png_read_layout(r.png, r.info, &layout)) png_fail(op, bytes, r);
  int64_t h = layout.height, w = layout.width;
  check_cap(op, h, w, max_pixels, cap_name);
  int want = channels == 0 ? layout.own_channels : channels;
  BV_CHECK(layout.channels == want && layout.row_bytes == static_cast<size_t>(w * want), op,
           ": libpng produced ", layout.channels, " channels, ", layout.row_bytes,
           " bytes per row for a ", h, "x", w, "x", want, " image (internal error)");
  at::Tensor img = at::empty({h, w, want}, at::TensorOptions().dtype(at::kByte));
  std::vector<png_bytep> rows(h);
  for (int64_t y = 0; y < h; ++y) rows[y] = img.data_ptr<uint8_t>() + y * w * want;
  if (!png_read_pixels(r.png, r.info, rows.data())) png_fail(op, bytes, r);
  return img;
}

// Encoding: the sink appends to a std::string; an allocation failure becomes a libpng error
// raised after the catch block has ended (never jump out of a handler).
struct PngSink {
  std::string* out;
  char message[200] = {0};
};

void png_on_write_error(png_structp png, png_const_charp msg) {
  auto* sink = static_cast<PngSink*>(png_get_error_ptr(png));
  std::snprintf(sink->message, sizeof sink->message, "%s", msg);
  std::longjmp(png_jmpbuf(png), 1);
}

void png_write_bytes(png_structp png, png_bytep data, png_size_t n) {
  auto* sink = static_cast<PngSink*>(png_get_io_ptr(png));
  bool ok = true;
  try {
    sink->out->append(reinterpret_cast<const char*>(data), n);
  } catch (const std::exception&) {
    ok = false;
  }
  if (!ok) png_error(png, "out of memory");
}

void png_flush(png_structp) {}

struct PngImage {
  png_uint_32 height, width;
  int color_type, compression;
  png_bytepp rows;
};

bool png_write_all(png_structp png, png_infop info, const PngImage* im) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_compression_level(png, im->compression);
  png_set_IHDR(png, info, im->width, im->height, 8, im->color_type, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, im->rows);
  png_write_end(png, nullptr);
  return true;
}

// A contiguous CPU uint8 [H, W, C] view of an encoder's input, or an error naming its shape.
at::Tensor check_image(const char* op, const at::Tensor& img, int max_channels,
                       const char* expected) {
  bool ok = img.defined() && img.scalar_type() == at::kByte &&
            (img.dim() == 2 || (img.dim() == 3 && img.size(2) >= 1 && img.size(2) <= max_channels));
  if (!ok) {
    fail(op, ": expected a uint8 image of shape ", expected, ", got ",
         img.defined() ? dtype_name(img.scalar_type()) : "an undefined tensor", " ",
         img.defined() ? shape_string(img) : "");
  }
  BV_CHECK(img.size(0) > 0 && img.size(1) > 0, op, ": cannot encode an empty image ",
           shape_string(img));
  at::Tensor t = img.dim() == 2 ? img.unsqueeze(2) : img;
  return t.cpu().contiguous();
}

}  // namespace

std::string sniff_format(const std::string& bytes) {
  if (starts_with(bytes, "\xFF\xD8\xFF", 3)) return "jpeg";
  if (starts_with(bytes, "\x89PNG", 4)) return "png";
  return "";
}

at::Tensor decode(const std::string& bytes, int channels, bool precise, int64_t max_pixels,
                  const std::string& cap_name) {
  check_channels("decode", channels);
  std::string format = require_format("decode", bytes);
  return format == "jpeg" ? decode_jpeg(bytes, channels, precise, max_pixels, cap_name)
                          : decode_png(bytes, channels, max_pixels, cap_name);
}

ImageInfo peek(const std::string& bytes) {
  ImageInfo info;
  info.format = require_format("peek", bytes);
  if (info.format == "jpeg") {
    TjHandle tj(false);
    JpegHeader hd = read_jpeg_header("peek", tj, bytes);
    info.height = hd.height;
    info.width = hd.width;
    info.channels = hd.own_channels();
  } else {
    PngReader r(bytes);
    PngLayout layout;
    layout.transform = false;
    if (!png_read_layout(r.png, r.info, &layout)) png_fail("peek", bytes, r);
    info.height = layout.height;
    info.width = layout.width;
    info.channels = layout.own_channels;
  }
  return info;
}

at::Tensor decode_crop(const std::string& bytes, int64_t y, int64_t x, int64_t h, int64_t w,
                       int channels, bool precise, int64_t max_pixels,
                       const std::string& cap_name) {
  // Check the window against the header first: a bad window costs no decode.
  ImageInfo info = peek(bytes);
  bool inside = h > 0 && w > 0 && y >= 0 && x >= 0 && y + h <= info.height && x + w <= info.width;
  BV_CHECK(inside, "decode_crop: window y=", y, " x=", x, " h=", h, " w=", w,
           " (0-based) does not lie inside the ", info.height, "x", info.width, " image");
  at::Tensor img = decode(bytes, channels, precise, max_pixels, cap_name);
  return img.slice(0, y, y + h).slice(1, x, x + w).contiguous();
}

std::string encode_png(const at::Tensor& img, int compression) {
  const char* op = "encode_png";
  BV_CHECK(compression >= -1 && compression <= 9, op,
           ": compression must be -1 (zlib's default) or 0..9, got ", compression);
  at::Tensor t = check_image(op, img, 4, "HxW or HxWxC with C = 1..4");
  static const int kColorTypes[] = {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                    PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
  int64_t h = t.size(0), w = t.size(1), c = t.size(2);
  BV_CHECK(h <= PNG_UINT_31_MAX && w <= PNG_UINT_31_MAX, op, ": image ", shape_string(t),
           " is too large for PNG");
  std::vector<png_bytep> rows(h);
  for (int64_t y = 0; y < h; ++y) rows[y] = t.data_ptr<uint8_t>() + y * w * c;

  std::string out;
  PngSink sink{&out};
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, &sink, png_on_write_error, png_on_warning);
  BV_CHECK(png, "libpng: cannot create a write struct");
  png_infop info = png_create_info_struct(png);
  PngImage im{static_cast<png_uint_32>(h), static_cast<png_uint_32>(w), kColorTypes[c - 1],
              compression < 0 ? Z_DEFAULT_COMPRESSION : compression, rows.data()};
  bool ok = info != nullptr;
  if (ok) {
    png_set_write_fn(png, &sink, png_write_bytes, png_flush);
    ok = png_write_all(png, info, &im);
  }
  png_destroy_write_struct(&png, info ? &info : nullptr);
  BV_CHECK(ok, op, ": libpng failed on a ", shape_string(t),
           " image: ", sink.message[0] ? sink.message : "cannot create an info struct");
  return out;
}

std::string encode_jpeg(const at::Tensor& img, int quality) {
  const char* op = "encode_jpeg";
  BV_CHECK(quality >= 1 && quality <= 100, op, ": quality must be 1..100, got ", quality);
  at::Tensor t = check_image(op, img, 3, "HxW, HxWx1 or HxWx3");
  BV_CHECK(t.size(2) != 2, op, ": expected a uint8 image of shape HxW, HxWx1 or HxWx3, got ",
           dtype_name(t.scalar_type()), " ", shape_string(img), " (JPEG has no alpha)");
  int64_t h = t.size(0), w = t.size(1);
  BV_CHECK(h <= 65535 && w <= 65535, op, ": image ", shape_string(t),
           " is too large for JPEG (65535 pixels a side at most)");
  bool grey = t.size(2) == 1;
  TjHandle tj(true);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  int rc = tjCompress2(tj.h, t.data_ptr<uint8_t>(), static_cast<int>(w), 0, static_cast<int>(h),
                       grey ? TJPF_GRAY : TJPF_RGB, &buf, &size, grey ? TJSAMP_GRAY : TJSAMP_420,
                       quality, 0);
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owner(buf, tjFree);
  BV_CHECK(rc == 0, op, ": TurboJPEG failed on a ", shape_string(t), " image: ", tj.error());
  return std::string(reinterpret_cast<const char*>(buf), size);
}

}  // namespace bv::image
