-- bv.fs: paths with a NUL refused, the workdir lock (one writer; the holder named; released
-- when its process dies) and the removal of interrupted writers' *.tmp-<pid> leftovers.
local T = require "tests.lua.lib.testing"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

-- Runs Lua code in another bvlua process; returns its exit status and stderr.
local function other_process(code)
  local err = tmp .. "/other.err"
  local ok = os.execute(string.format("%q -e %q 2>%q", bv.dist.executable(), code, err))
  return ok, bv.fs.read_file(err)
end

T.test("a path with a NUL byte is refused, not cut there", function()
  T.raises(function() bv.fs.read_file("x.png\0/../../etc/passwd") end, "a path holds a NUL byte")
  T.raises(function() bv.fs.write_file(tmp .. "/a\0b", "x") end, "a path holds a NUL byte")
  T.eq(bv.fs.exists(tmp .. "/a"), false)
end)

T.test("the workdir lock: one holder, named to the next; gone with its process", function()
  local dir = tmp .. "/w"
  bv.fs.mkdirs(dir)
  bv.fs.lock_workdir(dir)
  bv.fs.lock_workdir(dir)  -- this process again: a no-op
  T.truthy(bv.fs.read_file(dir .. "/.bvlua.lock"):find("^pid %d+ on host "), "holder written")
  local ok, err = other_process("bv.fs.lock_workdir('" .. dir .. "')")
  T.eq(ok, nil)
  T.truthy(err:find("is in use: another bvlua train writes there (pid ", 1, true), err)
  -- A process that took it and ended: the lock went with it.
  local dir2 = tmp .. "/w2"
  bv.fs.mkdirs(dir2)
  T.eq(other_process("bv.fs.lock_workdir('" .. dir2 .. "')"), true)
  bv.fs.lock_workdir(dir2)
end)

T.test("leftovers of interrupted writers go, this process's and other files stay", function()
  local pid = bv.fs.read_file("/proc/self/stat"):match("^(%d+)")
  local dir = tmp .. "/left"
  bv.fs.mkdirs(dir .. "/ckpt-000000004.tmp-999999.del")
  bv.fs.mkdirs(dir .. "/backup.tmp-2024")  -- a directory of the user's, not a bvlua leftover
  for _, name in ipairs({"config.json.tmp-999998", "config.json", "notes.tmp-x",
                         "LAST.tmp-" .. pid}) do
    bv.fs.write_file(dir .. "/" .. name, "x")
  end
  T.eq(bv.fs.remove_tmp_leftovers(dir), {"ckpt-000000004.tmp-999999.del", "config.json.tmp-999998"})
  T.eq(bv.fs.list(dir), {"LAST.tmp-" .. pid, "backup.tmp-2024", "config.json", "notes.tmp-x"})
end)

T.run()
