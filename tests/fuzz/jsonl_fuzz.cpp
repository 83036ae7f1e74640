// Fuzzes the JSON-L source (bv:jsonl, runtime/data/sources.cpp): the input is the whole file.
// Each input is loaded twice, as `skip_errors` configs and strict ones do: keeping bad lines
// (every line parsed, each failure kept as an error example) and failing on the first bad line,
// there with start/stop selecting lines and an fopen/download key (image) as big_vision's
// jsonl.py takes them.
#include <cstddef>
#include <cstdint>

#include "data/sources.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bv::fuzz::init_torch();
  std::string path = bv::fuzz::scratch_dir() + "/input.jsonl";
  bv::fuzz::write_file(path, data, size);

  bv::data::JsonlOptions keep;
  keep.fname = path;
  keep.keep_bad_lines = true;
  bv::fuzz::run_parser([&] {
    bv::data::Source src = bv::data::load_jsonl(keep);
    if (src.origins.size() != src.examples.size()) std::abort();
  });

  bv::data::JsonlOptions strict;
  strict.fname = path;
  strict.fopen_keys = {{"image", "/nonexistent/images"}, {"mask", ""}};
  strict.download_keys = {"image"};
  strict.start = 1;
  strict.stop = 6;
  bv::fuzz::run_parser([&] { bv::data::load_jsonl(strict); });
  return 0;
}
