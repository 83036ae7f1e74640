// Fuzzes bv.config's text parsers (lib/bv/config.lua): the input is lines.
//   line 1       a config's ARGS ("res=128,flip,name=x"): parse_arg with an ordered spec, with
//                a named one and with {lazy = true}
//   lines 2...   the words of `bvlua train ...`: parse_cli; each --config.KEY=VALUE it returns
//                is then applied with override to a config holding every kind of field, which
//                to_json must then write or refuse with a message
#include <cstddef>
#include <cstdint>

#include "lua_host.h"

namespace {

constexpr const char* kDriver = R"lua(
local config = require "bv.config"
local null = require("bv.literal").null

local function sample()
  return {
    lr = 0.03, total_steps = 100, seed = 0, name = "vit", flip = true, wd = 1e-4,
    input = {batch_size = 512, pp = "decode|resize(224)", data = {name = "imagenet", split = "train"}},
    schedule = {{"warmup", 10}, {"cosine", 90}},
    model = {variant = "B/16", out_dim = {null, 768}, dropout = 0.0, head_zeroinit = false},
    log = {},
  }
end

return function(s)
  local lines = {}
  for line in (s .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  local arg = lines[1]
  fuzz_try(config.parse_arg, arg, {{"res", 224}, {"flip", true}, {"name", "x"}, {"lr", 0.1},
                                   {"n", {nil, "int"}}, {"f", {nil, "float"}}})
  fuzz_try(config.parse_arg, arg, {res = 224, runlocal = false, mode = {"a", "string"}})
  fuzz_try(config.parse_arg, arg, {}, {lazy = true})
  local argv = {}
  for i = 2, #lines do argv[#argv + 1] = lines[i] end
  local ok, r, err = fuzz_try(config.parse_cli, argv)
  if not ok or not r then return end
  local cfg = sample()
  for _, o in ipairs(r.overrides) do fuzz_try(config.override, cfg, o[1], o[2]) end
  fuzz_try(config.to_json, cfg, 2)
  fuzz_try(config.get, cfg, r.overrides[1] and r.overrides[1][1] or "lr")
end
)lua";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bv::fuzz::run_lua_driver("config_fuzz", kDriver, data, size);
  return 0;
}
