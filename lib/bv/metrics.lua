-- bv.metrics: big_vision's metric writer (utils.BigVisionMetricWriter) and readers for its file.
--
--   local mw = require("bv.metrics").writer(workdir, {enabled = rank == 0})
--   mw:step_start(step)
--   mw:measure("training_loss", loss)      -- prints "[step] training_loss = 0.69"
--   mw:step_end()                          -- appends {"step": step, "training_loss": 0.69}
--   mw:close()
--
--   local rows = metrics.read(workdir .. "/big_vision_metrics.txt")
--   local steps, values = metrics.series(path, "training_loss")
--
-- Keeping the file in step with a run's checkpoints (what bv.trainers.utils does):
--   mw:sync()                              -- the lines written so far are on disk (fsync)
--   metrics.truncate_after(path, step)     -- resuming from step: later lines moved aside
--   metrics.set_aside(path, "before")      -- starting from scratch: the old file moved aside
--
-- The file is big_vision's: one JSON object per step, written like Python's json.dumps (", " and
-- ": " separators, keys in the order they were measured, NaN/Infinity for non-finite floats), so
-- big_vision's notebooks read our files and metrics.read reads theirs.
local json = require "bv.json"
local progress = require "bv.progress"

local M = {}

M.FILE_NAME = "big_vision_metrics.txt"

-- JSON text like Python's json.dumps (ensure_ascii) ---------------------------------------

