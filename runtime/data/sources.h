// Data sources: where raw examples come from. bv:jsonl and bv:imagefolder hold the whole split's
// examples in memory (metadata only: file contents are read later, by the pipeline's workers);
// bv:tfrecord holds where each record lies, and the workers read and parse the records.
//   bv:jsonl        big_vision's datasets/jsonl.py (fname, fopen_keys, start, stop, id)
//   bv:imagefolder  ROOT/CLASS/*.jpg|png, labels by sorted class name (as timm users expect)
//   bv:tfrecord     records [skip, skip + take) of TFRecord shards of tf.train.Example (what
//                   TFDS writes; lib/bv/tfds.lua finds a dataset's shards)
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/example.h"
#include "data/tfrecord.h"

namespace bv::data {

struct Source {
  std::string name;
  std::vector<Example> examples;
  std::vector<Origin> origins;           // one per example, for error messages
  std::vector<std::string> class_names;  // imagefolder only
  // Lines that failed to parse, kept (JsonlOptions::keep_bad_lines) as examples that fail in the
  // pipeline, where skip_errors counts them: example index -> the error.
  std::map<int64_t, std::string> bad_lines;
  // bv:tfrecord: where its records lie (`examples` and `origins` are then empty); bad_lines
  // holds its records whose length header is corrupt (skip_errors).
  std::shared_ptr<const TFRecordIndex> records;
};

// How many examples `src` has, where example i (0-based) comes from ("data/x.jsonl:17",
// "bv:tfrecord: 'x.tfrecord-00000-of-00001' record 3 (byte 1234)"), and example i as the pp
// gets it before any file is read: bv:tfrecord's record is read, checked and parsed now.
int64_t source_size(const Source& src);
std::string source_origin(const Source& src, int64_t i);
Example source_example(const Source& src, int64_t i);

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
// keep_bad (skip_errors): a record whose length header is corrupt is kept as an example that
// fails in the pipeline (a record whose data is corrupt fails there anyway, when it is read).
Source load_tfrecord(const std::vector<TFRecordShard>& shards, bool keep_bad);

// big_vision's per-process split: np.array_split(arange(n), world)[rank].
std::vector<int64_t> process_indices(int64_t n, int rank, int world);

}  // namespace bv::data
