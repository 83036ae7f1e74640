#include "data/sources.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "core/error.h"

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

void flatten_numbers(const json& j, std::vector<double>& out, std::vector<int64_t>& shape,
                     size_t depth, bool& all_int, const std::string& where) {
  if (!j.is_array()) {
    all_int = all_int && (j.is_number_integer() || j.is_boolean());
    out.push_back(j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>());
    return;
  }
  if (shape.size() == depth) shape.push_back(static_cast<int64_t>(j.size()));
  BV_CHECK(shape[depth] == static_cast<int64_t>(j.size()), where, ": ragged nested list");
  for (const auto& e : j) flatten_numbers(e, out, shape, depth + 1, all_int, where);
}

// A JSON value as a pipeline Value: lists of numbers become tensors (int64 or float32, as
// tf.constant would type them), lists of strings stay lists.
Value from_json(const json& j, const std::string& where) {
  switch (j.type()) {
    case json::value_t::null: return Value::none();
    case json::value_t::boolean: return Value::boolean(j.get<bool>());
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return Value::integer(j.get<int64_t>());
    case json::value_t::number_float: return Value::number(j.get<double>());
    case json::value_t::string: return Value::string(j.get<std::string>());
    case json::value_t::array: {
      if (!j.empty() && all_of_kind(j, true)) {
        Value v;
        v.kind = Value::Kind::kList;
        for (const auto& e : j) v.list.push_back(from_json(e, where));
        return v;
      }
      BV_CHECK(all_of_kind(j, false), where, ": lists must hold only numbers or only strings");
      std::vector<double> flat;
      std::vector<int64_t> shape;
      bool all_int = true;
      flatten_numbers(j, flat, shape, 0, all_int, where);
      at::Tensor t = at::tensor(flat, at::kDouble).reshape(shape);
      return Value::of_tensor(t.to(all_int ? at::kLong : at::kFloat));
    }
    default: fail(where, ": nested objects are not supported (big_vision's jsonl has none)");
  }
}

bool is_url(const std::string& s) { return s.find("://") != std::string::npos; }

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
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      fail(where, ": bad JSON: ", e.what());
    }
    BV_CHECK(j.is_object(), where, ": expected a JSON object, got ", j.type_name());
    Example ex;
    ex.emplace_back("id", Value::string(std::to_string(src.examples.size())));
    for (const auto& [key, value] : j.items()) {
      Value v = from_json(value, where + " key '" + key + "'");
      auto prefix = opts.fopen_keys.find(key);
      if (prefix != opts.fopen_keys.end()) {
        BV_CHECK(v.kind == Value::Kind::kString, where, ": fopen key '", key,
                 "' must hold a file name");
        bool download = std::count(opts.download_keys.begin(), opts.download_keys.end(), key) > 0;
        BV_CHECK(!(download && is_url(v.s)), where, ": download key '", key, "' holds the URL '",
                 v.s, "'; bvlua downloads nothing: fetch the files and give local paths");
        v = Value::file(join_path(prefix->second, v.s));
      }
      if (key == "id") {
        ex[0].second = v;  // the file's own id replaces the index, as in big_vision
      } else {
        ex.emplace_back(key, std::move(v));
      }
    }
    src.examples.push_back(std::move(ex));
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
