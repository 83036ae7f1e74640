-- bvlua sweep: a grid (or list) of config variants run as a queue on one machine, as big_vision's
-- GPU tutorial does with a GPU-aware task spooler. Each variant is `bvlua train CONFIG[:ARGS]
-- --config.KEY=VALUE ... --workdir DIR/<name>`, its name made of the swept values (config keys
-- and config arguments alike). Every job's config is resolved here first, as `bvlua train`
-- resolves it: one bad key or argument and nothing is launched. Then the config's prepare (the
-- data set drawn, a checkpoint or tokenizer written) runs here, once, one job after the other,
-- not in every job at once. Jobs run N at a time: on GPUs one per slot (CUDA_VISIBLE_DEVICES set
-- per job, --per-gpu K jobs sharing a GPU; a sweep given CUDA_VISIBLE_DEVICES itself, a
-- cluster's allocation, chooses among the devices it lists), on the CPU with cores/N threads
-- each. A finished run is marked (DIR/<name>/SWEEP_DONE) and
-- skipped when the same sweep runs again; an interrupted one resumes from its own checkpoints.
-- Ctrl-C (or SIGTERM) stops the jobs cleanly: each saves a checkpoint and exits.
local cli = require "bv.commands.cli"
local config = require "bv.config"
local config_keys = require "bv.config_keys"
local json = require "bv.json"
local preflight = require "bv.preflight"
local suggest = require "bv.suggest"

local M = {}

M.USAGE = [==[
usage: bvlua sweep SWEEP.lua
       bvlua sweep CONFIG[:ARGS] --workdir DIR --grid NAME=V1,V2,... [--grid ...]
                   [--config.KEY=VALUE ...] [--jobs N] [--gpus N [--per-gpu K]]

Runs `bvlua train CONFIG[:ARGS] --config.KEY=VALUE ... --workdir DIR/<name>` for every
variant, N at a time. A swept NAME is a config key (as in --config.KEY), or, written with a
leading ':', an argument of the config, as in CONFIG:NAME=V:

  bvlua sweep configs/lines/resnet.lua:runlocal --workdir sw --grid lr=1e-3,3e-4 \
              --grid :flip=true,false --config.total_steps=4

runs `bvlua train configs/lines/resnet.lua:runlocal,flip=true --config.total_steps=4
--config.lr=0.001 --workdir sw/lr0.001_fliptrue`, and 3 more. A bare NAME that is not a config
key but is an argument the config declares (config.parse_arg) is that argument. Before any job
starts, every job's config is resolved as `bvlua train` would: an unknown key or argument or a
bad value lists every job it breaks, and nothing is launched. The config's prepare (what
`bvlua train` makes first: the lines data set drawn, a stand-in checkpoint, a tokenizer) then
runs in the sweep, job after job, before any job starts; a failure stops the sweep there.
Swept numbers reach the jobs in full (--config.lr=0.00012345678); run names keep 6 digits.

A sweep file is Lua returning the same as a table:

  return {config = "configs/lines/resnet.lua:runlocal", workdir = "runs/sweep",
          grid = {{"lr", {1e-3, 3e-4}}, {":flip", {true, false}}},  -- every combination
          -- or list = {{lr = 1e-3}, {lr = 3e-4, [":flip"] = false}},
          overrides = {total_steps = 4},  -- every job, not in the names
          jobs = 2, gpus = 0, per_gpu = 1, status = 30}

options:
  --workdir DIR       where the runs go, one directory each, named from the swept values
  --grid NAME=V1,...  a swept config key (or :argument) and its values (repeat for a grid)
  --config.KEY=VALUE  a fixed override for every job (also --config.KEY VALUE, --noconfig.KEY)
  --jobs N            jobs at once on the CPU (default 1); each gets cores/N threads
  --gpus N            jobs go to GPUs 0..N-1 (or to the first N that CUDA_VISIBLE_DEVICES
                      lists, when it is set), --per-gpu K at a time on each (default 1)
  --status SECS       print every job's state, step, last checkpoint and latest metrics this
                      often (default 30; 0: never); a sweep file may set status too
  -h, --help          this text

Running the same sweep again skips the finished runs and resumes the others. `bvlua runs DIR`
ranks them.]==]

-- A line of the sweep's log, out at once (its stdout is often a file read while it runs).
local function say(...)
  io.stdout:write(...)
  io.stdout:flush()
end

