-- The `bv` library every bvlua state starts with (as the global `bv`). The native functions come
-- from `bv._C` (tensors, rng, fs, machine facts); Lua submodules such as bv.config load on first
-- use, so `bv.config.parse_arg(...)` works without a require.
local C = require "bv._C"

local bv = {}
for k, v in pairs(C) do bv[k] = v end

setmetatable(bv, {
  __index = function(t, name)
    if type(name) ~= "string" then return nil end
    local modname = "bv." .. name
    if not package.searchpath(modname, package.path) then return nil end
    local mod = require(modname)
    rawset(t, name, mod)
    return mod
  end,
})

-- Python's None where a Lua nil can't stand (inside lists: out_dim = {bv.null, 768}).
bv.null = require("bv.literal").null

-- Tensors with at most this many elements print their values; larger ones print a summary.
bv.print_threshold = 1000

-- print() as in lua.c, except that a small tensor shows its values (tostring stays one line).
local raw_print = print
function print(...)
  local n = select("#", ...)
  local args = {...}
  for i = 1, n do
    local v = args[i]
    if bv.is_tensor(v) and v:numel() <= bv.print_threshold then
      args[i] = v:format()
    else
      args[i] = tostring(v)
    end
  end
  raw_print(table.unpack(args, 1, n))
end

return bv
