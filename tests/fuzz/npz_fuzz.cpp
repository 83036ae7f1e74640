// Fuzzes the npz reader (runtime/ckpt/npz.cpp, over zip.cpp): the input is the .npz file.
// npz_index reads the directory and every .npy header; each member is then loaded on its own
// (load_npz_entry, as bv.ckpt.open's lazy reads do) and checked against its index entry, and the
// whole file is loaded again with load_npz (np.load's path).
#include <cstddef>
#include <cstdint>

#include "ckpt/npz.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bv::fuzz::init_torch();
  std::string path = bv::fuzz::scratch_dir() + "/input.npz";
  bv::fuzz::write_file(path, data, size);
  std::vector<bv::ckpt::NpzEntry> index;
  bv::fuzz::run_parser([&] { index = bv::ckpt::npz_index(path); });
  for (const auto& e : index) {
    bv::fuzz::run_parser([&] {
      at::Tensor t = bv::ckpt::load_npz_entry(path, e);
      // The index promises the shape and dtype of what the entry loads.
      if (t.sizes().vec() != e.shape || t.scalar_type() != e.dtype) {
        std::fprintf(stderr, "npz_fuzz: '%s' loads as %s %s, its index says %s\n", e.name.c_str(),
                     c10::toString(t.scalar_type()), c10::str(t.sizes()).c_str(),
                     c10::toString(e.dtype));
        std::abort();
      }
    });
  }
  bv::fuzz::run_parser([&] { bv::ckpt::load_npz(path); });
  return 0;
}
