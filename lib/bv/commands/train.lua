-- bvlua train: resolve a config (file, ':ARGS', --config.* overrides), save it to the workdir
-- and, once the trainer exists, train. Today it stops after writing config.json.
local config = require "bv.config"

local M = {}

local USAGE_LINE =
  "usage: bvlua train CONFIG[:ARGS] (--workdir DIR | --dry-run) [--config.KEY=VALUE ...]"

M.USAGE = USAGE_LINE .. [[


Loads the Lua config CONFIG (a file returning a table or a function get_config(ARGS)),
applies the overrides in order and writes the resolved config to DIR/config.json.

options:
  --workdir DIR          where the run writes its files (required unless --dry-run)
  --dry-run              print the resolved config as JSON and stop
  --config.KEY=VALUE     override an existing config field (also --config.KEY VALUE);
                         the value is converted to the field's current type, tables take a
                         Python or Lua literal such as [1, 2] or {'depth': 50}
  --noconfig.KEY         set a boolean field to false
  -h, --help             show this help

exit codes:
  0  success (--dry-run or --help)
  1  error in the config or an override
  2  usage error
  3  config resolved and written, but training itself is not built yet
]]

local function usage_error(msg)
  io.stderr:write("bvlua train: ", msg, "\n", USAGE_LINE, "\n")
  return 2
end

-- The filesystem helpers are provided natively by the bvlua binary.
local function native_fs()
  local bv = rawget(_G, "bv")
  if type(bv) ~= "table" or type(bv.fs) ~= "table" then
    error("bvlua train: bv.fs is missing; run this through the bvlua binary", 0)
  end
  return bv.fs
end

-- Runs `bvlua train` with the words after "train"; returns the process exit code.
function M.main(argv)
  local opts, err = config.parse_cli(argv or {})
  if not opts then return usage_error(err) end
  if opts.help then
    io.stdout:write(M.USAGE)
    return 0
  end
  -- Checked before loading so a long config is not evaluated just to fail on the flags.
  if not opts.workdir and not opts.dry_run then
    return usage_error("--workdir is required (or use --dry-run)")
  end
  local cfg = config.load(opts.config)
  for _, o in ipairs(opts.overrides) do config.override(cfg, o[1], o[2]) end
  local text = config.to_json(cfg, 2) .. "\n"
  local saved_to
  if opts.workdir then
    local fs = native_fs()
    fs.mkdirs(opts.workdir)
    saved_to = opts.workdir:gsub("/+$", "") .. "/config.json"
    fs.write_file(saved_to, text)
  end
  if opts.dry_run then
    io.stdout:write(text)
    return 0
  end
  io.stderr:write("bvlua train: config resolved and written to ", saved_to,
                  "; training itself is not built yet\n")
  return 3
end

return M
