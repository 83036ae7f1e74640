// big_vision's npz checkpoints: numpy's np.savez of a flat {"a/b/c": array} dict, each member
// `NAME.npy`. bfloat16 arrays are numpy void `|V2` (two raw bytes), as big_vision's
// recover_dtype expects. Reading checks the whole container (zip.h) and every .npy header with a
// strict parser (no eval); writing produces the bytes np.savez would.
//
// dtypes read: <f2 <f4 <f8 |V2 or <V2 (bfloat16) |b1 |i1 |u1 <i2 <i4 <i8, big-endian `>`
// variants (byte-swapped on load), and <u2 <u4 <u8 widened to int32 / int64 / int64 because
// libtorch has no such unsigned types (uint64 values above 2^63-1 are an error).
// dtypes written: float16/32/64, bfloat16 (as |V2), bool, int8/16/32/64, uint8.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace bv::ckpt {

struct NpzEntry {
  std::string name;            // without ".npy"
  std::vector<int64_t> shape;  // as loaded (C order)
  c10::ScalarType dtype;       // of the tensor load_npz_entry returns
  uint64_t data_offset;        // the member's bytes in the file (after its local header)
  uint64_t stored_size;        // bytes in the file (compressed size when deflated)
  uint64_t size;               // bytes of the .npy (header + array data)
  bool deflated;
  bool fortran_order;
  // Beyond the basics: what load_npz_entry needs to read and check the member on its own.
  std::string descr;         // numpy's dtype string as in the file, e.g. "<f4", "|V2"
  uint64_t header_size = 0;  // bytes of the .npy header (array data follows it)
  uint64_t nbytes = 0;       // bytes of array data in the file (size - header_size)
  uint32_t crc32 = 0;
  uint16_t zip_flags = 0;
  uint64_t header_offset = 0;  // the member's zip local header
};

// The central directory plus every .npy header (deflated members inflate only their header):
// enough to list a large checkpoint without reading its arrays. Zip order.
std::vector<NpzEntry> npz_index(const std::string& path);

// Every member (or those whose name `want` accepts), names without ".npy", in zip order.
std::vector<std::pair<std::string, at::Tensor>> load_npz(
    const std::string& path, const std::function<bool(const std::string&)>& want = nullptr);

// One member described by npz_index(path).
at::Tensor load_npz_entry(const std::string& path, const NpzEntry& e);

// What np.savez(path, **dict(params)) writes, members in the given order (names get ".npy"),
// byte for byte (numpy 1.24 headers, Python 3.11 zipfile records). Written to PATH.tmp-<pid>,
// fsynced and renamed over PATH. Tensors are streamed from their memory (a non-contiguous or
// non-CPU tensor is made contiguous on the CPU one at a time). Unlike np.savez, ".npz" is not
// appended to PATH.
void save_npz(const std::string& path,
              const std::vector<std::pair<std::string, at::Tensor>>& params);

// The .npy header numpy 1.24's format.write_array writes for this dtype and shape (exposed for
// tests). Throws for dtypes npz cannot hold.
std::string npy_header(c10::ScalarType dtype, const std::vector<int64_t>& shape);

}  // namespace bv::ckpt
