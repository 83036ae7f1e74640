// Fuzzes the pp mini-language (lib/bv/pp/init.lua): the input is a pp string. segments splits
// it, parse_op parses each "name(args)" segment, and build binds every op's arguments to its
// registered signature and runs the op's factory, with the real registry (ops_general,
// ops_image, ops_text, randaug, paligemma: each file registers its ops when bv.pp loads).
// Factories that call native bvlua functions fail with the host's message (lua_host.h), so
// nothing reads files or runs tensors here; the ops themselves are not run.
#include <cstddef>
#include <cstdint>

#include "lua_host.h"

namespace {

constexpr const char* kDriver = R"lua(
local pp = require "bv.pp"
assert(#pp.names() >= 25, "bv.pp registered only " .. #pp.names() .. " ops")
return function(s)
  local ok, segs = fuzz_try(pp.segments, s)
  if ok then
    for _, seg in ipairs(segs) do fuzz_try(pp.parse_op, seg) end
  end
  fuzz_try(pp.build, s)
end
)lua";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bv::fuzz::run_lua_driver("pp_fuzz", kDriver, data, size);
  return 0;
}