-- A value as the job's command line spells it: a float in the fewest digits that read back as
-- the same number (%.15g, else %.17g), so that 1.2345678e-4 reaches the job as 0.00012345678.
local function spell(v)
  if type(v) == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    local text = string.format("%.15g", v)
    return tonumber(text) == v and text or string.format("%.17g", v)
  end
  if type(v) == "table" then return json.encode(v) end
  return tostring(v)
end

-- A value as a run's directory name spells it: a float in 6 significant digits.
local function short(v)
  if math.type(v) == "float" then return string.format("%.6g", v) end
  return spell(v)
end

-- The variants: a list of {{name, value}, ...}, in the grid's order (the first name slowest).
local function variants(spec)
  if spec.list then
    if type(spec.list) ~= "table" then error("list must be a list of tables of values", 0) end
    local out = {}
    for i, v in ipairs(spec.list) do
      if type(v) ~= "table" then
        error(string.format("list[%d] is not a table of overrides", i), 0)
      end
      local keys = {}
      for k in pairs(v) do keys[#keys + 1] = k end
      table.sort(keys)
      local one = {}
      for _, k in ipairs(keys) do one[#one + 1] = {k, v[k]} end
      out[#out + 1] = one
    end
    return out
  end
  local out = {{}}
  for i, axis in ipairs(spec.grid or {}) do
    if type(axis) ~= "table" or type(axis[1]) ~= "string" or type(axis[2]) ~= "table"
        or #axis[2] == 0 then
      error(string.format("grid[%d] must be {\"key\", {value, ...}}", i), 0)
    end
    local next_out = {}
    for _, prefix in ipairs(out) do
      for _, v in ipairs(axis[2]) do
        local one = {table.unpack(prefix)}
        one[#one + 1] = {axis[1], v}
        next_out[#next_out + 1] = one
      end
    end
    out = next_out
  end
  if #out == 1 and #out[1] == 0 then error("nothing to sweep: give grid or list", 0) end
  return out
end

-- What a sweep file may hold.
local FILE_KEYS = {"config", "workdir", "grid", "list", "overrides", "jobs", "gpus", "per_gpu",
                   "status"}

local function from_file(path, spec)
  local known = {}
  for _, k in ipairs(FILE_KEYS) do known[k] = true end
  for k in pairs(spec) do
    if not known[k] then
      error(string.format('%s: unknown sweep key "%s"%s (a sweep file has %s)', path,
                          bv.snippet(tostring(k)), suggest.did_you_mean(tostring(k), FILE_KEYS),
                          table.concat(FILE_KEYS, ", ")), 0)
    end
  end
  local overrides = {}
  if spec.overrides ~= nil then
    if type(spec.overrides) ~= "table" then
      error(path .. ": overrides must be a table {KEY = value, ...}", 0)
    end
    for k, v in pairs(spec.overrides) do
      if type(k) ~= "string" then
        error(path .. ": overrides' keys are config keys such as \"input.batch_size\"", 0)
      end
      overrides[#overrides + 1] = {k:gsub("^config%.", ""), spell(v)}
    end
    table.sort(overrides, function(a, b) return a[1] < b[1] end)
  end
  spec.overrides = overrides
  return spec
end

local function parse_cli(argv)
  if argv[1] and argv[1]:match("%.lua$") and not argv[2] and bv.fs.exists(argv[1])
      and not argv[1]:find(":", 1, true) then
    -- A sweep file, unless it is a config (a config has no `config` field).
    local chunk, err = loadfile(argv[1], "t")
    if not chunk then cli.usage(err) end
    local spec = chunk()
    if type(spec) == "table" and spec.config then return from_file(argv[1], spec) end
  end
  local spec = {grid = {}, overrides = {}}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    local flag, eq_value = a:match("^(%-%-[^=]*)=(.*)$")
    if a == "--workdir" then
      spec.workdir = cli.value(argv, i)
      i = i + 1
    elseif a == "--grid" then
      local key, vals = cli.value(argv, i):match("^([^=]+)=(.+)$")
      if not key then cli.usage("--grid wants NAME=V1,V2,...") end
      local list = {}
      for v in vals:gmatch("[^,]+") do list[#list + 1] = tonumber(v) or v end
      spec.grid[#spec.grid + 1] = {key, list}
      i = i + 1
    elseif (flag or a):match("^%-%-config%.") then
      local key, v = (flag or a):sub(10), eq_value
      if not v then
        v = cli.value(argv, i)
        i = i + 1
      end
      if key == "" then cli.usage(a .. ": missing key after --config.") end
      spec.overrides[#spec.overrides + 1] = {key, v}
    elseif a:match("^%-%-noconfig%.") and not flag then
      if a == "--noconfig." then cli.usage(a .. ": missing key after --noconfig.") end
      spec.overrides[#spec.overrides + 1] = {a:sub(12), "false"}
    elseif a == "--status" then
      spec.status = tonumber(cli.value(argv, i)) or cli.usage("--status wants seconds")
      i = i + 1
    elseif a == "--jobs" or a == "--gpus" or a == "--per-gpu" then
      spec[a == "--per-gpu" and "per_gpu" or a:sub(3)] = cli.count(argv, i)
      i = i + 1
    elseif a:sub(1, 1) == "-" then
      cli.usage("unknown option " .. a)
    elseif spec.config then
      cli.usage("more than one CONFIG: " .. spec.config .. " and " .. a)
    else
      spec.config = a
    end
    i = i + 1
  end
  return spec
end

-- Jobs ------------------------------------------------------------------------------------------

-- The arguments CONFIG declares (the names its get_config gives config.parse_arg, as a set; [1]
-- the first of an ordered spec, which a lone value goes to), and its config as given (nil when
-- that fails: each job's check then says why). A config that reads its ARGS some other way
-- declares none: sweep its arguments as :NAME.
local function declared_args(spec_string)
  local names, parse_arg = {}, config.parse_arg
  config.parse_arg = function(arg, spec, opts)
    for k, v in pairs(type(spec) == "table" and spec or {}) do
      local name = math.type(k) == "integer" and type(v) == "table" and v[1] or k
      if type(name) == "string" then names[name] = true end
    end
    local first = type(spec) == "table" and type(spec[1]) == "table" and spec[1][1]
    if type(first) == "string" then names[1] = first end  -- a lone value's argument
    return parse_arg(arg, spec, opts)
  end
  local ok, cfg = pcall(config.load, spec_string)
  config.parse_arg = parse_arg
  return names, ok and cfg or nil
end

-- Whether `key` is a key of `cfg`, or one a component declares (--config.KEY can set it).
local function is_config_key(cfg, key)
  if not cfg then return false end
  local segs = {}
  for seg in key:gmatch("[^.]+") do segs[#segs + 1] = seg end
  local ok, v = pcall(config.get, cfg, key)
  return (ok and v ~= nil) or config_keys.lookup(cfg, segs) ~= nil
end

-- A swept name: ":NAME" is an argument of the config, "config.KEY" and a bare KEY a config key,
-- except a bare name that the config declares as an argument and is no config key. Returns the
-- name without its prefix and whether it is an argument.
local function classify(name, declared, cfg)
  if name:sub(1, 1) == ":" then
    local arg = name:sub(2)
    if arg == "" or arg:find("[,=:]") then
      error(string.format('"%s" is no argument name (:NAME sweeps the config\'s argument NAME)',
                          bv.snippet(name)), 0)
    end
    return arg, true
  end
  if name:match("^config%.") then return name:sub(8), false end
  if not cfg or is_config_key(cfg, name) then return name, false end
  if declared[name] then return name, true end
  local args = {}
  for k in pairs(declared) do
    if type(k) == "string" then args[#args + 1] = k end
  end
  table.sort(args)
  local near = suggest.closest(name, args)
  if near then  -- else --config's unknown key, with the closest config key, says it per job
    error(string.format('"%s" is no config key and no argument of the config (did you mean the '
                        .. 'argument ":%s"?)', bv.snippet(name), near), 0)
  end
  return name, false
end

-- CONFIG[:ARGS] with the swept arguments after ARGS (the last of a name given twice wins).
local function with_args(spec_string, args, declared)
  if #args == 0 then return spec_string end
  local path, given = spec_string:match("^([^:]*):(.*)$")
  given = given and given:match("^%s*(.-)%s*$") or ""
  if given == "" then return (path or spec_string) .. ":" .. table.concat(args, ",") end
  if next(declared) and not given:find("[,=]") and not declared[given] then
    -- parse_arg reads a lone word as the first argument's value only when it stands alone.
    error(string.format('%s: the bare value "%s" goes to the config\'s first argument only '
      .. "while it stands alone; write it as %s=%s so that the swept arguments can follow",
      spec_string, bv.snippet(given), declared[1] or "NAME", bv.snippet(given)), 0)
  end
  return path .. ":" .. given .. "," .. table.concat(args, ",")
end

-- Every variant as a job: its name, workdir, CONFIG[:ARGS] and --config overrides (the fixed
-- ones first, then the swept keys).
local function make_jobs(spec)
  local declared, base = declared_args(spec.config)
  local fixed = {}
  for _, o in ipairs(spec.overrides) do fixed[o[1]] = true end
  local jobs, dirs = {}, {}
  for _, v in ipairs(variants(spec)) do
    local args, overrides, parts, seen = {}, {table.unpack(spec.overrides)}, {}, {}
    for _, kv in ipairs(v) do
      local name, is_arg = classify(kv[1], declared, base)
      local text = spell(kv[2])
      local what = (is_arg and ":" or "") .. name
      if seen[what] then error(string.format('"%s" is swept twice', what), 0) end
      seen[what] = true
      if is_arg then
        if text:find(",", 1, true) then
          error(string.format('the value "%s" of argument :%s holds a \',\', which separates '
                              .. "the config's arguments", bv.snippet(text), name), 0)
        end
        args[#args + 1] = name .. "=" .. text
      else
        if fixed[name] then
          error(string.format('"%s" is both swept and fixed (--config.%s)', name, name), 0)
        end
        overrides[#overrides + 1] = {name, text}
      end
      parts[#parts + 1] = name:gsub("[^%w]+", "_") .. short(kv[2]):gsub("[^%w.+-]+", "_")
    end
    local name = table.concat(parts, "_")
    local dir = spec.workdir:gsub("/+$", "") .. "/" .. name
    if dirs[dir] then
      error(string.format("two variants have the same name, %s (%s and %s)", name,
                          json.encode(dirs[dir]), json.encode(v)), 0)
    end
    dirs[dir] = v
    jobs[#jobs + 1] = {name = name, dir = dir, config = with_args(spec.config, args, declared),
                       overrides = overrides, state = "queued"}
  end
  return jobs
end

-- The job's command line: `bvlua train`, as the check resolved it.
local function train_argv(job)
  local argv = {bv.dist.executable(), "train", job.config, "--workdir", job.dir}
  for _, o in ipairs(job.overrides) do argv[#argv + 1] = "--config." .. o[1] .. "=" .. o[2] end
  return argv
end

-- The problems of one job's config, resolved in this process as `bvlua train` resolves it:
-- bv.config.load with its ARGS, then each --config override in order (every bad one is listed),
-- then the JSON of config.json, then bv.preflight's checks. The resolved config is kept as
-- job.cfg. Keys that no component reads are
-- warned of, once in the sweep (`warned`), as train warns of them.
local function problems_of(job, warned)
  local ok, cfg = pcall(config.load, job.config)
  if not ok then return {tostring(cfg)} end
  job.cfg = cfg  -- for its prepare (run_prepares), once every job passes
  local out = config.apply_overrides(cfg, job.overrides)
  if #out > 0 then return out end
  for _, w in ipairs(config_keys.unknown(cfg)) do
    if not warned[w] then require("bv.log").warn("%s", w) end
    warned[w] = true
  end
  -- What `bvlua train --dry-run` checks: pp strings, evaluators, data files, model, schedule.
  local ok_check, found = pcall(preflight.problems, job.config, cfg)
  return ok_check and found or {tostring(found)}
end

-- Checks every job before anything is launched or written: raises one error listing each
-- problem with the jobs it breaks.
local function check_jobs(jobs)
  local problems, jobs_of, bad, warned = {}, {}, {}, {}
  for _, job in ipairs(jobs) do
    for _, msg in ipairs(problems_of(job, warned)) do
      if not jobs_of[msg] then problems[#problems + 1], jobs_of[msg] = msg, {} end
      table.insert(jobs_of[msg], job.name)
      if not bad[job.name] then bad[#bad + 1], bad[job.name] = job.name, true end
    end
  end
  if #problems == 0 then return end
  local lines = {}
  for _, msg in ipairs(problems) do
    local names = jobs_of[msg]
    local who = #names == #jobs and #jobs > 1 and ("every job (" .. #jobs .. ")")
                or table.concat(names, ", ")
    lines[#lines + 1] = string.format("  %s: %s", who, msg)
  end
  error(string.format("%d of %d jobs would fail; nothing was launched:\n%s", #bad, #jobs,
                      table.concat(lines, "\n")), 0)
end

-- Runs the config's prepare (what it declares it needs made: a data set drawn, a checkpoint or
-- a tokenizer written) for the jobs, here, one after the other, before any job is launched, as
-- `bvlua train` runs it before its first step: once for each distinct CONFIG[:ARGS] and resolved
-- config. Launched side by side, every job would run it at once, each drawing or writing the
-- same files (and one job reading another's half-written data); each job's own prepare then
-- finds everything made. A failure raises, naming the job; nothing is launched.
local function run_prepares(jobs)
  local done = {}
  for _, job in ipairs(jobs) do
    local cfg = config_keys.without_nulls(job.cfg)  -- what train's prepare gets
    local key = job.config .. "\0" .. config.to_json(cfg)
    if not done[key] and config.module(job.config).prepare then
      done[key] = true
      say("  prepare ", job.name, " (the config's prepare, before any job starts)\n")
      local ok, err = pcall(config.prepare, job.config, cfg)
      if not ok then
        error(string.format("the config's prepare failed for job %s (%s): %s; nothing was "
                            .. "launched", job.name, job.config, tostring(err)), 0)
      end
    end
  end
end

-- The GPUs the jobs go to, as CUDA_VISIBLE_DEVICES names them: 0..gpus-1, or, when the sweep
-- was started with CUDA_VISIBLE_DEVICES = `visible` (a cluster's allocation, another user's
-- share), the first `gpus` devices it lists (indices or UUIDs), never one outside it. As CUDA
-- reads the list, it ends at its first negative index ("-1": no GPU at all).
function M.gpu_ids(gpus, visible)
  local ids = {}
  if visible == nil then
    for g = 0, gpus - 1 do ids[#ids + 1] = tostring(g) end
    return ids
  end
  local listed = {}
  for entry in visible:gmatch("[^,]+") do
    entry = entry:match("^%s*(.-)%s*$")
    if entry:match("^%-") then break end
    if entry ~= "" then listed[#listed + 1] = entry end
  end
  if #listed < gpus then
    error(string.format("--gpus %d, but this sweep may use only the %d GPU(s) that "
                        .. "CUDA_VISIBLE_DEVICES=%q lists (ask for at most %d)", gpus, #listed,
                        visible, #listed), 0)
  end
  for g = 1, gpus do ids[g] = listed[g] end
  return ids
end

-- The job's state: queued, running (pid, slot), done, failed (code) or stopped.
local function run_sweep(spec)
  if type(spec.config) ~= "string" then error("no CONFIG given", 0) end
  if type(spec.workdir) ~= "string" then error("no --workdir given", 0) end
  local gpus, per_gpu = spec.gpus or 0, spec.per_gpu or 1
  local slots = {}
  local gpu_ids = gpus > 0 and M.gpu_ids(gpus, os.getenv("CUDA_VISIBLE_DEVICES")) or {}
  if gpus > 0 then
    for _, id in ipairs(gpu_ids) do
      for _ = 1, per_gpu do slots[#slots + 1] = {gpu = id} end
    end
  else
    for _ = 1, math.max(1, spec.jobs or 1) do slots[#slots + 1] = {} end
  end
  local threads = math.max(1, bv.threads() // #slots)
  local jobs, to_run = make_jobs(spec), {}
  for _, job in ipairs(jobs) do
    if bv.fs.exists(job.dir .. "/SWEEP_DONE") then
      job.state = "done"
    else
      to_run[#to_run + 1] = job
    end
  end
  check_jobs(to_run)  -- a finished run is not checked again: its config may have changed since
  say(string.format("sweep: %d runs in %s, %d at a time%s\n", #jobs, spec.workdir,
    #slots, gpus > 0 and string.format(" on GPU(s) %s", table.concat(gpu_ids, ",")) or
    string.format(" (%d threads each)", threads)))
  for _, job in ipairs(jobs) do
    if job.state == "done" then say("  skip   ", job.name, " (finished before)\n") end
  end
  run_prepares(to_run)  -- before anything is written: a failure leaves no workdir
  bv.fs.mkdirs(spec.workdir)

  local function start(job, slot)
    bv.fs.mkdirs(job.dir)
    local argv = train_argv(job)
    local env = {BV_THREADS = tostring(threads), OMP_NUM_THREADS = tostring(threads)}
    if slot.gpu then env.CUDA_VISIBLE_DEVICES = slot.gpu end
    job.pid = bv._proc.spawn(argv, env, job.dir .. "/sweep.log")
    job.slot, slot.job, job.state = slot, job, "running"
    say(string.format("  start  %s%s\n", job.name,
                                  slot.gpu and (" on GPU " .. slot.gpu) or ""))
  end

  -- The live table: every `status` seconds, each job's state, step, last checkpoint and latest
  -- metrics.
  local status_every, last_status = spec.status or 30, bv.clock()
  local function latest(job)
    local path = job.dir .. "/big_vision_metrics.txt"
    local step, shown = nil, {}
    for line in bv.fs.exists(path) and io.lines(path) or function() end do
      local ok, row = pcall(json.decode, line)
      if ok and type(row) == "table" then
        step = row.step or step
        for k, v in pairs(row) do
          local metric = k == "training_loss" or k:find("prec@1$") or k:find("/acc$")
          if type(v) == "number" and metric and not k:find("^z/") then
            shown[k] = v
          end
        end
      end
    end
    local keys = {}
    for k in pairs(shown) do keys[#keys + 1] = k end
    table.sort(keys)
    local parts = {}
    if step then parts[#parts + 1] = "step " .. math.tointeger(step) end
    local ckpts = bv.ckpt.list(job.dir)  -- sorted; a run resumes from the last
    if #ckpts > 0 then parts[#parts + 1] = "ckpt " .. ckpts[#ckpts] end
    for _, k in ipairs(keys) do parts[#parts + 1] = string.format("%s %.4g", k, shown[k]) end
    return table.concat(parts, "  ")
  end
  local function print_status()
    local lines = {"sweep status:"}
    for _, job in ipairs(jobs) do
      local state = job.state:match("^%a+")
      lines[#lines + 1] = string.format("  %-8s %-40s %s", state, job.name,
                                        state == "queued" and "" or latest(job))
    end
    say(table.concat(lines, "\n"), "\n")
  end

  local stopping = false
  bv.handle_stop_signals()
  while true do
    if status_every > 0 and bv.clock() - last_status >= status_every then
      print_status()
      last_status = bv.clock()
    end
    if not stopping and bv.stop_requested() then
      stopping = true
      say("sweep: stopping; each running job saves a checkpoint first\n")
      for _, job in ipairs(jobs) do
        if job.state == "running" then bv._proc.signal(job.pid, "TERM") end
      end
    end
    local running = 0
    for _, job in ipairs(jobs) do
      if job.state == "running" then
        local code = bv._proc.poll(job.pid)
        if code then
          job.slot.job = nil
          if stopping then
            job.state = "stopped"
          elseif code == 0 then
            job.state = "done"
            bv.fs.write_file(job.dir .. "/SWEEP_DONE", "")
          else
            job.state = "failed (exit " .. code .. ", see " .. job.dir .. "/sweep.log)"
          end
          say(string.format("  %-6s %s\n", job.state:match("^%a+"), job.name))
        else
          running = running + 1
        end
      end
    end
    if not stopping then
      for _, slot in ipairs(slots) do
        if not slot.job then
          for _, job in ipairs(jobs) do
            if job.state == "queued" then
              start(job, slot)
              running = running + 1
              break
            end
          end
        end
      end
    end
    if running == 0 then break end
    bv.sleep(0.2)
  end

  local failed, counts = 0, {}
  for _, job in ipairs(jobs) do
    local s = job.state:match("^%a+")
    counts[s] = (counts[s] or 0) + 1
    if s == "failed" then
      failed = failed + 1
      io.stderr:write("sweep: ", job.name, " ", job.state, "\n")
    end
  end
  local parts = {}
  for _, s in ipairs({"done", "failed", "stopped", "queued"}) do
    if counts[s] then parts[#parts + 1] = counts[s] .. " " .. s end
  end
  if status_every > 0 then print_status() end
  say("sweep: ", table.concat(parts, ", "), "\n")
  if stopping then return 0 end
  return failed > 0 and 1 or 0
end

local function main(argv)
  if argv[1] == "-h" or argv[1] == "--help" then
    io.stdout:write(M.USAGE, "\n")
    return 0
  end
  if #argv == 0 then cli.usage("no sweep given") end
  return run_sweep(parse_cli(argv))
end

function M.main(argv) return cli.run("sweep", M.USAGE, main, argv) end

return M
