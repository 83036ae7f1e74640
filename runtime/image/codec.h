// Image codecs: JPEG through libjpeg-turbo's TurboJPEG API, PNG through libpng. Decoding follows
// tf.io.decode_image as big_vision's `decode` op uses it: uint8 HxWxC output, JPEG with TF's
// default fast integer IDCT and fancy upsampling, PNG converted the way TF's PNG decoder does.
//
// Channel conversions (`channels` = 1, 2, 3 or 4; 0 keeps the file's own):
//   grey -> RGB            replicates the grey value (libjpeg / libpng do it)
//   RGB -> grey            what the libraries do when asked for grey, as TF asks them:
//                          JPEG: libjpeg's luma channel Y (0.299 R + 0.587 G + 0.114 B, computed
//                          before the chroma was subsampled); PNG: png_set_rgb_to_gray with
//                          0.299 / 0.587 (/ 0.114), as TF's PNG decoder.
//   with alpha -> without  drops alpha (no compositing), as tf.io.decode_image(channels=3)
//   without alpha -> with  adds alpha 255; a PNG's tRNS chunk becomes the alpha channel
//   16-bit PNG -> 8-bit    keeps the high byte (png_set_strip_16), as TF
//   CMYK JPEG -> RGB       R = C * K / 255 (Adobe's inverted CMYK), or (255 - C)(255 - K) / 255
//                          without an Adobe marker
//
// Errors are bv::Error naming the culprit: an unknown format (with the first bytes in hex), a
// truncated or corrupt file, an image larger than max_pixels, a bad tensor for the encoders.
#pragma once

#include <cstdint>
#include <string>

#include "core/forward.h"

namespace bv::image {

// The decoders' default cap on height * width: 2^27 pixels (about 134 megapixels, 400 MB as
// RGB). It stops a corrupt or hostile header from asking for gigabytes. The input pipeline's
// cap is input.max_pixels (bv.data). The header's size is checked against the cap before any
// pixel buffer is allocated; a refusal names the cap as `cap_name` (a config key).
constexpr int64_t kDefaultMaxPixels = int64_t{1} << 27;

// "jpeg" or "png" from the magic bytes at the start of `bytes`; "" when neither.
std::string sniff_format(const std::string& bytes);

// Decodes a JPEG or PNG to a contiguous uint8 [H, W, C] tensor. `precise` selects the accurate
// integer IDCT for JPEG (TF's dct_method="INTEGER_ACCURATE"; PIL's default); PNG ignores it.
// JPEG tolerates the warnings libjpeg recovers from (extraneous bytes, a bad Huffman code: TF
// decodes those too) but not a truncated file.
at::Tensor decode(const std::string& bytes, int channels = 3, bool precise = false,
                  int64_t max_pixels = kDefaultMaxPixels,
                  const std::string& cap_name = "max_pixels");

struct ImageInfo {
  int64_t height = 0, width = 0;
  int64_t channels = 0;  // what decode(bytes, 0) returns: CMYK JPEGs report 3
  std::string format;    // "jpeg" or "png"
};

// Reads the header only (no pixel data is decoded).
ImageInfo peek(const std::string& bytes);

// decode, then the window rows [y, y + h), columns [x, x + w) (0-based). TurboJPEG 2.1 has no
// partial decode, so this decodes the whole image; the result equals decode-then-crop exactly.
// Fails, naming the window and the image size, when the window is empty or leaves the image.
at::Tensor decode_crop(const std::string& bytes, int64_t y, int64_t x, int64_t h, int64_t w,
                       int channels = 3, bool precise = false,
                       int64_t max_pixels = kDefaultMaxPixels,
                       const std::string& cap_name = "max_pixels");

// PNG of a uint8 HxW or HxWxC image (C = 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA), 8 bits per
// channel. `compression` is zlib's level 0..9, or -1 for zlib's default (6, as TF).
std::string encode_png(const at::Tensor& img, int compression = -1);

// Baseline JPEG of a uint8 HxW, HxWx1 (grey) or HxWx3 (RGB) image. RGB uses 4:2:0 chroma
// subsampling, PIL's default; quality is 1..100; the forward DCT is the accurate integer one.
std::string encode_jpeg(const at::Tensor& img, int quality = 95);

}  // namespace bv::image
