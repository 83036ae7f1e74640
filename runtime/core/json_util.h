// JSON text from outside the program (JSON-L lines, manifests, headers) parsed with a bound on
// nesting: nlohmann's parser keeps nesting off the C stack, but dump() and every walker over the
// parsed tree recurse, so a line of 60,000 '[' would overflow the stack there. Inputs nested
// deeper than kMaxJsonDepth are refused before nlohmann builds anything.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>

namespace bv {

inline constexpr int kMaxJsonDepth = 256;

// Parses `text`; every failure is a bv::Error that starts with `where` (e.g. "data.jsonl:17"):
// syntax errors and numbers out of range ("bad JSON: number overflow parsing '1e400'"), integer
// literals past uint64 ("key 'label': the integer 99999999999999999999 does not fit in int64";
// nlohmann would make them floats), and arrays/objects nested more than `max_depth` levels
// ("nested deeper than 256 levels at byte N", N 1-based). A JSON value that is not an array or
// object is depth 0, "[1]" is depth 1. Messages quote at most a snippet of `text` (core/quote.h).
nlohmann::json parse_json(std::string_view text, const std::string& where,
                          int max_depth = kMaxJsonDepth);

// The 1-based byte at which `text` opens its (max_depth + 1)-th nested array or object, or 0
// when it never does. Brackets inside strings do not count.
size_t json_depth_excess(std::string_view text, int max_depth);

}  // namespace bv
