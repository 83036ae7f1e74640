-- bv.attach (bindings/attach.cpp): the sockets of `bvlua attach` seen from Lua, with the listener
-- and the client in this one process: frames both ways, the per-step pending() check, poll's
-- events, and run_interruptible stopped by the client's 'I' frame or its leaving, but not
-- inside hold(). The prompt itself (bv._repl.remote_loop) is driven by tests/cli.
local T = require "tests.lua.lib.testing"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

local n_sockets = 0
local function socket_path()
  n_sockets = n_sockets + 1
  return string.format("%s/attach%d.sock", tmp, n_sockets)
end

-- Polls until an event of `kind` arrives (5 s at most); returns it and all events seen.
local function poll_for(l, kind)
  local seen, found = {}, nil
  local deadline = bv.clock() + 5
  while bv.clock() < deadline do
    for _, e in ipairs(l:poll(0.05)) do
      seen[#seen + 1] = e
      found = found or (e.event == kind and e)
    end
    if found then return found, seen end
  end
  error("no '" .. kind .. "' event in 5 s; saw " .. T.dump(seen), 2)
end

-- A listener with one client connected: l, client, the client's id.
local function pair()
  local path = socket_path()
  local l, note = bv.attach.listen(path)
  T.eq(note, nil)
  local client = bv.attach.connect(path)
  local e = poll_for(l, "connected")
  return l, client, e.id, e
end

local function busy_until(seconds)
  local stop = bv.clock() + seconds
  local n = 0
  while bv.clock() < stop do n = n + 1 end
  return n
end

T.test("listen and connect: frames both ways, pending(), poll's events", function()
  local l, client, id, connected = pair()
  T.eq(math.type(connected.uid), "integer")
  T.eq(math.type(connected.pid), "integer")
  T.eq(type(connected.user), "string")
  T.eq(l:pending(), false)
  T.eq(client:send("C", "return 1 + 1"), true)
  T.eq(client:send("C", ""), true)
  T.eq(l:pending(), true)
  local _, seen = poll_for(l, "frame")
  if #seen < 2 then
    for _, e in ipairs(l:poll(1)) do seen[#seen + 1] = e end
  end
  T.eq(seen, {{event = "frame", id = id, kind = "C", payload = "return 1 + 1"},
              {event = "frame", id = id, kind = "C", payload = ""}})
  T.eq(l:pending(), false)

  local big = string.rep("0123456789abcdef", 4096)  -- 64 KB: more than one read
  T.eq(l:send(id, "O", big), true)
  T.eq(l:send(id, "D", "0.5"), true)
  T.eq({client:recv(5)}, {"O", big})
  T.eq({client:recv(5)}, {"D", "0.5"})
  T.eq(client:recv(0), nil)  -- nothing more: a timeout
  T.eq(client:recv(0.05), nil)

  client:close()
  local closed = poll_for(l, "closed")
  T.eq(closed, {event = "closed", id = id})
  T.eq(l:send(id, "O", "anyone?"), false)
  l:close()
end)

T.test("listen: a stale socket is replaced with a note, the path and close() are kept", function()
  local path = socket_path()
  local l = bv.attach.listen(path)
  T.eq(l:path(), path)
  T.truthy(tostring(l):find(path, 1, true), tostring(l))
  local l2, note = bv.attach.listen(path)  -- as after a killed run: the file is a socket
  T.eq(note, "replaced a stale attach socket at " .. path ..
             " (left by a run that did not exit cleanly)")
  l:close()
  T.truthy(bv.fs.exists(path), "the first listener left the second's socket alone")
  local client = bv.attach.connect(path)
  poll_for(l2, "connected")
  l2:close()
  l2:close()  -- idempotent
  T.eq(bv.fs.exists(path), false)
  T.eq({client:recv(1)}, {false, "closed"})
  T.raises(function() l2:poll(0) end, "listener:poll: the listener at " .. path .. " is closed")
  client:close()
end)

T.test("listen and connect: errors name the path", function()
  local file = tmp .. "/plain.txt"
  bv.fs.write_file(file, "x")
  T.raises(function() bv.attach.listen(file) end, file)
  local missing = tmp .. "/missing.sock"
  T.raises(function() bv.attach.connect(missing) end,
           "no run is listening: " .. missing .. " does not exist")
  local path = socket_path()
  local l = bv.attach.listen(path)
  local c = bv.attach.connect(path)
  c:close()
  l:close()
  T.raises(function() bv.attach.connect(path) end, "does not exist")
end)

T.test("argument checks name the function and the argument", function()
  local l, client, id = pair()
  T.raises(function() l:send(id, "CC", "x") end,
           'listener:send: argument #3 (kind) must be a one-character string, got "CC"')
  T.raises(function() l:send("1", "C", "x") end, "listener:send: argument #2 (id) must be an integer")
  T.raises(function() l:send(id, "C", 1) end, "argument #4 (payload) must be a string")
  T.raises(function() l:poll(-1) end, "listener:poll: argument #2 (timeout_s) must be a number >= 0")
  T.raises(function() client:send("C") end, "client:send: argument #3 (payload)")
  T.raises(function() l.pending() end, "listener:pending: argument #1 must be a listener")
  T.raises(function() bv.attach.listen() end, "bv.attach.listen: argument #1 (path)")
  T.raises(function() bv.attach.run_interruptible(l, id, 3) end,
           "bv.attach.run_interruptible: argument #3 (fn) must be a function")
  T.raises(function() bv.attach.run_interruptible({}, id, print) end,
           "bv.attach.run_interruptible: argument #1 must be a listener")
  T.raises(function() bv.attach.hold("f") end, "bv.attach.hold: argument #1 (fn)")
  client:close()
  l:close()
end)

T.test("run_interruptible: results as pcall gives them, an error as false and its message",
       function()
  local l, client, id = pair()
  T.eq({bv.attach.run_interruptible(l, id, function(a, b) return a + b, "x", nil end, 2, 3)},
       {true, 5, "x"})
  T.eq(select("#", bv.attach.run_interruptible(l, id, function() return nil, nil end)), 3)
  local ok, err = bv.attach.run_interruptible(l, id, function() error("boom") end)
  T.eq(ok, false)
  T.truthy(err:find("attach_socket_test.lua:%d+: boom$"), err)
  local ok2, obj = bv.attach.run_interruptible(l, id, function() error({code = 7}) end)
  T.eq({ok2, obj}, {false, {code = 7}})
  T.eq(debug.gethook(), nil)
  client:close()
  l:close()
end)

T.test("run_interruptible: an I frame from the client stops a busy Lua loop", function()
  local l, client, id = pair()
  local started = bv.clock()
  local ok, err = bv.attach.run_interruptible(l, id, function()
    local i = 0
    while true do
      i = i + 1
      if i == 1000 then client:send("I", "") end
      if bv.clock() - started > 10 then return "never interrupted" end
    end
  end)
  T.eq(ok, false)
  T.truthy(err:find("interrupted at the prompt (Ctrl-C)", 1, true), err)
  T.truthy(bv.clock() - started < 2, "stopped within a fraction of a second")
  T.eq(debug.gethook(), nil)
  -- The I frame was taken; the connection lives on, and a later command runs to its end.
  T.eq(l:pending(), false)
  T.eq((bv.attach.run_interruptible(l, id, busy_until, 0.1)), true)
  client:close()
  l:close()
end)

T.test("run_interruptible: the prompt going away stops the command", function()
  local l, client, id = pair()
  local ok, err = bv.attach.run_interruptible(l, id, function()
    client:close()
    busy_until(10)
    return "ran to the end"
  end)
  T.eq(ok, false)
  T.truthy(err:find("the attached prompt went away", 1, true), err)
  T.eq(poll_for(l, "closed").id, id)
  l:close()
end)

T.test("hold: no interrupt while fn runs; the I frame counts once hold returns", function()
  local l, client, id = pair()
  local held_done = false
  local ok, err = bv.attach.run_interruptible(l, id, function()
    local r1, r2 = bv.attach.hold(function(x)
      client:send("I", "")
      busy_until(0.3)  -- checked 15 times over: all suspended
      return x, "held"
    end, 5)
    held_done = r1 == 5 and r2 == "held"
    busy_until(5)
    return "not interrupted after hold"
  end)
  T.eq(held_done, true)
  T.eq(ok, false)
  T.truthy(err:find("interrupted at the prompt", 1, true), err)
  -- hold's errors propagate, and the check comes back after them.
  local ok2, err2 = bv.attach.run_interruptible(l, id, function()
    local caught = select(2, pcall(bv.attach.hold, function() error("inside hold", 0) end))
    client:send("I", "")
    busy_until(5)
    return caught
  end)
  T.eq(ok2, false)
  T.truthy(err2:find("interrupted at the prompt", 1, true), err2)
  T.eq(bv.attach.hold(function(...) return select("#", ...) end, nil, nil), 2)
  client:close()
  l:close()
end)

T.test("run_interruptible: nested, the inner one puts the outer's check back", function()
  local l, client, id = pair()
  local inner_ok, inner_err
  local ok, err = bv.attach.run_interruptible(l, id, function()
    inner_ok, inner_err = bv.attach.run_interruptible(l, id, function()
      client:send("I", "")
      busy_until(5)
    end)
    client:send("I", "")
    busy_until(5)
    return "outer ran to the end"
  end)
  T.eq(inner_ok, false)
  T.truthy(inner_err:find("interrupted at the prompt", 1, true), inner_err)
  T.eq(ok, false)
  T.truthy(err:find("interrupted at the prompt", 1, true), err)

  -- A hook set before (a debugger's) is back afterwards, after an error too.
  local calls = 0
  local function counting() calls = calls + 1 end
  debug.sethook(counting, "", 50)
  bv.attach.run_interruptible(l, id, function() error("x") end)
  local hook, mask, count = debug.gethook()
  debug.sethook()
  T.eq({hook == counting, mask, count}, {true, "", 50})
  client:close()
  l:close()
end)

T.test("__close: a to-be-closed listener removes its socket", function()
  local path = socket_path()
  do
    local l <close> = bv.attach.listen(path)
    T.truthy(bv.fs.exists(path))
  end
  T.eq(bv.fs.exists(path), false)
end)

T.run()
os.execute("rm -rf '" .. tmp .. "'")
