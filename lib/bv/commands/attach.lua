-- bvlua attach WORKDIR: a Lua prompt inside the `bvlua train` that is running on WORKDIR, from
-- another terminal of the same machine and user. The run's side is bv.attach (what a chunk sees,
-- the commands, how several processes follow); this is the prompt's: connect to
-- WORKDIR/.bvlua.attach, wait for the run's hello (it answers between two steps), then read
-- lines and show what the run sends back (bindings/repl.cpp's remote_loop).
local cli = require "bv.commands.cli"

local M = {}

M.USAGE = [[
usage: bvlua attach WORKDIR

Opens a Lua prompt inside the `bvlua train` running on WORKDIR (same machine, same user). Each
command runs between two training steps, with the run's live objects in scope: step, config,
params, opt, metrics, batch, model. Commands: pause(), resume(), save(), evaluate(name),
stop() (save and exit, as SIGTERM), change(key, value) for lr_multiplier, log_training_steps
and evals.NAME.log_steps (from the next step on; noted in the metrics file, kept in
checkpoints and in WORKDIR/config_changes.json), changes(). Ctrl-C interrupts a command, not
the run (twice within 2 s: detach, the command left to finish); Ctrl-C or Ctrl-D at the prompt
detaches and the run goes on (a paused run resumes). `?name` shows a doc.

exit codes: 0 detached, or the run ended; 1 no run to attach to, or refused; 2 usage error]]

-- The run's hello: it comes at the end of the step the run is in (an evaluation or a
-- checkpoint may take a while; said after a second).
local function wait_for_hello(client, dir)
  local waited, told = 0, false
  while true do
    local kind, payload = client:recv(0.25)
    if kind == "H" then return payload end
    if kind == "X" then error(payload, 0) end
    if kind == false then
      error(string.format("the run in %s closed the connection before answering (it ended, "
                          .. "or refused this prompt)", dir), 0)
    end
    waited = waited + 0.25
    if waited >= 1 and not told then
      io.stderr:write(string.format("bvlua attach: connected to %s; waiting for the run to "
                                    .. "finish its step (or its evaluation, or checkpoint)...\n",
                                    dir))
      told = true
    end
  end
end

local function main(argv)
  if argv[1] == "-h" or argv[1] == "--help" then
    io.stdout:write(M.USAGE, "\n")
    return 0
  end
  if #argv ~= 1 then cli.usage(#argv == 0 and "missing WORKDIR" or "one WORKDIR only") end
  local dir = argv[1]:gsub("/+$", "")
  if dir == "" then dir = "/" end
  if argv[1]:sub(1, 1) == "-" then cli.usage("unknown option '" .. argv[1] .. "'") end
  if not bv.fs.is_dir(dir) then error("no such workdir: " .. dir, 0) end
  local path = dir .. "/" .. require("bv.attach").SOCKET
  if not bv.fs.exists(path) then
    error(string.format("no run is listening in %s: there is no %s (is `bvlua train` running "
      .. "there, without --no-attach? A run listens from its first step on)", dir, path), 0)
  end
  local client = bv.attach.connect(path)
  local banner = wait_for_hello(client, dir)
  io.stdout:write(banner, "\n")
  io.stdout:flush()
  local history = require("bv.repl").history_file(".bvlua_attach_history")
  local reason = require("bv._repl").remote_loop(client, {history = history, prompt = "attach> "})
  client:close()
  -- (When the run ended the session, remote_loop has shown what it said.)
  if reason == "detached" then
    io.stderr:write("bvlua attach: detached from ", dir, "; the run goes on\n")
  end
  return 0
end

function M.main(argv) return cli.run("attach", M.USAGE, main, argv) end

return M
