// Fuzzes the training checkpoint's manifest (runtime/ckpt/checkpoint.cpp): the input is
// WORKDIR/ckpt-000000007/manifest.json, next to a valid tensors.safetensors (a checkpoint of two
// small tensors saved once per process), and load_checkpoint_dir reads and checks it. A manifest
// that records the tensors file's true size and CRC-32 (the seeds do) gets as far as loading the
// tensors; then load_latest_checkpoint goes through LAST to the same directory. manifest.crc32
// is written with the input's true CRC-32, so that inputs get past the manifest's checksum to
// the checks behind it (a version-1 input then loads without the unverified-state warning).
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "fuzz_util.h"

namespace {

std::string make_workdir() {
  std::string workdir = bv::fuzz::scratch_dir() + "/run";
  // The checkpoint tests/fuzz/make_corpus.lua saves with bv.ckpt.save: its manifests (the seeds)
  // record this tensors file's size and CRC-32, so keep the tensors as they are there.
  bv::ckpt::save_checkpoint(workdir, 7,
                            {{"opt/count", at::full({}, 7, at::kLong)},
                             {"params/w", at::arange(6, at::kFloat).reshape({2, 3})}},
                            R"({"step": 7})", false);
  return workdir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bv::fuzz::init_torch();
  static const std::string workdir = make_workdir();
  std::string dir = workdir + "/ckpt-000000007";
  bv::fuzz::write_file(dir + "/manifest.json", data, size);
  char crc[16];
  uLong c = crc32_z(crc32_z(0L, Z_NULL, 0), size ? data : Z_NULL, size);
  int n = std::snprintf(crc, sizeof crc, "%08lx\n", static_cast<unsigned long>(c));
  bv::fuzz::write_file(dir + "/manifest.crc32", reinterpret_cast<const uint8_t*>(crc),
                       static_cast<size_t>(n));
  bool loaded = false;
  bv::fuzz::run_parser([&] {
    bv::ckpt::LoadedCheckpoint ck = bv::ckpt::load_checkpoint_dir(dir);
    if (ck.step != 7 || ck.tensors.size() != 2) std::abort();
    loaded = true;
  });
  if (loaded) {
    bv::fuzz::run_parser([&] {
      auto ck = bv::ckpt::load_latest_checkpoint(workdir);
      if (!ck || ck->step != 7 || !ck->warning.empty()) std::abort();
    });
  }
  return 0;
}
