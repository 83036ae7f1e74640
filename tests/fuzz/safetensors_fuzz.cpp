// Fuzzes the safetensors reader (runtime/ckpt/safetensors.cpp): the input is the file.
// read_safetensors_header checks the header alone; load_safetensors loads every tensor with the
// file's size and CRC-32 computed on the way (as checkpoints are verified), then only some
// tensors through a filter.
#include <cstddef>
#include <cstdint>

#include "ckpt/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bv::fuzz::init_torch();
  std::string path = bv::fuzz::scratch_dir() + "/input.safetensors";
  bv::fuzz::write_file(path, data, size);
  size_t ntensors = 0;
  bool header_ok = false;
  bv::fuzz::run_parser([&] {
    bv::ckpt::SafetensorsFile f = bv::ckpt::read_safetensors_header(path);
    if (f.file_size != size || f.data_start > size) std::abort();
    ntensors = f.tensors.size();
    header_ok = true;
  });
  bv::fuzz::run_parser([&] {
    bv::ckpt::FileDigest digest;
    bv::ckpt::NamedTensors all = bv::ckpt::load_safetensors(path, nullptr, &digest);
    // What loads had a valid header, and the digest covers the whole file.
    if (!header_ok || all.size() != ntensors || digest.bytes != size) std::abort();
  });
  bv::fuzz::run_parser([&] {
    bv::ckpt::load_safetensors(path, [](const std::string& name) { return name.size() % 2 == 0; });
  });
  return 0;
}
