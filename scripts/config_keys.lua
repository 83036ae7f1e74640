-- Writes docs/config_keys.md, the reference of every config key a bvlua component declares
-- (bv.config_keys), from those declarations; tests/lua/config_keys_test.lua checks it is current.
--   build/bvlua run scripts/config_keys.lua [OUT]     (from the repository root)
local config_keys = require "bv.config_keys"

local out = arg and arg[1] or "docs/config_keys.md"
local f = assert(io.open(out, "w"))
f:write(config_keys.markdown())
f:close()
print("wrote " .. out)
