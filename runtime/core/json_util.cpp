#include "core/json_util.h"

#include <nlohmann/json.hpp>

#include <vector>

#include "core/error.h"
#include "core/quote.h"

namespace bv {

namespace {

using json = nlohmann::json;

// nlohmann's DOM builder that also refuses integers past int64: nlohmann reads an integer too
// large for uint64 as a float (99999999999999999999999999 becomes 1e26), so its literal, which
// has no '.' and no exponent, says what it was. Keeps the key of each open object for the error.
class StrictDom : public nlohmann::detail::json_sax_dom_parser<json> {
 public:
  StrictDom(json& root, const std::string& where) : json_sax_dom_parser(root), where_(where) {}

  bool start_object(std::size_t n) {
    keys_.emplace_back();
    return json_sax_dom_parser::start_object(n);
  }
  bool key(string_t& k) {
    keys_.back() = k;
    return json_sax_dom_parser::key(k);
  }
  bool end_object() {
    keys_.pop_back();
    return json_sax_dom_parser::end_object();
  }
  bool number_float(number_float_t value, const string_t& literal) {
    if (literal.find_first_of(".eE") == string_t::npos) {
      std::string key = keys_.empty() ? "" : str(" key '", snippet(keys_.back()), "'");
      fail(where_, key, ": the integer ", snippet(literal), " does not fit in int64");
    }
    return json_sax_dom_parser::number_float(value, literal);
  }

 private:
  const std::string& where_;
  std::vector<std::string> keys_;
};

// nlohmann's message without its "[json.exception.parse_error.101] " id, and the input it
// quotes ("last read: '...'", "number overflow parsing '...'") cut to a snippet.
std::string parse_message(const json::exception& e) {
  std::string what = e.what();
  size_t close = what.find("] ");
  if (what.rfind("[json.exception.", 0) == 0 && close != std::string::npos) {
    what = what.substr(close + 2);
  }
  size_t open = what.find('\'');
  size_t end = what.rfind('\'');
  if (open == std::string::npos || end <= open) return snippet(what);
  return what.substr(0, open + 1) +
         snippet(std::string_view(what).substr(open + 1, end - open - 1)) + what.substr(end);
}

}  // namespace

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
  json out;
  try {
    StrictDom dom(out, where);
    json::sax_parse(text, &dom);
  } catch (const json::exception& e) {
    fail(where, ": bad JSON: ", parse_message(e));
  }
  return out;
}

}  // namespace bv
