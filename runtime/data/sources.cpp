#include "data/sources.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/json_util.h"
#include "core/quote.h"
#include "data/tf_example.h"

namespace bv::data {

namespace {

using json = nlohmann::json;

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty() || (!name.empty() && name[0] == '/')) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

// True when every element of a (nested) JSON array is a number or every one is a string.
bool all_of_kind(const json& j, bool want_string) {
  for (const auto& e : j) {
    if (e.is_array()) {
      if (!all_of_kind(e, want_string)) return false;
    } else if (want_string ? !e.is_string() : !(e.is_number() || e.is_boolean())) {
      return false;
    }
  }
  return true;
}

int64_t to_int64(const json& j, const std::string& where) {
  if (j.is_boolean()) return j.get<bool>() ? 1 : 0;
  BV_CHECK(!j.is_number_unsigned() || j.get<uint64_t>() <= uint64_t{INT64_MAX}, where,
           ": the integer ", j.dump(), " does not fit in int64");
  return j.get<int64_t>();
}

// A nested list of numbers as one rectangular tensor: every number at one depth, every list at
// a depth of one length (tf.constant refuses ragged lists too).
class Flattener {
 public:
  explicit Flattener(const std::string& where) : where_(where) {}

  at::Tensor tensor(const json& j) {
    visit(j);
    at::Tensor t;
    if (all_int_) {
      BV_CHECK(big_at_.empty(), where_, ": the integer", big_at_, " does not fit in int64");
      std::vector<int64_t> values;
      values.reserve(leaves_.size());
      for (const json* leaf : leaves_) values.push_back(to_int64(*leaf, where_));
      t = at::tensor(values, at::kLong);
    } else {
      std::vector<double> values;
      values.reserve(leaves_.size());
      for (const json* leaf : leaves_) {
        values.push_back(leaf->is_boolean() ? (leaf->get<bool>() ? 1.0 : 0.0)
                                            : leaf->get<double>());
      }
      t = at::tensor(values, at::kDouble).to(at::kFloat);
    }
    return t.reshape(shape_);
  }

 private:
  std::string at_path() const {
    std::string out;
    for (size_t i : path_) out += "[" + std::to_string(i) + "]";
    return out;
  }

  void visit(const json& j) {
    size_t depth = path_.size();
    if (!j.is_array()) {
      BV_CHECK(shape_.size() == depth, where_, ": ragged nested list: the element at ", at_path(),
               " is a number where the other elements at that depth are lists");
      if (leaf_depth_ < 0) leaf_depth_ = static_cast<int64_t>(depth);
      all_int_ = all_int_ && (j.is_number_integer() || j.is_boolean());
      if (j.is_number_unsigned() && big_at_.empty() && j.get<uint64_t>() > uint64_t{INT64_MAX}) {
        big_at_ = " at " + at_path();
      }
      leaves_.push_back(&j);
      return;
    }
    BV_CHECK(leaf_depth_ != static_cast<int64_t>(depth), where_,
             ": ragged nested list: the element at ", at_path(),
             " is a list where the other elements at that depth are numbers");
    if (shape_.size() == depth) shape_.push_back(static_cast<int64_t>(j.size()));
    BV_CHECK(shape_[depth] == static_cast<int64_t>(j.size()), where_,
             ": ragged nested list: the list at ", at_path(), " has ", j.size(),
             " elements where the first list at that depth has ", shape_[depth]);
    path_.push_back(0);
    for (const auto& e : j) {
      visit(e);
      ++path_.back();
    }
    path_.pop_back();
  }

  const std::string& where_;
  std::vector<int64_t> shape_;
  std::vector<size_t> path_;  // indices from the outer list down to the element visited
  int64_t leaf_depth_ = -1;   // the depth of the numbers, fixed by the first one
  bool all_int_ = true;
  std::vector<const json*> leaves_;
  std::string big_at_;  // where the first integer past int64 is (a float list takes it)
};

// A JSON value as a pipeline Value: lists of numbers become tensors (int64 or float32, as
// tf.constant would type them), lists of strings stay lists. parse_json bounded the nesting.
Value from_json(const json& j, const std::string& where) {
  switch (j.type()) {
    case json::value_t::null: return Value::none();
    case json::value_t::boolean: return Value::boolean(j.get<bool>());
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return Value::integer(to_int64(j, where));
    case json::value_t::number_float: return Value::number(j.get<double>());
    case json::value_t::string: return Value::string(j.get<std::string>());
    case json::value_t::array: {
      // (lists holding only empty lists are both: tf.constant makes them float32 tensors)
      if (all_of_kind(j, true) && !all_of_kind(j, false)) {
        Value v;
        v.kind = Value::Kind::kList;
        for (const auto& e : j) v.list.push_back(from_json(e, where));
        return v;
      }
      BV_CHECK(all_of_kind(j, false), where, ": lists must hold only numbers or only strings");
      return Value::of_tensor(Flattener(where).tensor(j));
    }
    default: fail(where, ": nested objects are not supported (big_vision's jsonl has none)");
  }
}

bool is_url(const std::string& s) { return s.find("://") != std::string::npos; }

}  // namespace

