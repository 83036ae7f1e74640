// parse_json (runtime/core/json_util.h): JSON from files with bounded nesting and errors that
// name where the text came from.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>

#include "core/json_util.h"
#include "test_util.h"

using bv::test::contains;
using bv::test::error_of;

namespace {

std::string nested(int depth, const std::string& inner = "") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

}  // namespace

TEST_CASE("parse_json accepts kMaxJsonDepth levels and refuses one more", "[json]") {
  CHECK(bv::parse_json(nested(bv::kMaxJsonDepth, "1"), "f:1").is_array());
  std::string msg = error_of([] { bv::parse_json(nested(bv::kMaxJsonDepth + 1), "f:7"); });
  CHECK(msg == "f:7: bad JSON: nested deeper than 256 levels at byte 257");
  // Objects count as levels too; a smaller limit applies where a caller gives one.
  CHECK(contains(error_of([] { bv::parse_json(R"({"a": {"b": [1]}})", "x", 2); }), "at byte 13"));
  CHECK(bv::parse_json(R"({"a": {"b": 1}})", "x", 2).is_object());
}

TEST_CASE("parse_json: 60000 levels are an error, not a stack overflow", "[json]") {
  std::string msg = error_of([] { bv::parse_json("{\"v\": " + nested(60000) + "}", "d.jsonl:3"); });
  CHECK(contains(msg, "d.jsonl:3: bad JSON: nested deeper than 256 levels"));
}

TEST_CASE("parse_json: brackets inside strings are not nesting", "[json]") {
  std::string many = std::string(1000, '[');
  auto j = bv::parse_json("[\"" + many + "\", \"\\\"" + many + "\", \"\\\\\"]", "s");
  CHECK(j.size() == 3);
  CHECK(j[0].get<std::string>() == many);
  CHECK(j[1].get<std::string>() == "\"" + many);
  // after an escaped backslash the string ends: the brackets that follow count
  std::string msg = error_of([] { bv::parse_json("[\"\\\\\", " + nested(300) + "]", "t"); });
  CHECK(contains(msg, "t: bad JSON: nested deeper than 256 levels at byte 263"));
}

TEST_CASE("parse_json: syntax errors and number overflow name where", "[json]") {
  std::string msg = error_of([] { bv::parse_json("{\"x\": 1e400}", "big.jsonl:2"); });
  CHECK(contains(msg, "big.jsonl:2: bad JSON: number overflow parsing '1e400'"));
  CHECK(!contains(msg, "[json.exception"));
  msg = error_of([] { bv::parse_json("{not json", "bad.jsonl:9"); });
  CHECK(contains(msg, "bad.jsonl:9: bad JSON: parse error at line 1, column 3"));
}

TEST_CASE("json_depth_excess finds the first byte past the limit", "[json]") {
  CHECK(bv::json_depth_excess("[[]][[]]", 2) == 0);
  CHECK(bv::json_depth_excess("[[]][[[]]]", 2) == 7);
  CHECK(bv::json_depth_excess("\"[[[\"", 0) == 0);
  CHECK(bv::json_depth_excess("1", 0) == 0);
  CHECK(bv::json_depth_excess("{}", 0) == 1);
}
