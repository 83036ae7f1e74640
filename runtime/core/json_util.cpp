#include "core/json_util.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace bv {

size_t json_depth_excess(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i + 1;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return 0;
}

nlohmann::json parse_json(std::string_view text, const std::string& where, int max_depth) {
  if (size_t at = json_depth_excess(text, max_depth)) {
    fail(where, ": bad JSON: nested deeper than ", max_depth, " levels at byte ", at);
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, ..." without the bracketed id.
    std::string what = e.what();
    size_t close = what.find("] ");
    if (what.rfind("[json.exception.", 0) == 0 && close != std::string::npos) {
      what = what.substr(close + 2);
    }
    fail(where, ": bad JSON: ", what);
  }
}

}  // namespace bv
