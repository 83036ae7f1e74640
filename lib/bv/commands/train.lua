-- bvlua train: resolve a config (file, ':ARGS', --config.* overrides), save it to the workdir
-- and run the trainer it names (config.trainer, default "classification").
local config = require "bv.config"

local M = {}

local USAGE_LINE =
  "usage: bvlua train CONFIG[:ARGS] (--workdir DIR | --dry-run) [--debug] [--config.KEY=VALUE ...]"

M.USAGE = USAGE_LINE .. [[


Loads the Lua config CONFIG (a file returning a table or a function get_config(ARGS)),
applies the overrides in order and writes the resolved config to DIR/config.json.

options:
  --workdir DIR          where the run writes its files (required unless --dry-run)
  --dry-run              print the resolved config as JSON and stop
  --debug                on an error (a Lua error, the NaN guard), open a REPL with the
                         trainer's state as globals: config, model, params, opt, batch, step,
                         err (and run, the workdir); exit with code 1 when it ends
  --config.KEY=VALUE     override an existing config field (also --config.KEY VALUE);
                         the value is converted to the field's current type, tables take a
                         Python or Lua literal such as [1, 2] or {'depth': 50}
  --noconfig.KEY         set a boolean field to false
  -h, --help             show this help

exit codes:
  0  success (trained, or --dry-run or --help)
  1  an error (config, override, data, training; the message names it)
  2  usage error
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

-- The trainer a config names: `trainer = "classification"` (the default) is
-- lib/bv/trainers/classification.lua; a path ending in .lua is a trainer file of the user's own.
-- A trainer is a function(config, workdir, run).
function M.find_trainer(name)
  name = name or "classification"
  local trainer
  if name:match("%.lua$") then
    local chunk, err = loadfile(name, "t")
    if not chunk then error("trainer '" .. name .. "': " .. err, 0) end
    trainer = chunk()
  else
    local modname = "bv.trainers." .. name
    if not package.searchpath(modname, package.path) then
      error(string.format("unknown trainer '%s' (no lib/bv/trainers/%s.lua; give a .lua file "
        .. "for a trainer of your own)", name, name:gsub("%.", "/")), 0)
    end
    trainer = require(modname)
  end
  if type(trainer) ~= "function" then
    error("trainer '" .. name .. "' must return a function(config, workdir, run)", 0)
  end
  return trainer
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
  local trainer = M.find_trainer(cfg.trainer)
  local run = {config_file = opts.config}
  if not opts.debug then
    trainer(cfg, opts.workdir, run)
    return 0
  end
  local failure
  local ok = xpcall(trainer, function(e)
    failure = {message = tostring(e), traceback = debug.traceback(tostring(e), 2)}
  end, cfg, opts.workdir, run)
  if ok then return 0 end
  M.debug_repl(failure, run.state or {}, cfg, opts.workdir)
  return 1
end

-- `--debug`: the error and its traceback on stderr, then a REPL in which the trainer's last
-- state can be examined before the process exits.
function M.debug_repl(failure, state, cfg, workdir)
  io.stdout:write("\n")
  io.stderr:write("bvlua train: ", failure.traceback, "\n")
  io.stderr:flush()
  local globals = {config = state.config or cfg, model = state.model, params = state.params,
                   opt = state.opt, batch = state.batch, step = state.step, err = failure.message}
  local ok, run = pcall(function() return require("bv.inspect").run(workdir) end)
  if ok then globals.run = run end
  require("bv.repl").start({globals = globals, banner = "--debug: the training failed at step "
    .. tostring(state.step) .. ": " .. failure.message
    .. "\nglobals: config, model, params, opt, batch, step, err, run; Ctrl-D exits (code 1)"})
end

return M
