// Fuzzes the ZIP reader under npz (runtime/ckpt/zip.cpp): the input is the archive.
// read_directory validates the end records, the central directory and the local headers; then
// every member is streamed out with MemberReader (stored or inflated, in uneven chunks) and
// finish() checks the deflate end and the CRC-32.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ckpt/zip.h"
#include "fuzz_util.h"

namespace zip = bv::ckpt::zip;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = bv::fuzz::scratch_dir() + "/input.zip";
  bv::fuzz::write_file(path, data, size);
  std::vector<zip::Member> members;
  std::unique_ptr<zip::File> file;
  bv::fuzz::run_parser([&] {
    file = std::make_unique<zip::File>(path);
    members = zip::read_directory(*file);
  });
  if (!file) return 0;
  // A member may inflate to far more than the file holds (that is allowed): read at most this
  // much of each, so one input stays fast.
  constexpr uint64_t kMaxRead = uint64_t{16} << 20;
  std::vector<char> buf(65536);
  for (const auto& m : members) {
    bv::fuzz::run_parser([&] {
      zip::MemberReader reader(*file, m);
      uint64_t done = 0;
      size_t chunk = 1;
      while (reader.remaining() > 0 && done < kMaxRead) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(reader.remaining(), chunk));
        reader.read(buf.data(), n);
        done += n;
        chunk = std::min<size_t>(chunk * 7 + 3, buf.size());
      }
      if (reader.remaining() == 0) reader.finish();
    });
  }
  return 0;
}
