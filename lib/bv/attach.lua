-- bv.attach: the run's side of `bvlua attach DIR`, a Lua prompt inside a running `bvlua train`
-- (the prompt's side: bv.commands.attach; the socket and its frames: runtime/attach/socket.h,
-- bindings/attach.cpp).
--
-- Where and when. Rank 0 listens on DIR/.bvlua.attach from the first step on: a Unix socket
-- that only this user may open (mode 0600, and the uid of every connection is checked, so a
-- loosened mode lets nobody else in). At the end of every step (bv.trainers.utils.end_of_step,
-- after the step's line and checkpoint) rank 0 asks the socket whether anything arrived: one
-- poll() with no wait, carried to the other ranks inside the stop check's all-reduce
-- (Sharding:stop_requested), so a run nobody attaches to pays nothing more. When something did,
-- every rank enters a session at that step boundary, with nothing half-updated:
--   * rank 0 accepts the prompt, runs each chunk it sends in that prompt's own environment,
--     with the live objects in scope (step, config, params, opt, metrics, batch, model), and
--     sends back what it printed and its values;
--   * the commands that change the run (save, evaluate, stop, change) are carried out by every
--     rank in the same order: rank 0 puts each in the c10d store ("bv/attach/N") before doing
--     it, and the other ranks, waiting in the session, read and do the same;
--   * the session ends when no chunk is waiting and the run is not paused; the run then goes
--     on with its next step. Its time counts as paused time (bv.chrono), not training time.
-- An error in a chunk goes back to the prompt, never into the training loop. Ctrl-C at the
-- prompt interrupts the chunk (or a one-process evaluation), not the run.
--
-- What a change leaves behind. Each change (change(key, value)) takes effect from the next step
-- and is written as a note in that step's line of big_vision_metrics.txt ("note": "attach:
-- lr_multiplier 1 -> 0.5"); pause, resume, save and evaluate are noted too. The changes so far
-- go into every checkpoint (state.attach_changes), so a resumed run continues with them, and to
-- DIR/config_changes.json beside config.json, which keeps the original config.
--
-- Frames (a kind byte and a text): prompt -> run: C a chunk, I interrupt, Q detach;
-- run -> prompt: H hello, O output, E error, N notice, D done (seconds taken), X the end.
local json = require "bv.json"
local log = require "bv.log"
local metrics = require "bv.metrics"

local M = {}

M.SOCKET = ".bvlua.attach"
M.CHANGES_FILE = "config_changes.json"

-- What change(key, value) may change, and how. evals.NAME.log_steps is handled by eval_key.
local function whole(min)
  return function(v)
    if type(v) ~= "number" or not math.tointeger(v) or v < min or v > 2^31 then
      return string.format("a whole number from %d to 2^31", min)
    end
  end
end

local CHANGEABLE = {
  lr_multiplier = {
    doc = "multiplies the schedule (the logged global_schedule), so the learning rate and "
      .. "the weight decay that follows it",
    check = function(v)
      if type(v) ~= "number" or v ~= v or v < 0 or v > 1e6 then
        return "a number from 0 to 1e6"
      end
    end,
    get = function(state) return state.opt:lr_multiplier() end,
    set = function(state, v) state.opt:set_lr_multiplier(v) end},
  log_training_steps = {
    doc = "how often the training metrics are logged, in steps",
    check = whole(1),
    get = function(state) return state.log_every end,
    set = function(state, v) state.log_every = math.tointeger(v) end},
}

local function eval_named(state, name)
  for _, e in ipairs(state.evals or {}) do
    if e.name == name then return e end
  end
end

local function eval_names(state)
  local names = {}
  for _, e in ipairs(state.evals or {}) do names[#names + 1] = e.name end
  return #names > 0 and table.concat(names, ", ") or "none"
end

-- The rule for `key`, or nil and why not.
local function rule(state, key)
  if CHANGEABLE[key] then return CHANGEABLE[key] end
  local name = type(key) == "string" and key:match("^evals%.(.+)%.log_steps$")
  if name then
    if state.evals and not eval_named(state, name) then
      return nil, string.format("no evaluator '%s' (this run's: %s)", name, eval_names(state))
    end
    return {doc = "how often evaluator " .. name .. " runs, in steps (0: never)",
            check = whole(0),
            get = function(s) local e = eval_named(s, name); return e and e.log_steps or 0 end,
            set = function(s, v)
              local e = eval_named(s, name)
              if e then e.log_steps = v > 0 and math.tointeger(v) or nil end
            end}
  end
  return nil, string.format("'%s' cannot be changed while the run trains (what can: "
    .. "lr_multiplier, log_training_steps, evals.NAME.log_steps)", tostring(key))
end

local function show_value(v)
  if math.type(v) == "float" and v == math.floor(v) and math.abs(v) < 2^53 then
    return string.format("%d", v)
  end
  return tostring(v)
end

-- The changes made so far: state.changes = {current = {key = value}, history = {{step, key,
-- from, to, time}, ...}} (nil until the first).
local function write_changes_file(state)
  if state.rank ~= 0 then return end
  local path = state.workdir:gsub("/+$", "") .. "/" .. M.CHANGES_FILE
  bv.fs.write_file(path, json.encode({
    note = "what bvlua attach changed while the run trained (config.json keeps the config it "
      .. "started with; its checkpoints keep these)",
    current = state.changes.current, history = state.changes.history}, {indent = 2}) .. "\n")
end

local function record_change(state, step, key, from, to)
  state.changes = state.changes or {current = {}, history = {}}
  state.changes.current[key] = to
  table.insert(state.changes.history, {step = step, key = key, from = from, to = to,
                                       time = os.date("!%Y-%m-%dT%H:%M:%SZ")})
  write_changes_file(state)
end

-- Notes for the next step's line (every rank keeps them; rank 0's writer writes them).
local function note_next_step(state, text)
  state.attach_notes = state.attach_notes or {}
  table.insert(state.attach_notes, text)
end

-- ---------------------------------------------------------------------------------------------
-- Called by bv.trainers.utils

-- Whether this process listens: rank 0, unless config.attach = false or --no-attach.
local function wanted(state)
  return state.rank == 0 and state.config.attach ~= false and not state.run.no_attach
end

-- Starts listening (rank 0; at the first step the run trains). A stale socket left by a killed
-- run is replaced (we hold the workdir's lock, so no live run owns it).
function M.open(state)
  state.attach_seq = 0
  state.attach_run = state.first_step  -- the store's keys of this run: bv/attach/FIRST_STEP/N
  if not wanted(state) or state.attach then return end
  local path = state.workdir:gsub("/+$", "") .. "/" .. M.SOCKET
  local ok, listener, note = pcall(bv.attach.listen, path)
  if not ok then
    log.warn("bvlua attach: no prompt can attach to this run: %s (the run goes on; "
             .. "--no-attach says this is wanted)", tostring(listener))
    return
  end
  if note then log.note("%s", note) end
  state.attach = {listener = listener, clients = {}, paused = false}
  log.note("`bvlua attach %s` opens a prompt inside this run (--no-attach: no listener)",
           state.workdir)
end

-- Whether something waits on the socket (rank 0; false elsewhere): one poll(), no allocation.
function M.pending(state)
  local a = state.attach
  return a ~= nil and a.listener:pending()
end

-- The notes of changes made at the last boundary, into this step's line (after mw:step_start).
function M.write_notes(state)
  if not state.attach_notes then return end  -- every step: nothing made, usually
  for _, text in ipairs(state.attach_notes) do state.mw:note(text) end
  state.attach_notes = nil
end

-- How many changes bvlua attach has made; whether the checkpoint of `step` exists and holds
-- them all (a change after it means saving the step again).
function M.change_count(state) return state.changes and #state.changes.history or 0 end
function M.saved_at(state, step)
  return state.saved_step == step and (state.saved_changes or 0) == M.change_count(state)
end

-- Resuming: the changes the checkpoint holds (its state.attach_changes) are made again, and
-- config_changes.json is rewritten to agree with that checkpoint. Called after the optimizer is
-- made (resume_or_init) and again once the evaluators exist (utils.evaluators); each call
-- applies what it can reach. Says what it applied, once.
function M.restore(state, saved)
  if saved ~= nil then
    state.changes = saved
    state.saved_changes = #saved.history
    if state.rank == 0 then write_changes_file(state) end
  elseif state.rank == 0 and state.changes == nil then
    -- A checkpoint without changes: a file from changes made after it is set aside.
    local path = state.workdir:gsub("/+$", "") .. "/" .. M.CHANGES_FILE
    local aside = metrics.set_aside(path, "dropped")
    if aside then
      log.note("Resuming from a checkpoint made before the changes in %s: moved it to %s",
               M.CHANGES_FILE, aside)
    end
  end
  local changes = state.changes
  if not changes then return end
  local applied = {}
  for key, v in pairs(changes.current) do
    local r, why = rule(state, key)
    local reachable = CHANGEABLE[key] or state.evals
    if r and reachable and r.get(state) ~= v then
      r.set(state, v)
      applied[#applied + 1] = key .. " " .. show_value(v)
    elseif not r and state.evals then
      log.warn("the checkpoint's change %s = %s from bvlua attach no longer applies: %s", key,
               show_value(v), why)
    end
  end
  table.sort(applied)
  if #applied > 0 then
    log.note("Resuming with the changes made by bvlua attach: %s (%s)",
             table.concat(applied, ", "), M.CHANGES_FILE)
  end
end

-- Ends the listener: connected prompts are told why, the socket file goes.
function M.close(state, why)
  local a = state.attach
  if not a then return end
  for id in pairs(a.clients) do a.listener:send(id, "X", why or "the run ended") end
  a.listener:close()
  state.attach = nil
end

-- ---------------------------------------------------------------------------------------------
-- Commands, done by every rank in the same order (apply), rank 0 first putting each in the
-- store (relay). ctx = {step, params, loss, evaluate = fn(e) -> {name = value}, save = fn()}.

local function apply(state, ctx, cmd)
  local what = cmd[1]
  if what == "evaluate" then
    local e = eval_named(state, cmd[2])
    state.mw:step_start(ctx.step)  -- a line of its own for this step, written now
    local results = ctx.evaluate(e)
    state.mw:note("attach: evaluate " .. e.name)
    state.mw:step_end()
    return results
  elseif what == "save" then
    if M.saved_at(state, ctx.step) then return false end
    ctx.save()
    note_next_step(state, "attach: saved a checkpoint at step " .. ctx.step)
    return true
  elseif what == "change" then
    local key, v = cmd[2], cmd[3]
    local r = assert(rule(state, key))
    local from = r.get(state)
    record_change(state, ctx.step, key, from, v)  -- first: what cannot be recorded is not made
    r.set(state, v)
    note_next_step(state, string.format("attach: %s %s -> %s", key, show_value(from),
                                        show_value(v)))
    return from
  elseif what == "stop" then
    if not M.saved_at(state, ctx.step) then ctx.save() end
    return true
  elseif what == "note" then
    note_next_step(state, cmd[2])
  elseif what ~= "end" then
    error("bvlua attach: unknown command from rank 0: " .. tostring(what), 0)
  end
end

-- Waits until the store has `key` (the other ranks: rank 0's next command; rank 0: another
-- rank's outcome), polling: quickly at first, then every 50 ms (a pause may last hours, and the
-- store's own waits time out). `also()`, when given, is checked between polls.
local function await_key(group, key, also)
  local pause = 0.002
  while not group:check(key) do
    if also then also() end
    bv.sleep(pause)
    pause = math.min(pause * 2, 0.05)
  end
  return group:get(key)
end

local function key(state, n) return "bv/attach/" .. state.attach_run .. "/" .. n end

-- Rank 0 does a command that touches the run, and with several processes has every rank do it
-- in the same order: the command goes to the store first, and each rank's outcome comes back
-- there; an error on any rank is an error at the prompt (naming the ranks), and every rank stays
-- in the session (a failed save on one rank is reported to the others by save_checkpoint).
local function relay(state, ctx, cmd)
  local a = state.attach
  if a.stop then error("the run is stopping: stop() was called", 0) end
  if a.ctx ~= ctx then
    error("this command belongs to the prompt's session at an earlier step: call it again", 0)
  end
  local n
  if state.world > 1 then
    state.attach_seq = state.attach_seq + 1
    n = state.attach_seq
    state.shard.group:set(key(state, n), json.encode(cmd))
  end
  -- Ctrl-C at the prompt may cut a one-process evaluation short (nothing of it is kept), but
  -- nothing else: not a checkpoint being written, nor anything the other ranks do too.
  local run = (cmd[1] == "evaluate" and state.world == 1) and pcall
              or function(...) return pcall(bv.attach.hold, ...) end
  local ok, result = run(apply, state, ctx, cmd)
  if not n or cmd[1] == "end" then
    if not ok then error(result, 0) end
    return result
  end
  local failed = {}
  if not ok then failed[1] = "rank 0: " .. tostring(result) end
  for r = 1, state.world - 1 do
    local outcome = await_key(state.shard.group, key(state, n) .. "/" .. r)
    if outcome ~= "ok" then failed[#failed + 1] = string.format("rank %d: %s", r, outcome) end
  end
  if #failed > 0 then error(table.concat(failed, "\n"), 0) end
  return result
end

-- The other ranks during a session: rank 0's commands, in order, each outcome put back in the
-- store, until rank 0 ends the session (stopped or not). A stop signal to this rank while it
-- waits is passed to rank 0 through the store (a paused run stops on it).
local function follow(state, ctx)
  local group = state.shard.group
  local told = false
  local function pass_signal()
    if not told and bv.stop_requested() then
      told = true
      group:set(key(state, "signal"), bv.stop_requested())
    end
  end
  while true do
    state.attach_seq = state.attach_seq + 1
    local n = state.attach_seq
    local cmd = json.decode(await_key(group, key(state, n), pass_signal))
    if cmd[1] == "end" then return cmd[2] and {stopped = ctx.step} or nil end
    local ok, err = pcall(apply, state, ctx, cmd)
    group:set(key(state, n) .. "/" .. state.rank, ok and "ok" or tostring(err))
  end
end

-- ---------------------------------------------------------------------------------------------
-- The prompt's environment and its chunks (rank 0)

M.NAMES = "step, total_steps, config, params, opt, metrics, batch, model, workdir"
M.COMMANDS = "pause() resume() save() evaluate(name) stop() change(key, value) changes()"

local function hello(state, ctx)
  return string.format(
    "attached to bvlua train in %s%s, after step %d of %d%s\n"
    .. "Each command runs between two steps: the run waits while it runs; Ctrl-C interrupts "
    .. "the command, not the run; Ctrl-D detaches and the run goes on.\n"
    .. "  names: %s\n  commands: %s\n  change keys: lr_multiplier, log_training_steps, "
    .. "evals.NAME.log_steps (evaluators: %s)",
    state.workdir, state.world > 1 and string.format(" (rank 0 of %d)", state.world) or "",
    ctx.step,
    state.total_steps, state.attach.paused and " (paused)" or "", M.NAMES, M.COMMANDS,
    eval_names(state))
end

-- big_vision's metrics file as rows, read when first used in a chunk.
local function lazy_metrics(state)
  local rows
  local function load()
    if not rows then
      local path = state.workdir:gsub("/+$", "") .. "/" .. metrics.FILE_NAME
      rows = bv.fs.exists(path) and metrics.read(path) or {}
    end
    return rows
  end
  return setmetatable({}, {
    __index = function(_, k) return load()[k] end,
    __len = function() return #load() end,
    __pairs = function() return next, load(), nil end,
    __tostring = function() return string.format("metrics: %d lines of %s", #load(),
                                                 metrics.FILE_NAME) end})
end

local function commands(state, ctx, a, id, send)
  local c = {}
  function c.pause()
    if a.paused then return "already paused after step " .. ctx.step end
    a.paused, a.paused_at = true, bv.clock()
    log.note("bvlua attach: paused after step %d", ctx.step)
    return string.format("paused after step %d: the run waits until resume() or stop() "
                         .. "(detaching resumes it)", ctx.step)
  end
  function c.resume()
    if not a.paused then return "not paused" end
    a.paused = false
    local secs = bv.clock() - a.paused_at
    relay(state, ctx, {"note", string.format("attach: paused after step %d for %.1f s",
                                             ctx.step, secs)})
    log.note("bvlua attach: resumed after %.1f s", secs)
    return string.format("resumed (paused %.1f s)", secs)
  end
  function c.save()
    if not relay(state, ctx, {"save"}) then
      return string.format("step %d is already saved", ctx.step)
    end
    return string.format("saved a checkpoint at step %d", ctx.step)
  end
  function c.evaluate(name)
    if type(name) ~= "string" then
      error(string.format("evaluate(name): name the evaluator (this run's: %s)",
                          eval_names(state)), 2)
    end
    if not eval_named(state, name) then
      error(string.format("evaluate: no evaluator '%s' (this run's: %s)", name,
                          eval_names(state)), 2)
    end
    send("N", string.format("evaluating %s at step %d; the run waits%s", name, ctx.step,
                            state.world == 1 and " (Ctrl-C stops the evaluation, not the run)"
                              or ""))
    return relay(state, ctx, {"evaluate", name})
  end
  function c.stop()
    relay(state, ctx, {"stop"})
    a.stop = true  -- only once the checkpoint is written (on every rank)
    return string.format("saved a checkpoint at step %d; the run stops", ctx.step)
  end
  function c.change(key, value)
    local r, why = rule(state, key)
    if not r then error("change: " .. why, 2) end
    local bad = r.check(value)
    if bad then
      error(string.format("change: %s must be %s, got %s", key, bad, tostring(value)), 2)
    end
    local from = relay(state, ctx, {"change", key, value})
    return string.format("%s: %s -> %s from step %d on", key, show_value(from),
                         show_value(value), ctx.step + 1)
  end
  function c.changes()
    return state.changes and state.changes.history or {}
  end
  -- A command kept in a variable and called in a later session would act on this one's step.
  for name, fn in pairs(c) do
    c[name] = function(...)
      if a.ctx ~= ctx then
        error(name .. "() belongs to the session at step " .. ctx.step .. ": call it again", 2)
      end
      return fn(...)
    end
  end
  return c
end

-- The optimizer as the prompt sees it: what reads it, not what changes it (a change goes
-- through change(), which every rank makes and the run records).
local READ_ONLY = {update = true, load_state = true, load_state_tensor = true,
                   set_lr_multiplier = true}
local function optimizer_view(opt)
  return setmetatable({}, {
    __index = function(_, name)
      if READ_ONLY[name] then
        return function()
          error(string.format("opt:%s() would change the run behind its back: use change(%s)",
                              name, name == "set_lr_multiplier" and '"lr_multiplier", x'
                                or "key, value"), 2)
        end
      end
      local v = opt[name]
      if type(v) ~= "function" then return v end
      return function(self, ...)
        if self ~= nil and type(self) == "table" then return v(opt, ...) end
        return v(self, ...)
      end
    end,
    __tostring = function() return tostring(opt) end})
end

local function environment(state, ctx, a, id, send)
  local client = a.clients[id]
  client.env = client.env or setmetatable({}, {__index = _G})
  local env = client.env
  local live = state.run.state or {}
  env.step, env.total_steps, env.config, env.workdir = ctx.step, state.total_steps, state.config,
                                                       state.workdir
  -- With fsdp a rank holds placeholders for what it does not own: the prompt gets rank 0's own
  -- parts (shard:owned), which are real.
  local params = state.shard.fsdp and state.shard:owned(ctx.params) or ctx.params
  env.params, env.opt, env.batch, env.model = params, optimizer_view(state.opt), live.batch,
                                              live.model
  env.metrics = lazy_metrics(state)
  for name, fn in pairs(commands(state, ctx, a, id, send)) do env[name] = fn end
  env.print = function(...)
    local parts = table.pack(...)
    for i = 1, parts.n do parts[i] = tostring(parts[i]) end
    send("O", table.concat(parts, "\t", 1, parts.n) .. "\n")
  end
  return env
end

-- The chunk as an expression (its values shown) or as statements; a trailing ';' keeps quiet.
local function compile(code, env)
  local body = code:gsub("%s+$", "")
  local quiet = body:sub(-1) == ";"
  if quiet then body = body:sub(1, -2) end
  local fn = load("return " .. body .. ";", "=attach", "t", env)
  if fn then return fn, quiet end
  local err
  fn, err = load(code, "=attach", "t", env)
  if not fn then return nil, nil, err end
  return fn, true
end

-- What goes back to the prompt in one frame: at most 1 MiB (a frame may carry 64 MiB, but a
-- chunk that prints a huge tensor should not hold the run while it travels).
local MAX_TEXT = 1 << 20
local function clip(text)
  if #text <= MAX_TEXT then return text end
  return text:sub(1, MAX_TEXT) .. string.format("\n... (%d bytes more, not shown)\n",
                                                 #text - MAX_TEXT)
end

local function run_chunk(state, ctx, a, id, code, interrupted)
  local listener = a.listener
  local function send(kind, text) listener:send(id, kind, clip(text)) end
  local started = bv.clock()
  if interrupted then  -- Ctrl-C came with the chunk, before it could start
    send("E", "interrupted at the prompt (Ctrl-C) before it started\n")
    send("D", "")
    return
  end
  local topic = code:match("^%s*%?(.*)$")
  if topic then
    send("O", require("bv.repl").help(topic) .. "\n")
    send("D", "")
    return
  end
  local env = environment(state, ctx, a, id, send)
  local fn, quiet, err = compile(code, env)
  if not fn then
    send("E", tostring(err) .. "\n")
    send("D", "")
    return
  end
  -- io.write inside the chunk goes to the prompt too (the trainer's log does not use it); put
  -- back however the chunk ends.
  local write = io.write
  local restore <close> = setmetatable({}, {__close = function() io.write = write end})
  io.write = function(...)
    local parts = table.pack(...)
    for i = 1, parts.n do parts[i] = tostring(parts[i]) end
    send("O", table.concat(parts, "", 1, parts.n))
    return io.stdout
  end
  local results = table.pack(bv.attach.run_interruptible(listener, id, fn))
  if results[1] and not quiet and results.n > 1 then
    env._ = results[2]
    local repl = require "bv.repl"
    local ok, text = pcall(function()
      local parts, multiline = {}, false
      for i = 2, results.n do
        parts[#parts + 1] = repl.show(results[i])
        multiline = multiline or parts[#parts]:find("\n") ~= nil
      end
      return table.concat(parts, multiline and "\n" or "\t")
    end)
    results = ok and {true, n = 1} or {false, text, n = 2}
    if ok then send("O", text .. "\n") end
  end
  if not results[1] then send("E", tostring(results[2]) .. "\n") end
  send("D", string.format("%.3f", bv.clock() - started))
end

-- Detaching while paused resumes the run: a paused run that nobody watches only holds its
-- devices.
local function detached(state, ctx, a, id)
  local c = a.clients[id]
  a.clients[id] = nil
  log.note("bvlua attach: %s (pid %d) detached after step %d", c.user or "?", c.pid or 0, ctx.step)
  if a.paused and next(a.clients) == nil then
    log.note("bvlua attach: the last prompt detached while the run was paused: resuming")
    commands(state, ctx, a, id, function() end).resume()
  end
end

local function handle(state, ctx, a, ev, interrupted)
  if ev.event == "connected" then
    a.clients[ev.id] = {user = ev.user, pid = ev.pid}
    log.note("bvlua attach: %s (pid %d) attached after step %d", ev.user, ev.pid, ctx.step)
    a.listener:send(ev.id, "H", hello(state, ctx))
  elseif ev.event == "refused" then
    log.warn("bvlua attach: %s", ev.message)
  elseif ev.event == "closed" then
    if a.clients[ev.id] then detached(state, ctx, a, ev.id) end
  elseif ev.event == "frame" and a.clients[ev.id] then
    if ev.kind == "C" then
      run_chunk(state, ctx, a, ev.id, ev.payload, interrupted)
    elseif ev.kind == "Q" then
      a.listener:drop(ev.id)
      detached(state, ctx, a, ev.id)
    end  -- a late 'I' (the chunk had ended) means nothing
  end
end

-- The stop signal to stop a paused run on: this process's, or one another rank passed on.
local function signal(state)
  local mine = bv.stop_requested()
  if mine or state.world == 1 then return mine end
  local group = state.shard.group
  return group:check(key(state, "signal")) and group:get(key(state, "signal")) .. " on another rank"
end

-- Rank 0's session: the prompts' frames until none waits and the run is not paused. A SIGTERM or
-- SIGINT while paused stops the run (its checkpoint saved), as it would between steps. Whatever
-- goes wrong with one prompt (it sent a frame too large, it went away) drops that prompt and
-- leaves the run as it was.
local function serve(state, ctx)
  local a = state.attach
  while true do
    local events = a.listener:poll(a.paused and 0.5 or 0.02)
    for i, ev in ipairs(events) do
      -- An 'I' in the same batch as the chunk it meant to stop: the chunk does not start.
      local interrupted = false
      if ev.event == "frame" and ev.kind == "C" then
        for j = i + 1, #events do
          local later = events[j]
          if later.id == ev.id and later.event == "frame" then
            if later.kind == "I" then interrupted = true end
            break
          end
        end
      end
      local ok, err = pcall(handle, state, ctx, a, ev, interrupted)
      if not ok then
        log.warn("bvlua attach: dropped a prompt after an error serving it: %s", tostring(err))
        if ev.id and a.clients[ev.id] then
          a.listener:drop(ev.id)
          a.clients[ev.id] = nil
        end
      end
      if a.stop then break end
    end
    if a.stop then return {stopped = ctx.step} end
    local stop = a.paused and signal(state)
    if stop then
      relay(state, ctx, {"stop"})
      for id in pairs(a.clients) do
        a.listener:send(id, "N", string.format("%s received: the run saved a checkpoint at step "
                                               .. "%d and stops", stop, ctx.step))
      end
      return {stopped = ctx.step, signal = stop}
    end
    if #events == 0 and not a.paused then return nil end
  end
end

-- The session at the end of step ctx.step, on every rank (end_of_step calls it when rank 0's
-- socket had something). Returns {stopped = step} when the prompt stopped the run (its
-- checkpoint saved), else nil. Its time is paused time on the run's clock.
function M.session(state, ctx)
  state.chrono:pause()
  local resume <close> = setmetatable({}, {__close = function() state.chrono:resume() end})
  if state.rank ~= 0 then return follow(state, ctx) end
  local a = state.attach
  a.ctx = ctx
  local ok, stopped = pcall(serve, state, ctx)
  local stopping = ok and stopped ~= nil
  if state.world > 1 then  -- the other ranks leave the session with rank 0, stopped or not
    state.attach_seq = state.attach_seq + 1
    state.shard.group:set(key(state, state.attach_seq), json.encode({"end", stopping}))
  end
  a.ctx = nil
  if not ok then error(stopped, 0) end
  if stopping then
    M.close(state, string.format("the run stopped after step %d (checkpoint saved)", ctx.step))
  end
  return stopped
end

return M
