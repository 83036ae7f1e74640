-- bv.lines: the "lines" data set of big_vision's GPU tutorial, for the configs that train on it
-- (configs/lines/*.lua): count where two polylines cross (0, 1 or 2). scripts/make_lines.lua
-- draws it: DIR/{train,val,test}.jsonl, one {"image": "<file>", "label": c} per line, the PNGs
-- beside them.
--   local lines = require "bv.lines"
--   c.input.data = lines.data("data/lines", "train", 128)    -- the tutorial's 128 examples
--   return {get_config = get_config, prepare = lines.prepare}  -- draws it when missing
local M = {}

M.DIR = "data/lines"

-- A big_vision data config for one split of the data set in `dir`; `stop`: only the first
-- examples of the split.
function M.data(dir, split, stop)
  return {name = "bv:jsonl", fname = dir .. "/" .. split .. ".jsonl",
          fopen_keys = {image = dir}, stop = stop}
end

-- scripts/make_lines.lua, as a path from the current directory when it is below it.
local function script_path()
  return require("bv.config").tree_path("scripts/make_lines.lua")
end

-- For a missing data file of the lines data set ({dir}/train.jsonl, val or test, a dir with
-- "lines" in its name), the command that draws it: "bvlua run scripts/make_lines.lua
-- data/lines"; nil for other files.
function M.how_to_make(fname)
  local dir = fname:match("^(.*)/train%.jsonl$") or fname:match("^(.*)/val%.jsonl$")
              or fname:match("^(.*)/test%.jsonl$")
  if not dir or not dir:find("lines") then return nil end
  return string.format("bvlua run %s %s", script_path(), dir)
end

-- A config's `prepare` (run once by `bvlua train`, before any data is read): draws the data set
-- into the directory of the config's training data when its files are missing (about 20 s for
-- the default 10,000 / 1,000 / 1,000 images). Other files are left alone.
function M.prepare(c)
  local fname = c.input and c.input.data and c.input.data.fname
  if type(fname) ~= "string" or not fname:match("/train%.jsonl$") or bv.fs.exists(fname) then
    return
  end
  local dir = fname:match("^(.*)/train%.jsonl$")
  local script = script_path()
  local cmd = string.format("'%s' run '%s' '%s' 1>&2", bv.dist.executable(), script, dir)
  io.stderr:write("bv.lines: drawing the lines data set into ", dir, "\n")
  if not os.execute(cmd) then error("bv.lines: could not make " .. dir .. " (" .. cmd .. ")", 0) end
end

return M
