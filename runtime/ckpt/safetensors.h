// The safetensors format, read and written by our own code (no library): an 8-byte little-endian
// header length N, N bytes of JSON, then one data buffer holding every tensor back to back.
//
//   {"__metadata__": {"key": "value"},
//    "params/w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
//
// Offsets are relative to the start of the data buffer. The reader treats every file as
// untrusted: it checks the whole header (the Rust reference's rules plus no duplicate keys and no
// trailing bytes) before it allocates anything, so no file can make it allocate more than the
// file itself holds.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace bv::ckpt {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Headers larger than this are rejected (the Rust reference's limit).
constexpr uint64_t kMaxSafetensorsHeader = 100000000;

struct TensorInfo {
  std::string name;
  c10::ScalarType dtype;
  std::string dtype_code;  // as in the file: "F32", "BF16", "BOOL", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte range inside the data buffer
  uint64_t end = 0;
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<TensorInfo> tensors;  // in name order
  uint64_t data_start = 0;          // file offset of the data buffer: 8 + header length
  uint64_t file_size = 0;
};

// Size and CRC-32 (zlib's, the one ZIP and PNG use) of a whole file as written or read.
struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

// "F32" for float32, ...; throws for dtypes safetensors cannot hold (complex, ...).
std::string safetensors_dtype_code(c10::ScalarType dtype);

// Writes the tensors (any device, any strides) in name order with contiguous offsets and the
// header padded with spaces to a multiple of 8. Atomic: writes PATH.tmp-<pid>, fsyncs it, renames
// it over PATH and fsyncs the directory. Names must be unique, non-empty and not "__metadata__".
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// The same, returning the size and CRC-32 of the file it wrote (computed while writing).
FileDigest save_safetensors_digest(const std::string& path, const NamedTensors& tensors,
                                   const std::map<std::string, std::string>& metadata = {});

// Reads and validates the header only.
SafetensorsFile read_safetensors_header(const std::string& path);

// Loads the tensors (CPU, in name order) whose names pass `filter` (all when it is empty).
// With `digest`, also computes the size and CRC-32 of every byte of the file (the tensors left
// out by the filter included), so a caller can check the file against a recorded checksum without
// reading it twice.
NamedTensors load_safetensors(const std::string& path,
                              const std::function<bool(const std::string&)>& filter = nullptr,
                              FileDigest* digest = nullptr);

// Durable-file helpers shared with checkpoint.cpp.
// fsync of a directory, so renames and creations inside it survive a power cut.
void sync_dir(const std::string& dir);
// PATH.tmp-<pid>, fsync, rename over PATH, fsync the directory.
void write_file_durable(const std::string& path, const std::string& data);

}  // namespace bv::ckpt
