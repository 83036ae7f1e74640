-- bv.config_source: which config file a workdir was trained from, so that what opens the
-- workdir later (`bvlua repl runs/x`) can run that config's register_pp_ops: a pp string in
-- config.json may name an op the config defines itself (configs/lines/resnet.lua's
-- lines_flip_ud).
--
--   config_source.write(workdir, "configs/lines/resnet.lua:runlocal")   -- by `bvlua train`
--   config_source.read(workdir) -> {spec =, file =, args =} or nil
--   config_source.register_pp_ops(workdir, config) -> registered (bool), warning (one line)
--                                                      or nil
--
-- The record, WORKDIR/config_source.json, holds the spec as given and the file's absolute path
-- (the REPL may run from another directory).
local json = require "bv.json"

local M = {}

M.FILE_NAME = "config_source.json"

local function absolute(path)
  if path:sub(1, 1) == "/" then return path end
  return bv.fs.cwd() .. "/" .. path:gsub("^%./", "")
end

-- Records `spec` ("path.lua" or "path.lua:ARGS", as given to `bvlua train`) in the workdir.
function M.write(workdir, spec)
  local file, args = spec:match("^([^:]*):(.*)$")
  file = file or spec
  local record = {spec = spec, file = absolute(file), args = args}
  bv.fs.write_file(workdir .. "/" .. M.FILE_NAME, json.encode(record) .. "\n")
end

-- The record, or nil when the workdir has none (a run from before it was kept, or a run not
-- started by `bvlua train`). A record that is not what write() writes is an error naming it.
function M.read(workdir)
  local path = workdir .. "/" .. M.FILE_NAME
  if not bv.fs.exists(path) then return nil end
  local ok, record = pcall(json.decode, bv.fs.read_file(path))
  if not ok or type(record) ~= "table" or type(record.file) ~= "string" then
    error(string.format("%s: not a config record (want {\"spec\": ..., \"file\": ...})", path), 0)
  end
  return record
end

local function first_line(s) return (tostring(s):match("^[^\n]*")) end

-- The ops that the pp strings of `config` (keys pp and pp_fn, at any depth) name and no one has
-- registered, sorted.
function M.unknown_ops(config)
  local found = {}
  local function walk(t, depth)
    if depth > 20 then return end
    for k, v in pairs(t) do
      if type(v) == "table" then
        walk(v, depth + 1)
      elseif (k == "pp" or k == "pp_fn") and type(v) == "string" then
        for _, seg in ipairs(bv.pp.segments(v)) do
          local ok, name = pcall(bv.pp.parse_op, seg)
          if ok and not bv.pp.get(name) then found[name] = true end
        end
      end
    end
  end
  if type(config) == "table" then walk(config, 1) end
  local out = {}
  for name in pairs(found) do out[#out + 1] = name end
  table.sort(out)
  return out
end

-- Runs the recorded config's register_pp_ops in this Lua state. Returns whether it did, and a
-- one-line warning when it could not and `config` (the workdir's config.json) names ops no one
-- has registered: the record missing, the file moved or deleted, its register_pp_ops failing.
function M.register_pp_ops(workdir, config)
  local function warn(fmt, ...)
    local unknown = M.unknown_ops(config)
    if #unknown == 0 then return false, nil end
    return false, string.format(fmt, ...) .. string.format(": its pp names %s, unknown here",
                                                           table.concat(unknown, ", "))
  end
  local ok, record = pcall(M.read, workdir)
  if not ok then return warn("%s", first_line(record)) end
  if not record then
    return warn("%s does not say which config file it was trained from (no %s; "
      .. "bv.config.register_pp_ops('CONFIG.lua') registers a config's ops)", workdir,
      M.FILE_NAME)
  end
  if not bv.fs.exists(record.file) then
    return warn("%s was trained from %s, which is not there any more (moved or deleted)",
                workdir, record.file)
  end
  local spec = record.file .. (record.args and (":" .. record.args) or "")
  local done, err = pcall(require("bv.config").register_pp_ops, spec)
  if not done then
    return warn("the register_pp_ops of %s failed (%s)", record.file, first_line(err))
  end
  return err, nil
end

return M
