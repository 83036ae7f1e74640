-- bv.inspect: looking inside checkpoints and runs, for the REPL (`bvlua repl PATH`) and scripts.
--
--   local ckpt = bv.inspect.checkpoint("vit.npz")   -- lazy: reads the index, not the arrays
--   ckpt:tree("img")                 -- an indented tree with dtypes, shapes, parameter counts
--   ckpt["img/head/kernel"]          -- one tensor, read now (ckpt:load(name) does the same)
--   ckpt:stats("head")               -- norm, mean, std, min, max of the tensors a pattern finds
--   ckpt:diff("other.npz")           -- which tensors changed, and by how much
--   ckpt:sub("params")               -- the same checkpoint seen from under "params/"
--
--   local run = bv.inspect.run("runs/x")   -- a workdir: config.json, metrics, checkpoints
--   run.metrics("val/prec@1")        -- steps, values
--   run.model()                      -- the model of the config, with the checkpoint's params
--   run.pp("val")(example)           -- an evaluator's pp function
--   run.predict("cat.png")           -- the model applied to an image file: {class = 2 (0-based,
--                                    -- as the data's labels), name =, prob =, top =, ...}
--
-- Patterns are Lua patterns found anywhere in a name (string.find), as in bv.ckpt.load_npz.
-- Tables of tensors print as trees through inspect.tree, which the REPL's printer uses too.
local json = require "bv.json"

local M = {}

-- ---------------------------------------------------------------------------------------------
-- Formatting

-- 1234567 -> "1,234,567".
function M.commas(n)
  local s = string.format("%d", n)
  local sign, digits = s:match("^(-?)(%d+)$")
  return sign .. digits:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", "")
end

-- 1536 -> "1.5 KB".
function M.bytes(n)
  local units = {"B", "KB", "MB", "GB", "TB"}
  local i = 1
  while n >= 1024 and i < #units do
    n, i = n / 1024, i + 1
  end
  return i == 1 and string.format("%d B", n) or string.format("%.1f %s", n, units[i])
end

function M.shape_str(shape)
  local parts = {}
  for i, d in ipairs(shape) do parts[i] = tostring(d) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

local function numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

local ITEMSIZE = {float64 = 8, float32 = 4, float16 = 2, bfloat16 = 2, int64 = 8, int32 = 4,
                  int16 = 2, int8 = 1, uint8 = 1, bool = 1}

-- Names in the order a person expects: "block_2" before "block_10".
function M.natural_less(a, b)
  local ia, ib = 1, 1
  while ia <= #a and ib <= #b do
    local na, ea = a:match("^(%d+)()", ia)
    local nb, eb = b:match("^(%d+)()", ib)
    if na and nb then
      local x, y = tonumber(na), tonumber(nb)
      if x ~= y then return x < y end
      if na ~= nb then return #na < #nb end
      ia, ib = ea, eb
    else
      local ca, cb = a:byte(ia), b:byte(ib)
      if ca ~= cb then return ca < cb end
      ia, ib = ia + 1, ib + 1
    end
  end
  return #a - ia < #b - ib
end

-- A value that prints as `text` (the REPL prints tostring of what has a __tostring).
local text_mt = {__name = "bv.Text", __tostring = function(t) return t.text end}
local function text(s, fields)
  local t = fields or {}
  t.text = s
  return setmetatable(t, text_mt)
end

-- Columns padded to their widest cell; `right` marks right-aligned columns by index.
function M.columns(rows, right)
  right = right or {}
  local widths = {}
  for _, row in ipairs(rows) do
    for j, cell in ipairs(row) do widths[j] = math.max(widths[j] or 0, utf8.len(cell) or #cell) end
  end
  local lines = {}
  for i, row in ipairs(rows) do
    local cells = {}
    for j, cell in ipairs(row) do
      local pad = string.rep(" ", widths[j] - (utf8.len(cell) or #cell))
      cells[j] = right[j] and pad .. cell or (j < #row and cell .. pad or cell)
    end
    lines[i] = table.concat(cells, "  ")
  end
  return table.concat(lines, "\n")
end

-- ---------------------------------------------------------------------------------------------
-- Trees of tensors

-- items: {{name = "a/b/c", shape = {...}, dtype = "float32", bytes = n (optional)}, ...}.
-- opts: title (first line), depth (levels shown; deeper folders fold into one line), max_rows
-- (picks the deepest depth that fits), noun ("parameters").
-- Folders show the parameters below them; "(N tensors)" marks a folded one.
function M.tree(items, opts)
  opts = opts or {}
  local root = {children = {}, count = 0, ntensors = 0}
  local total_bytes = 0
  for _, item in ipairs(items) do
    local node = root
    local n = numel(item.shape)
    root.count, root.ntensors = root.count + n, root.ntensors + 1
    total_bytes = total_bytes + (item.bytes or n * (ITEMSIZE[item.dtype] or 4))
    local parts = {}
    for part in (item.name .. "/"):gmatch("(.-)/") do parts[#parts + 1] = part end
    for i, part in ipairs(parts) do
      local child = node.children[part]
      if not child then
        child = {name = part, children = {}, count = 0, ntensors = 0}
        node.children[part] = child
      end
      child.count, child.ntensors = child.count + n, child.ntensors + 1
      if i == #parts then child.item = item end
      node = child
    end
  end

  local function rows_at(max_depth)
    local rows = {}
    local function walk(node, depth)
      local names = {}
      for name in pairs(node.children) do names[#names + 1] = name end
      table.sort(names, M.natural_less)
      for _, name in ipairs(names) do
        local child = node.children[name]
        local indent = string.rep("  ", depth - 1)
        local has_children = next(child.children) ~= nil
        if child.item then
          rows[#rows + 1] = {indent .. name, child.item.dtype, M.shape_str(child.item.shape),
                             M.commas(numel(child.item.shape))}
        end
        if has_children then
          local folded = max_depth and depth >= max_depth
          rows[#rows + 1] = {indent .. name .. "/",
                             folded and string.format("(%d tensors)", child.ntensors) or "", "",
                             M.commas(child.count)}
          if not folded then walk(child, depth + 1) end
        end
      end
    end
    walk(root, 1)
    return rows
  end

  local depth = opts.depth
  local rows = rows_at(depth)
  if not depth and opts.max_rows and #rows > opts.max_rows then
    depth = 1
    while true do
      local deeper = rows_at(depth + 1)
      if #deeper > opts.max_rows or #deeper == #rows_at(depth) then break end
      depth = depth + 1
    end
    rows = rows_at(depth)
  end
  local lines = {}
  if opts.title then lines[1] = opts.title end
  if #rows > 0 then lines[#lines + 1] = M.columns(rows, {[4] = true}) end
  lines[#lines + 1] = string.format("%s tensor%s, %s %s, %s", M.commas(root.ntensors),
    root.ntensors == 1 and "" or "s", M.commas(root.count), opts.noun or "parameters",
    M.bytes(total_bytes))
  return table.concat(lines, "\n")
end

-- The {name, shape, dtype} items of a table whose leaves are all tensors (flat "a/b" names,
-- nested tables, or both), or of a list of {name=, shape=} entries (model:param_shapes());
-- nil for anything else.
function M.tensor_items(t)
  if type(t) ~= "table" or getmetatable(t) ~= nil or next(t) == nil then return nil end
  if #t > 0 and type(t[1]) == "table" and type(t[1].name) == "string"
      and type(t[1].shape) == "table" then
    for i, e in pairs(t) do
      if math.type(i) ~= "integer" or type(e) ~= "table" or type(e.name) ~= "string"
          or type(e.shape) ~= "table" then
        return nil
      end
    end
    return t
  end
  local items, seen = {}, {}
  local function walk(node, prefix)
    if seen[node] then return false end
    seen[node] = true
    for k, v in pairs(node) do
      if type(k) ~= "string" then return false end
      local name = prefix == "" and k or prefix .. "/" .. k
      if bv.is_tensor(v) then
        items[#items + 1] = {name = name, shape = v:shape(), dtype = v:dtype()}
      elseif type(v) == "table" and getmetatable(v) == nil and next(v) ~= nil then
        if not walk(v, name) then return false end
      else
        return false
      end
      if #items > 1000000 then return false end
    end
    return true
  end
  if not walk(t, "") then return nil end
  table.sort(items, function(a, b) return a.name < b.name end)
  return items
end

-- ---------------------------------------------------------------------------------------------
-- Tensor statistics

-- norm, mean, std (population), min, max of a tensor, computed in float32 (float64 for float64
-- and integer tensors, where float32 would round).
function M.tensor_stats(t)
  local dtype = t:dtype()
  local f = t:to((dtype == "float32" or dtype == "float16" or dtype == "bfloat16") and "float32"
                 or "float64")
  if f:numel() == 0 then return {norm = 0, mean = 0 / 0, std = 0 / 0, min = 0 / 0, max = 0 / 0} end
  local mean = f:mean():item()
  local centered = f - mean
  return {norm = f:norm():item(), mean = mean, std = (centered * centered):mean():sqrt():item(),
          min = f:min():item(), max = f:max():item()}
end

local function num(x)
  if x ~= x then return "nan" end
  return string.format("%.4g", x)
end

-- ---------------------------------------------------------------------------------------------
-- Checkpoints

local Checkpoint = {}
-- `methods`: where the REPL's Tab finds them, since __index is a function (names load tensors).
local checkpoint_mt = {__name = "bv.Checkpoint", methods = Checkpoint}
checkpoint_mt.__index = function(self, key)
  local method = Checkpoint[key]
  if method ~= nil then return method end
  if type(key) ~= "string" then return nil end
  return self:load(key)
end
checkpoint_mt.__tostring = function(self) return self:summary() end

local function is_checkpoint(x) return getmetatable(x) == checkpoint_mt end

local function is_index(x)
  return type(x) == "userdata" and tostring(x):find("^bv%.CheckpointIndex") ~= nil
end

-- A view of `index` (bv.ckpt.open's object) from under `prefix` ("" for all of it).
local function new_view(index, prefix, root_entries)
  local entries, by_name = {}, {}
  for _, e in ipairs(root_entries) do
    if prefix == "" or e.name:sub(1, #prefix) == prefix then
      local rel = {name = e.name:sub(#prefix + 1), shape = e.shape, dtype = e.dtype,
                   bytes = e.bytes}
      entries[#entries + 1] = rel
      by_name[rel.name] = rel
    end
  end
  return setmetatable({_index = index, _prefix = prefix, _entries = entries, _by_name = by_name,
                       _root = root_entries}, checkpoint_mt)
end

-- A checkpoint opened lazily: an npz, a safetensors file, a training checkpoint directory, a
-- workdir (its latest checkpoint), or an index from bv.ckpt.open.
function M.checkpoint(path)
  if is_checkpoint(path) then return path end
  local index = is_index(path) and path or bv.ckpt.open(path)
  return new_view(index, "", index:entries())
end

-- The file the tensors are read from.
function Checkpoint:file() return self._index:file() end

-- "npz" or "safetensors".
function Checkpoint:format() return self._index:format() end

-- A training checkpoint's step (nil for npz and plain safetensors files).
function Checkpoint:step() return self._index:step() end

-- The entries {name, shape, dtype, bytes} whose names `pattern` finds (all without one).
function Checkpoint:entries(pattern)
  if pattern == nil then return self._entries end
  local out = {}
  for _, e in ipairs(self._entries) do
    if e.name:find(pattern) then out[#out + 1] = e end
  end
  return out
end

-- The names `pattern` finds, sorted.
function Checkpoint:names(pattern)
  local out = {}
  for i, e in ipairs(self:entries(pattern)) do out[i] = e.name end
  return out
end

-- One entry {name, shape, dtype, bytes}, or nil.
function Checkpoint:info(name) return self._by_name[name] end

-- One tensor, read from the file now.
function Checkpoint:load(name)
  if type(name) ~= "string" then error("checkpoint:load: expected a tensor name", 2) end
  return self._index:load(self._prefix .. name)
end

-- The number of parameters (elements) of the tensors `pattern` finds.
function Checkpoint:count(pattern)
  local n = 0
  for _, e in ipairs(self:entries(pattern)) do n = n + numel(e.shape) end
  return n
end

-- The same checkpoint seen from under `prefix` ("params" -> names without "params/").
function Checkpoint:sub(prefix)
  prefix = tostring(prefix):gsub("/+$", "") .. "/"
  local view = new_view(self._index, self._prefix .. prefix, self._root)
  if #view._entries == 0 then
    error(string.format("checkpoint %s has no tensors under '%s'", self:file(), prefix), 2)
  end
  return view
end

-- Every tensor under `prefix` (all without one), loaded: {name = tensor}, names relative to it.
function Checkpoint:params(prefix)
  local view = prefix and self:sub(prefix) or self
  local out = {}
  for _, e in ipairs(view._entries) do out[e.name] = view:load(e.name) end
  return out
end

-- What a training checkpoint's top-level folders hold (the rest, such as rng/, by its name).
local GROUP_NOUNS = {params = "parameters", opt = "optimizer state"}
local GROUP_ORDER = {params = 1, opt = 2}

-- A training checkpoint's tensors by top-level folder, {{name, tensors, count, bytes}, ...}
-- (params/ first, then opt/, then the rest by name); nil unless params/ is there beside others.
function Checkpoint:groups()
  local by_name, list = {}, {}
  for _, e in ipairs(self._entries) do
    local top = e.name:match("^([^/]+)/") or e.name
    local g = by_name[top]
    if not g then
      g = {name = top, tensors = 0, count = 0, bytes = 0}
      by_name[top] = g
      list[#list + 1] = g
    end
    g.tensors, g.count, g.bytes = g.tensors + 1, g.count + numel(e.shape), g.bytes + e.bytes
  end
  if not by_name.params or #list < 2 then return nil end
  table.sort(list, function(a, b)
    local ra, rb = GROUP_ORDER[a.name] or 3, GROUP_ORDER[b.name] or 3
    if ra ~= rb then return ra < rb end
    return a.name < b.name
  end)
  return list
end

local function plural(n, word) return M.commas(n) .. " " .. word .. (n == 1 and "" or "s") end

-- The file, its size and counts: one line, or for a training checkpoint one more line per
-- top-level folder, so its parameters (params/) and optimizer state (opt/) are counted apart
-- (Adam's state alone is twice the parameters).
function Checkpoint:summary()
  local step = self:step()
  local head = string.format("%s%s (%s%s)", self:file(),
    self._prefix ~= "" and (" under " .. self._prefix) or "", self:format(),
    step and (", step " .. step) or "")
  local groups = self:groups()
  if not groups then
    return string.format("%s: %s, %s parameters, %s", head, plural(#self._entries, "tensor"),
                         M.commas(self:count()), M.bytes(self:bytes()))
  end
  local rows = {}
  for i, g in ipairs(groups) do
    local noun = GROUP_NOUNS[g.name]
    rows[i] = {"  " .. (noun and string.format("%s (%s/):", noun, g.name) or g.name .. "/:"),
               M.commas(g.count), noun == "parameters" and "parameters" or "values",
               "in " .. plural(g.tensors, "tensor") .. ",", M.bytes(g.bytes)}
  end
  return string.format("%s: %s, %s\n%s", head, plural(#self._entries, "tensor"),
                       M.bytes(self:bytes()), M.columns(rows, {[2] = true, [5] = true}))
end

-- Bytes of the arrays in the file.
function Checkpoint:bytes()
  local n = 0
  for _, e in ipairs(self._entries) do n = n + e.bytes end
  return n
end

-- The tree of the tensors under `prefix` (all without one), `depth` levels deep (all without
-- one). Prints as text; .text holds it.
function Checkpoint:tree(prefix, depth)
  local view, title = self, self:summary()
  if prefix ~= nil and prefix ~= "" then
    view = self:sub(prefix)
    title = view:summary()
  end
  -- Beside the parameters, a training checkpoint holds optimizer state: its total is of values.
  return text(M.tree(view._entries, {title = title, depth = depth,
                                     noun = view:groups() and "values" or nil}))
end

-- {rows = {{name, dtype, shape, norm, mean, std, min, max}, ...}} for the tensors `pattern`
-- finds, each loaded in turn (none is kept). Prints as a table.
function Checkpoint:stats(pattern)
  local rows = {}
  for _, e in ipairs(self:entries(pattern)) do
    local s = M.tensor_stats(self:load(e.name))
    s.name, s.dtype, s.shape = e.name, e.dtype, e.shape
    rows[#rows + 1] = s
  end
  if #rows == 0 then
    error(string.format("checkpoint %s: no tensor name matches '%s'", self:file(),
                        tostring(pattern)), 2)
  end
  local cells = {{"name", "dtype", "shape", "norm", "mean", "std", "min", "max"}}
  for _, r in ipairs(rows) do
    cells[#cells + 1] = {r.name, r.dtype, M.shape_str(r.shape), num(r.norm), num(r.mean),
                         num(r.std), num(r.min), num(r.max)}
  end
  return text(M.columns(cells, {[4] = true, [5] = true, [6] = true, [7] = true, [8] = true}),
              {rows = rows})
end

-- Something diff can compare with: a checkpoint, a path, an index, or a table of tensors
-- (live parameters: flat "a/b" names or nested).
local function as_source(x)
  if is_checkpoint(x) then return x end
  if type(x) == "string" or is_index(x) then return M.checkpoint(x) end
  local items = type(x) == "table" and M.tensor_items(x)
  if not items then
    error("diff: compare with a checkpoint, a path, or a table of tensors, not a " .. type(x), 3)
  end
  local flat = {}
  for _, item in ipairs(items) do
    local v = x[item.name]
    if v == nil then v = require("bv.tree").get(x, item.name) end
    flat[item.name] = v
  end
  local by_name = {}
  for _, item in ipairs(items) do by_name[item.name] = item end
  return {
    _entries = items,
    info = function(_, name) return by_name[name] end,
    load = function(_, name) return flat[name] end,
    file = function() return "(tensors)" end,
  }
end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

-- Compares with `other` (see as_source) name by name, over the names `pattern` finds:
-- {changed = {{name, shape, max_abs, rel}, ...} (largest relative change first), same = {names},
--  only_here = {names}, only_there = {names}, reshaped = {{name, here, there}, ...}}.
-- rel = ||other - this|| / ||this||; values are compared in float32 (float64 for float64).
function Checkpoint:diff(other, pattern)
  local there = as_source(other)
  local names, seen = {}, {}
  for _, list in ipairs({self._entries, there._entries}) do
    for _, e in ipairs(list) do
      if not seen[e.name] and (pattern == nil or e.name:find(pattern)) then
        seen[e.name] = true
        names[#names + 1] = e.name
      end
    end
  end
  table.sort(names, M.natural_less)
  local r = {changed = {}, same = {}, only_here = {}, only_there = {}, reshaped = {}}
  for _, name in ipairs(names) do
    local a, b = self:info(name), there:info(name)
    if not b then
      r.only_here[#r.only_here + 1] = name
    elseif not a then
      r.only_there[#r.only_there + 1] = name
    elseif not same_shape(a.shape, b.shape) or a.dtype ~= b.dtype then
      r.reshaped[#r.reshaped + 1] = {name = name, here = a.dtype .. M.shape_str(a.shape),
                                     there = b.dtype .. M.shape_str(b.shape)}
    else
      local ta, tb = self:load(name), there:load(name)
      if ta:equal(tb) then
        r.same[#r.same + 1] = name
      else
        local kind = a.dtype == "float64" and "float64" or "float32"
        local fa = ta:to(kind)
        local d = tb:to(kind) - fa
        local norm_a = fa:norm():item()
        local norm_d = d:norm():item()
        r.changed[#r.changed + 1] = {name = name, shape = a.shape, max_abs = d:abs():max():item(),
                                     rel = norm_a > 0 and norm_d / norm_a or math.huge}
      end
    end
  end
  table.sort(r.changed, function(x, y) return x.rel > y.rel end)

  local lines = {string.format("%s -> %s: %d compared, %d changed, %d identical%s%s%s",
    self:file(), there:file(), #names - #r.only_here - #r.only_there, #r.changed, #r.same,
    #r.reshaped > 0 and (", " .. #r.reshaped .. " reshaped") or "",
    #r.only_here > 0 and (", " .. #r.only_here .. " only here") or "",
    #r.only_there > 0 and (", " .. #r.only_there .. " only there") or "")}
  if #r.changed > 0 then
    local cells = {{"changed", "shape", "max|diff|", "|diff|/|this|"}}
    for _, c in ipairs(r.changed) do
      cells[#cells + 1] = {c.name, M.shape_str(c.shape), num(c.max_abs), num(c.rel)}
    end
    lines[#lines + 1] = M.columns(cells, {[3] = true, [4] = true})
  end
  for _, c in ipairs(r.reshaped) do
    lines[#lines + 1] = string.format("reshaped: %s %s -> %s", c.name, c.here, c.there)
  end
  local function list(what, xs)
    if #xs == 0 then return end
    local shown = table.concat(xs, ", ", 1, math.min(#xs, 20))
    lines[#lines + 1] = string.format("%s: %s%s", what, shown, #xs > 20 and ", ..." or "")
  end
  list("only here", r.only_here)
  list("only there", r.only_there)
  return text(table.concat(lines, "\n"), r)
end

-- ---------------------------------------------------------------------------------------------
-- Runs (workdirs)

-- Why a run's workdir holds no checkpoint, from its config: big_vision's trainers save only when
-- one of the ckpt_* durations is set.
local CKPT_KEYS = {"ckpt_steps", "ckpt_epochs", "ckpt_examples", "ckpt_percent"}
local function no_checkpoint_why(workdir, cfg)
  for _, k in ipairs(CKPT_KEYS) do
    if cfg and cfg[k] ~= nil and cfg[k] ~= json.null and cfg[k] ~= 0 then
      return string.format("no checkpoint in %s: the run stopped before its first save (%s = %s)",
                           workdir, k, tostring(cfg[k]))
    end
  end
  return string.format("no checkpoint in %s: its config sets none of %s, so training saved no "
    .. "parameters (as big_vision's trainers); set one of them in the config to keep them",
    workdir, table.concat(CKPT_KEYS, ", "))
end
M.no_checkpoint_why = no_checkpoint_why

local run_mt = {__name = "bv.Run"}

-- Functions of a run may be called as run.f(...) or run:f(...).
local function bound(run, fn)
  return function(first, ...)
    if rawequal(first, run) then return fn(...) end
    return fn(first, ...)
  end
end

local function read_json(path)
  local ok, text_or_err = pcall(bv.fs.read_file, path)
  if not ok then return nil end
  return json.decode(text_or_err)
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t or {}) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

-- The pp string of an evaluator (`name` in config.evals), or of training ("train", "input").
local function pp_spec(config, name)
  if name == "train" or name == "input" then
    local pp = config.input and config.input.pp
    if not pp then error("the config has no input.pp", 3) end
    return pp, config.input.data, "input"
  end
  local evals = config.evals or {}
  if name == nil then
    name = sorted_keys(evals)[1]
    if name == nil then error("the config has no evals; name one, or \"train\"", 3) end
  end
  local e = evals[name]
  if type(e) ~= "table" then
    error(string.format("no eval '%s' in the config (evals: %s; or \"train\")", tostring(name),
                        table.concat(sorted_keys(evals), ", ")), 3)
  end
  return e.pp_fn or e.pp or "", e.data, "evals." .. name
end

-- ViT sizes its position embedding from the image size, which the trainer reads off the first
-- batch; here it comes from the checkpoint's embedding (a square grid of patches).
local function vit_image_size(model_cfg, view)
  local pe = view and view:info("params/pos_embedding")
  if not pe then return nil end
  local patch = model_cfg.patch_size
  if type(patch) == "table" then patch = patch[1] end
  if not patch and type(model_cfg.variant) == "string" then
    patch = tonumber(model_cfg.variant:match("/(%d+)$"))
  end
  local grid = math.floor(math.sqrt(pe.shape[2]) + 0.5)
  if not patch or grid * grid ~= pe.shape[2] then return nil end
  return {grid * patch, grid * patch}
end

-- The data feature a pp's onehot reads (its key, big_vision's default "labels"), or nil.
local function onehot_key(spec)
  for _, seg in ipairs(bv.pp.segments(spec)) do
    local ok, name, args, kwargs = pcall(bv.pp.parse_op, seg)
    if ok and name == "onehot" then return kwargs.key or args[2] or "labels" end
  end
  return nil
end

-- A TFDS data config's class names for pp `spec`: the ClassLabel that its onehot reads, else
-- (the pp renames the label first, or has no onehot) the dataset's only ClassLabel; nil when
-- that is no ClassLabel or has no names file. Errors when the dataset cannot be read.
local function tfds_class_names(data, spec)
  local tfds = require "bv.tfds"
  local features = tfds.features(data)
  local key = onehot_key(spec)
  if not (key and features[key]) then
    key = nil
    for k, f in pairs(features) do
      if f.kind == "class_label" then
        if key then return nil end
        key = k
      end
    end
  end
  local f = key and features[key]
  if not (f and f.kind == "class_label" and bv.fs.exists(f.labels_file)) then return nil end
  return tfds.label_names(data, key)
end

-- Opens a workdir: its resolved config (config.json), metrics file and latest checkpoint.
function M.run(workdir)
  if type(workdir) ~= "string" or not bv.fs.is_dir(workdir) then
    error("inspect.run: '" .. tostring(workdir) .. "' is not a directory", 2)
  end
  workdir = workdir:gsub("(.)/+$", "%1")
  local run = {workdir = workdir}
  run.config = read_json(workdir .. "/config.json")
  if #bv.ckpt.list(workdir) > 0 then run.ckpt = M.checkpoint(workdir) end
  local metrics_path = workdir .. "/" .. require("bv.metrics").FILE_NAME

  local function config()
    if not run.config then error("no config.json in " .. workdir, 3) end
    return run.config
  end

  -- run.metrics() -> every row of big_vision_metrics.txt; run.metrics(name) -> steps, values.
  run.metrics = bound(run, function(name)
    local metrics = require "bv.metrics"
    if not bv.fs.exists(metrics_path) then error("no metrics file " .. metrics_path, 2) end
    local rows = metrics.read(metrics_path)
    if name == nil then
      return setmetatable(rows, {__name = "bv.Metrics", __tostring = function(t)
        return M.metrics_summary(t, metrics_path)
      end})
    end
    local steps, values = metrics.series(rows, name)
    if #steps == 0 then
      local names = {}
      for _, row in ipairs(rows) do
        for k in pairs(row) do if k ~= "step" then names[k] = true end end
      end
      error(string.format("no metric '%s' in %s (metrics: %s)", name, metrics_path,
                          table.concat(sorted_keys(names), ", ")), 2)
    end
    return steps, values
  end)

  -- run.model([{image_size = ...}]) -> model, params: the config's model with the checkpoint's
  -- parameters (cached: later calls return the same two).
  run.model = bound(run, function(opts)
    if run._model and not opts then return run._model, run._params end
    local cfg = config()
    if not run.ckpt then
      error(no_checkpoint_why(workdir, cfg) .. " (model:init(seed) makes fresh parameters)", 2)
    end
    local model_cfg = {}
    for k, v in pairs(cfg.model or {}) do model_cfg[k] = v end
    model_cfg.num_classes = cfg.num_classes
    for k, v in pairs(opts or {}) do model_cfg[k] = v end
    if cfg.model_name == "vit" and model_cfg.image_size == nil then
      model_cfg.image_size = vit_image_size(model_cfg, run.ckpt)
    end
    local model = bv.models.build(cfg.model_name, model_cfg)
    local params = {}
    for _, spec in ipairs(model:param_shapes()) do
      local name = "params/" .. spec.name
      if not run.ckpt:info(name) then
        error(string.format("checkpoint %s lacks %s, which model %s needs", run.ckpt:file(), name,
                            cfg.model_name), 2)
      end
      params[spec.name] = run.ckpt:load(name):to(spec.dtype)
    end
    model:relayout(params)
    run._model, run._params = model, params
    return model, params
  end)

  -- run.pp(eval_name or "train") -> function(example [, rng]) -> example.
  run.pp = bound(run, function(name)
    local spec = pp_spec(config(), name)
    local fn = bv.pp.build(spec)
    return function(example, rng) return fn(example, rng or bv.rng(0)) end
  end)

  -- run.batch(eval_name or "train", n) -> the first n examples of that data, through its pp.
  run.batch = bound(run, function(name, n)
    local spec, data = pp_spec(config(), name)
    local it = bv.data.inference({data = data, pp = spec, batch_size = n or 4}, {workers = 1})
    return it:next()
  end)

  -- The class names of a data config and its pp, when its data has them (class id c is
  -- names[c + 1]): bv:imagefolder's sorted folder names, or a TFDS ClassLabel's names (the
  -- feature the pp's onehot reads, else the dataset's one ClassLabel). Returns names or nil,
  -- and why a TFDS dataset gave none (it could not be read). Cached per data config.
  local names_of = {}
  local function class_names(data, spec)
    if type(data) ~= "table" then return nil end
    if names_of[data] == nil then
      local ok, names
      if data.name == "bv:imagefolder" then
        ok, names = pcall(function() return bv.data.source(data):class_names() end)
      elseif require("bv.tfds").is_tfds(data) then
        ok, names = pcall(tfds_class_names, data, spec)
      end
      names_of[data] = {ok and names or nil, not ok and names and tostring(names) or nil}
    end
    return names_of[data][1], names_of[data][2]
  end

  -- run.predict(image_file [, {eval = name, top = 5}]) -> the model's view of one image file:
  -- the evaluator's pp on {image = the file's bytes} (ops that need other keys, such as the
  -- label's onehot, are skipped and listed), then the model with the checkpoint's params.
  -- Returns {class =, name =, prob =} of the top class, top = {{class =, name =, prob =}, ...}
  -- (the `top` best), logits, probs and skipped. Class ids are 0-based, as the data's labels,
  -- the evaluators' outfiles and big_vision's; name is there when the data has class names
  -- (bv:imagefolder's folders, a TFDS ClassLabel's names; the eval's data, else the training
  -- data). (A tensor's argmax is 1-based: logits:argmax(-1) - 1 is the class id.)
  run.predict = bound(run, function(path, opts)
    opts = opts or {}
    local cfg = config()
    local spec, data, where = pp_spec(cfg, opts.eval)
    local names, why = class_names(data, spec)
    if not names and cfg.input and cfg.input.data ~= data then
      local train_names, train_why = class_names(cfg.input.data, cfg.input.pp or "")
      names, why = train_names, why or train_why
    end
    local example, skipped = {image = bv.fs.read_file(path)}, {}
    for _, seg in ipairs(bv.pp.segments(spec)) do
      local ok, out = pcall(bv.pp.build(seg), example, bv.rng(0))
      if ok then
        example = out
      elseif tostring(out):find("no key '", 1, true) then
        skipped[#skipped + 1] = seg
      else
        error(out, 0)
      end
    end
    local model, params = run.model()
    local logits = model:apply(params, example.image:unsqueeze(1))
    local probs = cfg.loss == "softmax_xent" and logits:softmax(-1) or logits:sigmoid()
    local top = {}
    local values = probs[1]:totable()
    local order = {}
    for i = 1, #values do order[i] = i end
    table.sort(order, function(a, b) return values[a] > values[b] end)
    local rows = {{"class", cfg.loss == "softmax_xent" and "softmax" or "sigmoid"}}
    if names then table.insert(rows[1], 2, "name") end
    for k = 1, math.min(opts.top or 5, #order) do
      local id = order[k] - 1  -- the 1-based index of the sorted probabilities -> 0-based id
      top[k] = {class = id, prob = values[order[k]], name = names and names[id + 1]}
      rows[#rows + 1] = {tostring(id), string.format("%.4f", values[order[k]])}
      if names then table.insert(rows[#rows], 2, tostring(names[id + 1])) end
    end
    local head = string.format("%s: logits %s through the pp of %s%s", path,
      M.shape_str(logits:shape()), where,
      #skipped > 0 and (" (skipped: " .. table.concat(skipped, ", ") .. ")") or "")
    local right = names and {[3] = true} or {[2] = true}
    local note = not names and why and ("\n(no class names: " .. why .. ")") or ""
    return text(head .. "\n" .. M.columns(rows, right) .. "\n(class ids are 0-based, as the "
      .. "data's labels; logits:argmax(-1) - 1 is the class id)" .. note,
      {class = top[1].class, name = top[1].name, prob = top[1].prob, top = top, logits = logits,
       probs = probs, skipped = skipped})
  end)

  return setmetatable(run, run_mt)
end


run_mt.__tostring = function(run)
  local lines = {"run " .. run.workdir}
  local cfg = run.config
  if cfg then
    lines[#lines + 1] = string.format("  config:  model %s %s, %s", tostring(cfg.model_name),
      json.encode(cfg.model or {}), cfg.total_steps and ("total_steps " .. cfg.total_steps)
      or cfg.total_epochs and ("total_epochs " .. cfg.total_epochs) or "")
    local evals = sorted_keys(cfg.evals)
    if #evals > 0 then lines[#lines + 1] = "  evals:   " .. table.concat(evals, ", ") end
  else
    lines[#lines + 1] = "  (no config.json)"
  end
  if run.ckpt then
    lines[#lines + 1] = "  ckpt:    " .. run.ckpt:summary():gsub("\n", "\n         ")
    lines[#lines + 1] = "  steps:   " .. table.concat(bv.ckpt.list(run.workdir), ", ")
  else
    lines[#lines + 1] = "  (" .. no_checkpoint_why(run.workdir, cfg) .. ")"
  end
  lines[#lines + 1] = "  run.metrics(name), run.model(), run.pp(eval), run.batch(eval, n), "
    .. "run.predict(image_file)"
  return table.concat(lines, "\n")
end

-- What a metrics file holds: each metric's count and its last value.
function M.metrics_summary(rows, path)
  local stats, order = {}, {}
  for _, row in ipairs(rows) do
    for k, v in pairs(row) do
      if k ~= "step" then
        if not stats[k] then
          stats[k] = {n = 0}
          order[#order + 1] = k
        end
        local s = stats[k]
        s.n, s.last, s.step = s.n + 1, v, row.step
      end
    end
  end
  table.sort(order)
  local cells = {{"metric", "values", "last", "at step"}}
  for _, k in ipairs(order) do
    local s = stats[k]
    local last = type(s.last) == "number" and num(s.last) or tostring(s.last)
    cells[#cells + 1] = {k, tostring(s.n), last, tostring(s.step)}
  end
  local first, last = rows[1], rows[#rows]
  return string.format("%s: %d rows, steps %s..%s\n", path, #rows,
    tostring(first and first.step), tostring(last and last.step))
    .. M.columns(cells, {[2] = true, [3] = true, [4] = true})
end

return M
