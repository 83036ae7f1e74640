-- A rank of tests/cli/dist_launch_test.sh, started by `bvlua launch --nproc N -- run` this file.
--   ranks.lua ok            all_reduce (sum, mean), broadcast, the store, a barrier; checks values
--   ranks.lua exit DIR      rank 1 writes DIR/pid1 and exits with code 3 after one all_reduce;
--                           rank 0 keeps reducing, so its next all_reduce must fail naming rank 1
--   ranks.lua loop DIR      every rank writes DIR/pid<rank> and all_reduces until it fails (the
--                           test kills rank 1 with SIGKILL); gives up after 60 s
local mode, dir = arg[1], arg[2]
bv.handle_stop_signals()  -- the launcher's SIGTERM must not cut rank 0's error message short
local g = bv.dist.init{timeout = 30}
local r, n = g:rank(), g:world_size()

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function pid()
  local f = assert(io.open("/proc/self/stat"))
  local p = f:read("n")
  f:close()
  return math.tointeger(p)
end

if mode == "ok" then
  -- rank r holds r + 1: the sums over n ranks are n (n + 1) / 2.
  local a = bv.full({2, 3}, r + 1.0)
  local b = bv.arange(4):to("float32") * (r + 1)
  g:all_reduce({a, b})
  local s = n * (n + 1) / 2
  assert(a:equal(bv.full({2, 3}, s + 0.0)), "rank " .. r .. ": wrong sum " .. a:format())
  assert(b:equal(bv.arange(4):to("float32") * s), "rank " .. r .. ": wrong sum " .. b:format())
  local m = bv.full({3}, r + 1.0)
  g:all_reduce({m}, {mean = true})
  assert(m:equal(bv.full({3}, (n + 1) / 2)), "rank " .. r .. ": wrong mean " .. m:format())
  local c = bv.full({2}, r * 10.0)
  g:broadcast({c}, n - 1)
  assert(c:equal(bv.full({2}, (n - 1) * 10.0)), "rank " .. r .. ": wrong broadcast " .. c:format())
  g:set("host" .. r, "rank " .. r)
  for q = 0, n - 1 do assert(g:get("host" .. q) == "rank " .. q) end
  g:barrier()
  print(string.format("rank %d of %d: all_reduce sum %g %g, mean %g, broadcast %g: ok", r, n,
                      a:sum():item(), b:sum():item(), m:sum():item(), c:sum():item()))
elseif mode == "exit" then
  local t = bv.ones({4})
  g:all_reduce({t})
  if r == 1 then
    write(dir .. "/pid1", tostring(pid()))
    io.stderr:write("rank 1 exits with code 3 now\n")
    os.exit(3)
  end
  for _ = 1, 1000 do g:all_reduce({t}) end
  error("rank " .. r .. ": all_reduce kept working after rank 1 exited")
elseif mode == "loop" then
  write(dir .. "/pid" .. r, tostring(pid()))
  local t = bv.ones({4})
  local start = bv.clock()
  while bv.clock() - start < 60 do g:all_reduce({t}) end
  error("rank " .. r .. ": nobody was killed within 60 s")
else
  error("unknown mode " .. tostring(mode))
end
