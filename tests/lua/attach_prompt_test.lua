-- The prompt of `bvlua attach` (bv._repl.remote_loop, bindings/repl.cpp) against a scripted run:
-- this process listens and answers as lib/bv/attach.lua would, a child bvlua reads its lines
-- from a file (the plain line source) and talks to it. What the run receives (whole chunks,
-- 'I' on Ctrl-C, 'Q' at the end) and what the prompt shows and returns.
local T = require "tests.lua.lib.testing"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

local client_script = tmp .. "/client.lua"
bv.fs.write_file(client_script, [[
local c = bv.attach.connect(arg[1])
local why, msg = require("bv._repl").remote_loop(c, {history = false})
print("result:", why, msg)
]])

local n_runs = 0

-- Starts the prompt on `input` against a new listener; calls on_frame(l, e, pid) for every frame
-- until the prompt's process ends. Returns the frames as "K:payload", its output and exit code.
local function session(input, on_frame)
  n_runs = n_runs + 1
  local dir = string.format("%s/run%d", tmp, n_runs)
  bv.fs.mkdirs(dir)
  bv.fs.write_file(dir .. "/input.txt", input)
  local l = bv.attach.listen(dir .. "/attach.sock")
  local pid = bv._proc.spawn({"/bin/sh", "-c", 'exec "$0" run "$1" "$2" < "$3"',
                              bv.dist.executable(), client_script, dir .. "/attach.sock",
                              dir .. "/input.txt"}, nil, dir .. "/log.txt")
  local frames, code = {}, nil
  local deadline = bv.clock() + 60
  while true do
    for _, e in ipairs(l:poll(0.05)) do
      if e.event == "frame" then
        frames[#frames + 1] = e.kind .. ":" .. e.payload
        on_frame(l, e, pid)
      end
    end
    if code then break end  -- one more poll after the end: frames sent just before it
    code = bv._proc.poll(pid)
    if not code and bv.clock() > deadline then
      bv._proc.signal(pid, "KILL")
      error("the prompt did not end in 60 s; log:\n" .. bv.fs.read_file(dir .. "/log.txt"))
    end
  end
  l:close()
  return frames, bv.fs.read_file(dir .. "/log.txt"), code
end

local function has(text, part)
  T.truthy(text:find(part, 1, true), string.format("%q in the output:\n%s", part, text))
end

-- Answers a chunk as the run would: its output, a notice, a line on stderr, then done.
local function answer(l, e)
  if e.kind ~= "C" then return end
  l:send(e.id, "O", "ran: " .. e.payload .. "\n")
  l:send(e.id, "N", "a notice")
  l:send(e.id, "E", "on stderr\n")
  l:send(e.id, "D", "0.01")
end

T.test("remote_loop: whole chunks go to the run, its frames are shown, Ctrl-D detaches",
       function()
  local input = "x = 1 +\n  2\n\n   \n?bv.tensor\nfor i = 1, 2 do\n  print(i)\nend\n" ..
                "return )\nf(\n"  -- a syntax error is the run's to report; f( is never finished
  local frames, out, code = session(input, answer)
  T.eq(frames, {"C:x = 1 +\n  2", "C:?bv.tensor", "C:for i = 1, 2 do\n  print(i)\nend",
                "C:return )", "Q:"})
  has(out, "ran: x = 1 +\n  2\n")
  has(out, "a notice\n")  -- not a terminal: plain
  has(out, "on stderr\n")
  has(out, "result:\tdetached\tnil")
  T.eq(code, 0)
end)

T.test("remote_loop: an X frame ends the session with its message", function()
  local frames, out, code = session("step()\nnever_sent()\n", function(l, e)
    l:send(e.id, "O", "partial output\n")
    l:send(e.id, "X", "bvlua attach: the run ended (step 10)")
    l:drop(e.id)
  end)
  T.eq(frames, {"C:step()"})
  has(out, "partial output\n")
  has(out, "bvlua attach: the run ended (step 10)\n")
  has(out, "result:\tclosed\tbvlua attach: the run ended (step 10)")
  T.eq(code, 0)
end)

T.test("remote_loop: a run that closes the connection is reported as closed", function()
  local frames, out, code = session("step()\nnever_sent()\n", function(l, e) l:drop(e.id) end)
  T.eq(frames, {"C:step()"})
  has(out, "bvlua attach: the run closed the connection (it ended or stopped)\n")
  has(out, "result:\tclosed\tnil")
  T.eq(code, 0)
end)

T.test("remote_loop: Ctrl-C while a chunk runs sends I, and the prompt goes on", function()
  local frames, out, code = session("slow()\nafter()\n", function(l, e, pid)
    if e.kind == "C" and e.payload == "slow()" then
      l:send(e.id, "O", "working\n")
      bv._proc.signal(pid, "INT")
    elseif e.kind == "I" then
      l:send(e.id, "E", "interrupted at the prompt (Ctrl-C)\n")
      l:send(e.id, "D", "")
    else
      answer(l, e)
    end
  end)
  T.eq(frames, {"C:slow()", "I:", "C:after()", "Q:"})
  has(out, "working\n")
  has(out, "interrupted at the prompt (Ctrl-C)\n")
  has(out, "ran: after()\n")
  has(out, "result:\tdetached\tnil")
  T.eq(code, 0)
end)

T.test("remote_loop: argument checks", function()
  local native = require "bv._repl"
  T.raises(function() native.remote_loop({}) end,
           "bv._repl.remote_loop: argument #1 must be a client from bv.attach.connect")
  local l = bv.attach.listen(tmp .. "/args.sock")
  local c = bv.attach.connect(tmp .. "/args.sock")
  T.raises(function() native.remote_loop(c, {histroy = false}) end, "unknown option 'histroy'")
  c:close()
  l:close()
end)

T.run()
os.execute("rm -rf '" .. tmp .. "'")
