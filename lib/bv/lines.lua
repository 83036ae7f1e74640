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

-- A config's `prepare` draws the whole data set (make_lines' defaults): 12,000 PNGs, 37 MB of
-- files, 49 MB on disk.
M.DRAW_SIZE = "12,000 images, 49 MB"

-- Set to 1, it lets prepare draw into a directory outside the current one.
M.ANYWHERE_ENV = "BV_LINES_ANYWHERE"

-- The directories that name the current directory: bv.fs.cwd() (symbolic links resolved) and,
-- when it is a directory, $PWD (the shell's name for it, through a symlinked path as the user
-- typed it). Neither ends in "/" except the root "/".
local function cwd_names()
  local names = {bv.fs.cwd()}
  local pwd = os.getenv("PWD")
  if pwd and pwd:sub(1, 1) == "/" and pwd ~= names[1] and bv.fs.is_dir(pwd) then
    names[2] = pwd
  end
  for i, name in ipairs(names) do
    names[i] = name:gsub("/+$", "")
    if names[i] == "" then names[i] = "/" end
  end
  return names
end

-- Whether the relative `path` stays at or below where it starts (never climbs above it with
-- "..").
local function stays_below(path)
  local depth = 0
  for seg in path:gmatch("[^/]+") do
    if seg == ".." then depth = depth - 1 elseif seg ~= "." then depth = depth + 1 end
    if depth < 0 then return false end
  end
  return true
end

-- Whether `path` is the current directory or lies below it: relative and never climbing above
-- it with "..", or absolute and at or below one of the current directory's names (cwd_names:
-- the resolved one, or $PWD through a symbolic link). The current directory "/" holds every
-- absolute path.
function M.under_cwd(path)
  if path:sub(1, 1) ~= "/" then return stays_below(path) end
  for _, cwd in ipairs(cwd_names()) do
    if cwd == "/" then return stays_below(path) end
    if path == cwd or path:sub(1, #cwd + 1) == cwd .. "/" then
      if stays_below(path:sub(#cwd + 2)) then return true end
    end
  end
  return false
end

-- Whether the data set in `dir` is all there: train.jsonl, val.jsonl and test.jsonl
-- (scripts/make_lines.lua writes each split's jsonl after its images, in that order; --test 0
-- still writes an empty test.jsonl). One missing, and a drawing was cut short or is under way.
function M.complete(dir)
  for _, split in ipairs({"train", "val", "test"}) do
    if not bv.fs.exists(dir .. "/" .. split .. ".jsonl") then return false end
  end
  return true
end

-- What prepare would do for config `c`: nil when its training data is not the lines data set's
-- train.jsonl, or when that directory holds the whole data set already (M.complete), else
-- {dir = DIR to draw into, refused = the message when DIR is outside the current directory
-- (M.under_cwd) and BV_LINES_ANYWHERE is not 1}.
function M.plan(c)
  local fname = c.input and c.input.data and c.input.data.fname
  local dir = type(fname) == "string" and fname:match("^(.*)/train%.jsonl$")
  if not dir or M.complete(dir) then return nil end
  local plan = {dir = dir}
  if not M.under_cwd(dir) and os.getenv(M.ANYWHERE_ENV) ~= "1" then
    plan.refused = string.format("bv.lines: refusing to draw the lines data set (%s) into %s "
      .. "(input.data.fname: %s), outside the current directory %s: is the path mistyped? To "
      .. "draw it there, run bvlua run %s %s, or set %s=1 and train again", M.DRAW_SIZE, dir,
      fname, bv.fs.cwd(), script_path(), dir, M.ANYWHERE_ENV)
  end
  return plan
end

-- A config's `prepare` (run once by `bvlua train`, before any data is read): draws the data set
-- into the directory of the config's training data when its files are missing (about 20 s for
-- the default 10,000 / 1,000 / 1,000 images), only below the current directory unless
-- BV_LINES_ANYWHERE=1 (M.plan). Other files are left alone.
function M.prepare(c)
  local plan = M.plan(c)
  if not plan then return end
  if plan.refused then error(plan.refused, 0) end
  local cmd = string.format("'%s' run '%s' '%s' 1>&2", bv.dist.executable(), script_path(),
                            plan.dir)
  io.stderr:write(string.format("bv.lines: drawing the lines data set (%s) into %s (about 20 s)\n",
                                M.DRAW_SIZE, plan.dir))
  if not os.execute(cmd) then
    error("bv.lines: could not make " .. plan.dir .. " (" .. cmd .. ")", 0)
  end
end

return M
