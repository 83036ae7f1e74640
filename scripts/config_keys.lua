-- Writes lib/bv/CONFIG_KEYS.md, the reference of every config key a bvlua component declares
-- (bv.config_keys), from those declarations; tests/lua/config_keys_test.lua checks it is current.
--   build/bvlua run scripts/config_keys.lua [OUT]     (from the repository root)
local out = arg and arg[1] or "lib/bv/CONFIG_KEYS.md"
local f = assert(io.open(out, "w"))
f:write(require("bv.config_keys").markdown())
f:close()
print("wrote " .. out)