namespace {

// One JSON-L line as an example; `id` is its index among the examples.
Example parse_line(const std::string& line, const std::string& where, const JsonlOptions& opts,
                   size_t id) {
  json j = parse_json(line, where);
  BV_CHECK(j.is_object(), where, ": expected a JSON object, got ", j.type_name());
  Example ex;
  ex.emplace_back("id", Value::string(std::to_string(id)));
  for (const auto& [key, value] : j.items()) {
    Value v = from_json(value, where + " key '" + snippet(key) + "'");
    auto prefix = opts.fopen_keys.find(key);
    if (prefix != opts.fopen_keys.end()) {
      BV_CHECK(v.kind == Value::Kind::kString, where, ": fopen key '", key,
               "' must hold a file name");
      // The file would be opened by its name up to the NUL: "x.png\u0000/../../etc/passwd".
      BV_CHECK(v.s.find('\0') == std::string::npos, where, ": fopen key '", key,
               "' holds a file name with a NUL byte ('", snippet(v.s), "'); file names cannot");
      // (longer than Linux's PATH_MAX: no file has that name, and every message would quote it)
      BV_CHECK(v.s.size() <= 4096, where, ": fopen key '", key, "' holds a file name of ",
               v.s.size(), " bytes ('", snippet(v.s), "'); paths are at most 4096");
      bool download = std::count(opts.download_keys.begin(), opts.download_keys.end(), key) > 0;
      BV_CHECK(!(download && is_url(v.s)), where, ": download key '", key, "' holds the URL '",
               snippet(v.s), "'; bvlua downloads nothing: fetch the files and give local paths");
      v = Value::file(join_path(prefix->second, v.s));
    }
    if (key == "id") {
      ex[0].second = v;  // the file's own id replaces the index, as in big_vision
    } else {
      ex.emplace_back(key, std::move(v));
    }
  }
  return ex;
}

}  // namespace

Source load_jsonl(const JsonlOptions& opts) {
  std::ifstream in(opts.fname);
  BV_CHECK(in, "bv:jsonl: cannot open '", opts.fname, "'");
  for (const auto& k : opts.download_keys) {
    BV_CHECK(opts.fopen_keys.count(k), "bv:jsonl: download key '", k, "' is not in fopen_keys");
  }
  Source src;
  src.name = "bv:jsonl";
  std::string line;
  int64_t index = -1;  // index among non-empty lines, which start/stop select
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++index;
    if (index < opts.start || (opts.stop >= 0 && index >= opts.stop)) continue;
    std::string where = opts.fname + ":" + std::to_string(lineno);
    size_t id = src.examples.size();
    try {
      src.examples.push_back(parse_line(line, where, opts, id));
    } catch (const std::exception& e) {
      if (!opts.keep_bad_lines) throw;
      src.examples.push_back({{"id", Value::string(std::to_string(id))}});
      src.bad_lines[static_cast<int64_t>(id)] = e.what();
    }
    src.origins.push_back({opts.fname, lineno});
  }
  return src;
}

Source load_image_folder(const std::string& root) {
  namespace fs = std::filesystem;
  BV_CHECK(fs::is_directory(root), "bv:imagefolder: '", root, "' is not a directory");
  Source src;
  src.name = "bv:imagefolder";
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) src.class_names.push_back(entry.path().filename().string());
  }
  std::sort(src.class_names.begin(), src.class_names.end());
  BV_CHECK(!src.class_names.empty(), "bv:imagefolder: no class folders in '", root, "'");
  for (size_t label = 0; label < src.class_names.size(); ++label) {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(fs::path(root) / src.class_names[label])) {
      std::string ext = entry.path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      if (entry.is_regular_file() && (ext == ".jpg" || ext == ".jpeg" || ext == ".png")) {
        files.push_back(entry.path().string());
      }
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      Example ex;
      ex.emplace_back("id", Value::string(fs::relative(f, root).string()));
      ex.emplace_back("image", Value::file(f));
      ex.emplace_back("label", Value::integer(static_cast<int64_t>(label)));
      src.examples.push_back(std::move(ex));
      src.origins.push_back({f, 0});
    }
  }
  return src;
}

Source load_tfrecord(const std::vector<TFRecordShard>& shards, bool keep_bad) {
  BV_CHECK(!shards.empty(), "bv:tfrecord: no shards");
  auto index = std::make_shared<TFRecordIndex>(index_tfrecords(shards, keep_bad));
  Source src;
  src.name = "bv:tfrecord";
  src.bad_lines = index->bad;
  src.records = std::move(index);
  return src;
}

int64_t source_size(const Source& src) {
  return src.records ? src.records->size() : static_cast<int64_t>(src.examples.size());
}

std::string source_origin(const Source& src, int64_t i) {
  BV_CHECK(i >= 0 && i < source_size(src), src.name, ": example ", i, " out of range 0..",
           source_size(src) - 1);
  if (src.records) return record_where(*src.records, i);
  return src.origins[static_cast<size_t>(i)].str();
}

Example source_example(const Source& src, int64_t i) {
  BV_CHECK(i >= 0 && i < source_size(src), src.name, ": example ", i, " out of range 0..",
           source_size(src) - 1);
  auto bad = src.bad_lines.find(i);
  if (bad != src.bad_lines.end()) throw Error(bad->second);
  if (!src.records) return src.examples[static_cast<size_t>(i)];
  return parse_tf_example(read_record(*src.records, i), record_where(*src.records, i));
}

std::vector<int64_t> process_indices(int64_t n, int rank, int world) {
  BV_CHECK(world >= 1 && rank >= 0 && rank < world, "bad process rank ", rank, " of ", world);
  // array_split: the first n % world parts get one extra element.
  int64_t base = n / world, extra = n % world;
  int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  int64_t size = base + (rank < extra ? 1 : 0);
  std::vector<int64_t> out(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) out[static_cast<size_t>(i)] = begin + i;
  return out;
}

}  // namespace bv::data
