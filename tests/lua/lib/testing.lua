-- tests/lua/lib/testing.lua: a tiny test runner for Lua tests run by `bvlua run` from the source
-- root (as CTest runs them): `local T = require "tests.lua.lib.testing"` (Lua's default path has
-- ./?.lua, so the name is the file's path from the root, in the main state and in data workers').
-- A test file registers cases with T.test(name, fn) and ends with T.run(), which prints one
-- line per failure, a summary, and exits non-zero when anything failed (so CTest sees it).
-- One test by name: `build/bvlua run tests/lua/pp_test.lua parse_op` runs the cases whose
-- names contain the first command-line argument (a plain substring). Cases registered with
-- T.device_test run on the fake device, or with BV_TEST_DEVICE=cuda on the GPU (the others
-- are then left out).
local M = {}

local cases = {}

function M.test(name, fn)
  cases[#cases + 1] = {name = name, fn = fn}
end

-- Whether BV_TEST_DEVICE names a GPU ("cuda", "cuda:N"; scripts/gpu_check sets it): then the
-- device cases run there, and only they.
local function on_gpu()
  return (os.getenv("BV_TEST_DEVICE") or ""):match("^cuda") ~= nil
end

-- A case that runs on a device, passed to fn: the test device (core/fake_device.h: the CPU's
-- kernels, as strict as CUDA) by default, the GPU that BV_TEST_DEVICE names otherwise. Its
-- checks hold on both: tolerances, not bit-equality, against the CPU.
function M.device_test(name, fn)
  cases[#cases + 1] = {name = name, fn = function() return fn(bv._test_device()) end, device = true}
end

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

-- Deep equality for plain values and tables (tensors compare with their own __eq).
local function deep_eq(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  for k, v in pairs(a) do
    if not deep_eq(v, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end
M.deep_eq = deep_eq

local function dump(v, depth)
  depth = depth or 0
  if type(v) ~= "table" or depth > 3 then return show(v) end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(x, y) return tostring(x) < tostring(y) end)
  local parts = {}
  for _, k in ipairs(keys) do
    parts[#parts + 1] = "[" .. show(k) .. "]=" .. dump(v[k], depth + 1)
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end
M.dump = dump

function M.eq(got, want, what)
  if not deep_eq(got, want) then
    error(string.format("%sexpected %s, got %s", what and (what .. ": ") or "",
                        dump(want), dump(got)), 2)
  end
end

function M.near(got, want, tol, what)
  tol = tol or 1e-6
  if type(got) ~= "number" or math.abs(got - want) > tol then
    error(string.format("%sexpected %s (+-%g), got %s", what and (what .. ": ") or "",
                        show(want), tol, show(got)), 2)
  end
end

function M.truthy(v, what)
  if not v then error((what or "expected a true value") .. ", got " .. show(v), 2) end
end

-- Calls fn, which must raise; the message must contain `pattern` (a plain substring).
-- Returns the message so a test can check more.
function M.raises(fn, pattern)
  local ok, err = pcall(fn)
  if ok then error("expected an error" .. (pattern and (" containing '" .. pattern .. "'") or ""), 2) end
  local msg = tostring(err)
  if pattern and not msg:find(pattern, 1, true) then
    error(string.format("error %q does not contain %q", msg, pattern), 2)
  end
  return msg
end

-- The Python with the torch wheel and numpy that scripts/setup installs: $BV_PYTHON (CTest sets
-- it), else the venv in the working directory (tests run from the source root). A missing one is
-- an error with the remedy, never a skip.
function M.python(modules)
  local py = os.getenv("BV_PYTHON")
  if not py or py == "" then py = ".venv/bin/python" end
  local check = string.format("%s -c 'import %s' 2>/dev/null", py, modules or "numpy")
  if os.execute(check) ~= true then
    error(string.format("the tests need %s with %s in %s: run scripts/setup (it makes .venv/), " ..
                        "or set BV_PYTHON", modules or "numpy", modules and "them" or "it", py), 2)
  end
  return py
end

-- Runs every registered case; `filter` (optional; default the script's first command-line
-- argument) is a substring of the names to run. A filter that matches nothing is a failure, so
-- a typo never passes.
function M.run(filter)
  filter = filter or (arg and arg[1])
  local passed, failed, host_only = 0, 0, 0
  for _, c in ipairs(cases) do
    if on_gpu() and not c.device then
      host_only = host_only + 1
    elseif not filter or c.name:find(filter, 1, true) then
      local ok, err = xpcall(c.fn, debug.traceback)
      if ok then
        passed = passed + 1
      else
        failed = failed + 1
        io.stderr:write("FAIL ", c.name, "\n", tostring(err), "\n")
      end
    end
  end
  if filter and passed + failed == 0 then
    io.stderr:write(string.format("FAIL no test name contains '%s'\n", filter))
    failed = 1
  end
  print(string.format("%d passed, %d failed%s", passed, failed, host_only > 0 and string.format(
      " (on %s; %d host-only cases not run)", os.getenv("BV_TEST_DEVICE"), host_only) or ""))
  cases = {}
  if failed > 0 then os.exit(1) end
end

return M
