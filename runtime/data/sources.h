// Data sources: where raw examples come from. Each source holds the whole split's examples in
// memory (metadata only: file contents are read later, by the pipeline's workers).
//   bv:jsonl        big_vision's datasets/jsonl.py (fname, fopen_keys, start, stop, id)
//   bv:imagefolder  ROOT/CLASS/*.jpg|png, labels by sorted class name (as timm users expect)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/example.h"

namespace bv::data {

struct Source {
  std::string name;
  std::vector<Example> examples;
  std::vector<Origin> origins;           // one per example, for error messages
  std::vector<std::string> class_names;  // imagefolder only
  // Lines that failed to parse, kept (JsonlOptions::keep_bad_lines) as examples that fail in the
  // pipeline, where skip_errors counts them: example index -> the error.
  std::map<int64_t, std::string> bad_lines;
};

struct JsonlOptions {
  std::string fname;
  // key -> directory prefix; the value of that key is a file path whose bytes the pp gets.
  std::map<std::string, std::string> fopen_keys;
  std::vector<std::string> download_keys;  // local paths only: bvlua downloads nothing
  int64_t start = 0;
  int64_t stop = -1;  // -1: to the end
  // A line that is not a valid example (bad JSON, ragged lists, ...) fails the load unless this
  // is set (skip_errors): then it is kept as an example whose processing fails.
  bool keep_bad_lines = false;
};

Source load_jsonl(const JsonlOptions& opts);
Source load_image_folder(const std::string& root);

// big_vision's per-process split: np.array_split(arange(n), world)[rank].
std::vector<int64_t> process_indices(int64_t n, int rank, int world);

}  // namespace bv::data