local ESC = {['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
             ["\b"] = "\\b", ["\f"] = "\\f"}

-- Python escapes everything outside printable ASCII as \uXXXX (surrogate pairs above U+FFFF).
local function py_string(s)
  if not utf8.len(s) then error(string.format("metrics: name %q is not valid UTF-8", s), 3) end
  local out = {}
  for _, cp in utf8.codes(s) do
    local c = cp < 128 and string.char(cp) or nil
    if c and ESC[c] then
      out[#out + 1] = ESC[c]
    elseif cp >= 0x20 and cp <= 0x7e then
      out[#out + 1] = c
    elseif cp < 0x10000 then
      out[#out + 1] = string.format("\\u%04x", cp)
    else
      local v = cp - 0x10000
      out[#out + 1] = string.format("\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff))
    end
  end
  return '"' .. table.concat(out) .. '"'
end

-- A float as Python's json.dumps writes it (repr; NaN, Infinity, -Infinity).
local function py_float(x)
  if x ~= x then return "NaN" end
  if x == math.huge then return "Infinity" end
  if x == -math.huge then return "-Infinity" end
  return json.format_float(x)
end

-- A float as Python's str() shows it in the log line.
local function py_float_str(x)
  if x ~= x then return "nan" end
  if x == math.huge then return "inf" end
  if x == -math.huge then return "-inf" end
  return json.format_float(x)
end

local function py_int(x)
  local i = math.tointeger(x)
  if i then return string.format("%d", i) end
  return py_float(x)
end

-- Measured values --------------------------------------------------------------------------

-- The shape of a nested Lua list of numbers (np.array's view of it).
local function list_shape(t, name)
  local shape, cur = {}, t
  while type(cur) == "table" do
    shape[#shape + 1] = #cur
    cur = cur[1]
  end
  if cur ~= nil and type(cur) ~= "number" and type(cur) ~= "boolean" then
    error(string.format("metrics: cannot measure '%s': a list of %s", name, type(cur)), 3)
  end
  return shape, cur
end

-- big_vision: np.array(value).squeeze(); a scalar becomes a float, anything else its shape.
-- Returns the float, or a list of dimensions.
local function to_value(name, v)
  local tv = type(v)
  if tv == "number" then return v + 0.0 end
  if tv == "boolean" then return v and 1.0 or 0.0 end
  if bv.is_tensor(v) then
    local dims = {}
    for _, d in ipairs(v:shape()) do
      if d ~= 1 then dims[#dims + 1] = d end
    end
    if #dims > 0 then return dims end
    local x = v:item()
    if type(x) == "boolean" then return x and 1.0 or 0.0 end
    return x + 0.0
  end
  if tv == "table" then
    local shape, first = list_shape(v, name)
    local dims = {}
    for _, d in ipairs(shape) do
      if d ~= 1 then dims[#dims + 1] = d end
    end
    if #dims > 0 then return dims end
    if type(first) == "boolean" then return first and 1.0 or 0.0 end
    return first + 0.0
  end
  error(string.format("metrics: cannot measure '%s': expected a number, boolean, tensor or "
    .. "list, got a %s", tostring(name), tv), 3)
end

-- Python's repr of a shape tuple: (3,) or (2, 3).
local function shape_str(dims)
  local parts = {}
  for i, d in ipairs(dims) do parts[i] = tostring(d) end
  if #parts == 1 then return "(" .. parts[1] .. ",)" end
  return "(" .. table.concat(parts, ", ") .. ")"
end

local function value_json(v)
  if type(v) == "string" then return py_string(v) end
  if type(v) == "table" then
    local parts = {}
    for i, d in ipairs(v) do parts[i] = tostring(d) end
    return "[" .. table.concat(parts, ", ") .. "]"
  end
  return py_float(v)
end

-- The writer ---------------------------------------------------------------------------------

local Writer = {}
Writer.__index = Writer

-- workdir: where big_vision_metrics.txt goes (nil: log only). opts.enabled (default true):
-- false on processes other than 0, which log but write nothing. opts.print(line) replaces the
-- log output (default: stdout, flushed); opts.show(name) -> bool picks the measurements that get
-- a log line (default: all; a trainer shows training metrics on its progress line instead);
-- opts.color forces the colour escape on or off (default: on when stdout is a terminal).
function M.writer(workdir, opts)
  opts = opts or {}
  if workdir ~= nil and type(workdir) ~= "string" then
    error("metrics.writer: workdir must be a string path or nil, got a " .. type(workdir), 2)
  end
  local self = setmetatable({}, Writer)
  self.enabled = opts.enabled ~= false
  self.path = (self.enabled and workdir) and (workdir .. "/" .. M.FILE_NAME) or nil
  self._workdir = workdir
  self._print = opts.print or function(line)
    io.stdout:write(line, "\n")
    io.stdout:flush()
  end
  self._show = opts.show or function() return true end
  if opts.color == nil then self._color = progress.stdout_is_tty() else self._color = opts.color end
  self:step_start(0)  -- as big_vision: measurements before the first step_start go to step 0
  return self
end

function Writer:step_start(step)
  if type(step) ~= "number" then
    error("metrics: step_start needs a step number, got " .. type(step), 2)
  end
  -- Measurements made before the trainer's own step_start(0) (num_params) belong to step 0.
  if step == self.step and self._dirty then return end
  self.step = step
  self._names, self._values, self._dirty = {}, {}, false
end

-- Records `name = value` for the current step and logs it. Measuring a name twice in a step
-- keeps its first position and the last value (a Python dict's behaviour). Returns the value
-- as stored: a float, or a list of dimensions for non-scalars.
function Writer:measure(name, value)
  if type(name) ~= "string" then
    error("metrics: measure needs a string name, got " .. type(name), 2)
  end
  local v = to_value(name, value)
  if self._show(name) then
    local shown = type(v) == "table" and shape_str(v) or py_float_str(v)
    local step = py_int(self.step)
    if self._color then
      self._print(string.format("\27[35m[%s]\27[0m %s = %s", step, name, shown))
    else
      self._print(string.format("[%s] %s = %s", step, name, shown))
    end
  end
  if self._values[name] == nil then self._names[#self._names + 1] = name end
  self._values[name] = v
  self._dirty = true
  return v
end

-- A note on the current step (what `bvlua attach` changed, e.g. "attach: lr_multiplier 1 ->
-- 0.5"): a string under the key "note" of the step's line, notes of one step joined by "; ".
-- Readers that want numbers skip it (a metric's value is never a string).
function Writer:note(text)
  if type(text) ~= "string" then error("metrics: note needs a string, got " .. type(text), 2) end
  self._print(string.format("[%s] note: %s", py_int(self.step), text))
  local old = self._values.note
  if old == nil then self._names[#self._names + 1] = "note" end
  self._values.note = old and (old .. "; " .. text) or text
  self._dirty = true
end

-- The JSON line for the current step, or nil when nothing was measured.
function Writer:line()
  if #self._names == 0 then return nil end
  local parts = {'"step": ' .. py_int(self.step)}
  for _, name in ipairs(self._names) do
    parts[#parts + 1] = py_string(name) .. ": " .. value_json(self._values[name])
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

-- A failed write (a full disk, a quota, an I/O error): the part of the line that reached the
-- file is cut off again, so that the file ends with the last whole line, and the run stops
-- with an error (a silent gap in the metrics would be worse than a stop: the run resumes from
-- its last checkpoint, and bv.trainers.utils drops the lines after it).
-- (Closed before it is cut: stdio may still hold the bytes that failed, and write them as it
-- closes.) size: the file's size before the line, nil when nothing was being added.
function Writer:_failed(what, err, size)
  pcall(self._file.close, self._file)
  self._file = nil
  local outcome = "the lines before it were flushed"
  if size ~= nil then
    outcome = pcall(bv.fs.truncate, self.path, size)
        and "the file ends with the last whole line before it"
        or "and it could not be cut back to its last whole line"
  end
  error(string.format("metrics: cannot write %s to %s: %s; %s", what, self.path, tostring(err),
                      outcome), 0)
end

-- Appends the step's line to the file (if anything was measured and this process writes).
-- Each line is flushed at once so a crash loses nothing already logged; a failed write is an
-- error (Writer:_failed).
function Writer:step_end()
  local line = self:line()
  self._dirty = false
  if not line or not self.path then return end
  if not self._file then
    bv.fs.mkdirs(self._workdir)
    local f, err = io.open(self.path, "a")
    if not f then error("metrics: cannot open " .. self.path .. ": " .. tostring(err), 2) end
    self._file = f
  end
  local size = self._file:seek("end")
  local ok, err = self._file:write(line, "\n")
  if ok then ok, err = self._file:flush() end
  if not ok then self:_failed("step " .. py_int(self.step) .. "'s line", err, size) end
end

-- Puts the lines written so far on disk (fsync), not only in the kernel's cache: a trainer calls
-- it before publishing a checkpoint, so that a checkpoint never outlives its step's line.
function Writer:sync()
  if self._file then
    local ok, err = self._file:flush()
    if not ok then self:_failed("the lines up to step " .. py_int(self.step), err) end
    bv.ckpt.sync_file(self.path)
  end
end

-- Writes measurements not yet written (those after the last step_end, e.g. the step-0 evals
-- of a run with total_steps == 0) and closes the file. big_vision's close() calls step_end
-- unconditionally and so writes the last step's line a second time; we don't.
function Writer:close()
  if self._dirty then self:step_end() end
  if self._file then
    self._file:close()
    self._file = nil
  end
end

-- Reading ------------------------------------------------------------------------------------

-- Placeholders for Python's non-JSON numbers: strings that no metric value can be (JSON text
-- cannot hold a raw NUL, so a decoded "\0..." string only comes from us).
local NONFINITE = {["\0NaN"] = 0 / 0, ["\0Infinity"] = math.huge, ["\0-Infinity"] = -math.huge}

-- Replaces NaN, Infinity and -Infinity outside strings with the placeholders above.
local function quote_nonfinite(s)
  local out, i, n, start = {}, 1, #s, 1
  while i <= n do
    local c = s:sub(i, i)
    if c == '"' then
      i = i + 1
      while i <= n do
        local d = s:sub(i, i)
        if d == "\\" then i = i + 2
        elseif d == '"' then break
        else i = i + 1 end
      end
      i = i + 1
    else
      local word = s:match("^%-?Infinity", i) or s:match("^NaN", i)
      if word then
        out[#out + 1] = s:sub(start, i - 1)
        out[#out + 1] = '"\\u0000' .. word .. '"'
        i = i + #word
        start = i
      else
        i = i + 1
      end
    end
  end
  out[#out + 1] = s:sub(start)
  return table.concat(out)
end

local function restore_nonfinite(v)
  if type(v) == "string" and NONFINITE[v] then return NONFINITE[v] end
  if type(v) == "table" then
    for k, x in pairs(v) do v[k] = restore_nonfinite(x) end
  end
  return v
end

-- Decodes one line of a metrics file (Python's JSON, NaN and Infinity included).
function M.decode_line(line)
  return restore_nonfinite(json.decode(quote_nonfinite(line)))
end

-- Every line of a metrics file as a table, in file order (blank lines skipped). Errors name
-- the file and line.
function M.read(path)
  local f, err = io.open(path, "r")
  if not f then error("metrics.read: cannot open " .. path .. ": " .. tostring(err), 2) end
  local rows, lineno = {}, 0
  for line in f:lines() do
    lineno = lineno + 1
    if line:find("%S") then
      local ok, row = pcall(M.decode_line, line)
      if not ok then
        f:close()
        error(string.format("metrics.read: %s:%d: %s", path, lineno, tostring(row)), 2)
      end
      rows[#rows + 1] = row
    end
  end
  f:close()
  return rows
end

-- Agreeing with checkpoints -----------------------------------------------------------------

-- PATH.TAG-N with the first N from 1 that is not taken.
local function free_name(path, tag)
  local n = 1
  while bv.fs.exists(string.format("%s.%s-%d", path, tag, n)) do n = n + 1 end
  return string.format("%s.%s-%d", path, tag, n)
end

-- Moves the file at `path` aside to PATH.TAG-N (N: the first free one from 1), never deleting
-- anything. Returns the new path, or nil when there was no file.
function M.set_aside(path, tag)
  if not bv.fs.exists(path) then return nil end
  local aside = free_name(path, tag)
  local ok, err = os.rename(path, aside)
  if not ok then error("metrics: cannot move " .. path .. " to " .. aside .. ": " .. err, 2) end
  return aside
end

-- Makes the metrics file at `path` agree with a checkpoint of step `step`, for a run resuming
-- from it: the lines of later steps (written after that checkpoint by a run that was then
-- interrupted, or abandoned when an older checkpoint was resumed) and lines that are not a JSON
-- object with a step (cut short by a crash) are moved to PATH.dropped-N, and the file is
-- rewritten without them (atomically, and durably: rename and fsync). Nothing is changed when
-- every line is kept. Returns {kept =, dropped =, aside = PATH.dropped-N or nil,
-- at_step = the number of lines of `step` itself}.
function M.truncate_after(path, step)
  local out = {kept = 0, dropped = 0, at_step = 0}
  if not bv.fs.exists(path) then return out end
  local kept, dropped = {}, {}
  for line in bv.fs.read_file(path):gmatch("[^\n]+") do
    if line:find("%S") then
      local ok, row = pcall(M.decode_line, line)
      local s = ok and type(row) == "table" and type(row.step) == "number" and row.step
      if s and s <= step then
        kept[#kept + 1] = line
        if s == step then out.at_step = out.at_step + 1 end
      else
        dropped[#dropped + 1] = line
      end
    end
  end
  out.kept, out.dropped = #kept, #dropped
  if #dropped == 0 then return out end
  -- The dropped lines are on disk before the file loses them.
  out.aside = free_name(path, "dropped")
  bv.ckpt.write_durable(out.aside, table.concat(dropped, "\n") .. "\n")
  bv.ckpt.write_durable(path, #kept > 0 and table.concat(kept, "\n") .. "\n" or "")
  return out
end

-- The steps and values of one metric: two lists, in file order, for the lines that have it.
-- `source` is a path or the rows metrics.read returned.
function M.series(source, name)
  local rows = type(source) == "string" and M.read(source) or source
  local steps, values = {}, {}
  for _, row in ipairs(rows) do
    if row[name] ~= nil then
      steps[#steps + 1] = row.step
      values[#values + 1] = row[name]
    end
  end
  return steps, values
end

return M
