// Fuzzes bv.literal (lib/bv/literal.lua), the Python/Lua literal parser behind pp arguments and
// --config overrides: the input is the text. parse must return a value or raise a message; a
// value it returns must survive bv.json's encoder (which raises for what JSON cannot hold), and
// parse_at from the first byte must stop inside the text (or just past its end).
#include <cstddef>
#include <cstdint>

#include "lua_host.h"

namespace {

constexpr const char* kDriver = R"lua(
local literal = require "bv.literal"
local json = require "bv.json"
return function(s)
  local ok, v = fuzz_try(literal.parse, s)
  if ok and type(v) == "table" then fuzz_try(json.encode, v) end
  local ok2, _, pos = fuzz_try(literal.parse_at, s, 1)
  if ok2 and (math.type(pos) ~= "integer" or pos < 1 or pos > #s + 1) then
    error("parse_at returned the position " .. tostring(pos) .. " for a text of " .. #s
          .. " bytes")
  end
end
)lua";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bv::fuzz::run_lua_driver("literal_fuzz", kDriver, data, size);
  return 0;
}
