// Fuzzes the image decoders (runtime/image/codec.cpp: JPEG through TurboJPEG, PNG through
// libpng). The input is 4 bytes of options, then the file:
//   byte 0: channels = byte % 5 (0 keeps the file's own), bit 3 the precise IDCT
//   bytes 1-3: the decode_crop window: y = b1 % 8, x = b2 % 8, h = w = b3 % 16 + 1
// sniff_format and peek read the header; decode decodes it (at most 2^20 pixels, so a header
// claiming gigapixels is refused quickly) and must agree with peek; decoding again must give
// the same pixels, and decode_crop the same window. libtorch's CPU allocator fills new tensors
// with zeros for the first decode and with junk for the others, so a pixel the decoder never
// writes (left as whatever memory held: a different image each run) shows as a difference.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "fuzz_util.h"
#include "image/codec.h"

// c10's allocator flags (c10/core/impl/alloc_cpu.cpp): fill each new CPU tensor's memory.
extern bool FLAGS_caffe2_cpu_allocator_do_zero_fill;
extern bool FLAGS_caffe2_cpu_allocator_do_junk_fill;

namespace {

void fill_new_tensors(bool junk) {
  FLAGS_caffe2_cpu_allocator_do_zero_fill = !junk;
  FLAGS_caffe2_cpu_allocator_do_junk_fill = junk;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  bv::fuzz::init_torch();
  int channels = data[0] % 5;
  bool precise = (data[0] & 8) != 0;
  int64_t y = data[1] % 8, x = data[2] % 8, hw = data[3] % 16 + 1;
  std::string bytes(reinterpret_cast<const char*>(data + 4), size - 4);
  constexpr int64_t kMaxPixels = int64_t{1} << 20;

  std::string format = bv::image::sniff_format(bytes);
  std::optional<bv::image::ImageInfo> info;
  bv::fuzz::run_parser([&] { info = bv::image::peek(bytes); });
  if (info && info->format != format) std::abort();
  std::optional<at::Tensor> img;
  fill_new_tensors(false);
  bv::fuzz::run_parser([&] { img = bv::image::decode(bytes, channels, precise, kMaxPixels); });
  fill_new_tensors(true);
  if (img) {
    int64_t want_c = channels ? channels : (info ? info->channels : -1);
    if (!info || img->dim() != 3 || img->size(0) != info->height || img->size(1) != info->width ||
        img->size(2) != want_c || img->scalar_type() != at::kByte || !img->is_contiguous()) {
      std::fprintf(stderr, "image_fuzz: decode gave %s, peek said %s\n",
                   c10::str(img->sizes()).c_str(),
                   info ? c10::str(info->height, "x", info->width, "x", info->channels).c_str()
                        : "(peek failed)");
      std::abort();
    }
    at::Tensor again = bv::image::decode(bytes, channels, precise, kMaxPixels);
    if (!again.equal(*img)) {
      std::fprintf(stderr, "image_fuzz: decoding twice gave different pixels (some were never "
                           "written: zeros the first time, junk the second)\n");
      std::abort();
    }
    bv::fuzz::run_parser([&] {
      at::Tensor crop = bv::image::decode_crop(bytes, y, x, hw, hw, channels, precise, kMaxPixels);
      if (!crop.equal(img->slice(0, y, y + hw).slice(1, x, x + hw))) {
        std::fprintf(stderr, "image_fuzz: decode_crop differs from decode then crop\n");
        std::abort();
      }
    });
  }
  return 0;
}
