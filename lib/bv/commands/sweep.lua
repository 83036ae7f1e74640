-- bvlua sweep: a grid (or list) of config variants run as a queue on one machine, as big_vision's
-- GPU tutorial does with a GPU-aware task spooler. Each variant is `bvlua train CONFIG
-- --config.KEY=VALUE ... --workdir DIR/<name>`, its name made of the swept values. Jobs run N at
-- a time: on GPUs one per slot (CUDA_VISIBLE_DEVICES set per job, --per-gpu K jobs sharing a
-- GPU; a sweep given CUDA_VISIBLE_DEVICES itself, a cluster's allocation, chooses among the
-- devices it lists), on the CPU with cores/N threads each. A finished run is marked (DIR/<name>/SWEEP_DONE)
-- and skipped when the same sweep runs again; an interrupted one resumes from its own
-- checkpoints. Ctrl-C (or SIGTERM) stops the jobs cleanly: each saves a checkpoint and exits.
local cli = require "bv.commands.cli"
local json = require "bv.json"

local M = {}

M.USAGE = [==[
usage: bvlua sweep SWEEP.lua
       bvlua sweep CONFIG[:ARGS] --workdir DIR --grid KEY=V1,V2,... [--grid ...]
                   [--jobs N] [--gpus N [--per-gpu K]]

Runs `bvlua train CONFIG --config.KEY=VALUE ... --workdir DIR/<name>` for every variant, N
at a time. A sweep file is Lua returning the same as a table:

  return {config = "configs/lines/resnet.lua:runlocal", workdir = "runs/sweep",
          grid = {{"lr", {1e-3, 3e-4}}, {"total_epochs", {10, 30}}},  -- every combination
          -- or list = {{lr = 1e-3}, {lr = 3e-4, total_epochs = 30}},
          jobs = 2, gpus = 0, per_gpu = 1}

options:
  --workdir DIR      where the runs go, one directory each, named from the swept values
  --grid KEY=V1,...  a swept config key and its values (repeat for a grid); KEY as in --config.KEY
  --jobs N           jobs at once on the CPU (default 1); each gets cores/N threads
  --gpus N           jobs go to GPUs 0..N-1 (or to the first N that CUDA_VISIBLE_DEVICES
                     lists, when it is set), --per-gpu K at a time on each (default 1)
  --status SECS      print every job's state, step and latest metrics this often (default 30;
                     0: never); a sweep file may set status too
  -h, --help         this text

Running the same sweep again skips the finished runs and resumes the others. `bvlua runs DIR`
ranks them.]==]

-- A line of the sweep's log, out at once (its stdout is often a file read while it runs).
local function say(...)
  io.stdout:write(...)
  io.stdout:flush()
end

-- A value as the command line and a directory name spell it.
local function spell(v)
  if type(v) == "number" then
    return math.type(v) == "integer" and tostring(v) or string.format("%.6g", v)
  end
  if type(v) == "table" then return json.encode(v) end
  return tostring(v)
end

-- The variants: a list of {{key, value}, ...}, in the grid's order (the first key slowest).
local function variants(spec)
  if spec.list then
    local out = {}
    for i, v in ipairs(spec.list) do
      if type(v) ~= "table" then error(string.format("list[%d] is not a table of overrides", i), 0) end
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

local function name_of(variant)
  local parts = {}
  for _, kv in ipairs(variant) do
    parts[#parts + 1] = kv[1]:gsub("[^%w]+", "_") .. spell(kv[2]):gsub("[^%w.+-]+", "_")
  end
  return table.concat(parts, "_")
end

local function parse_cli(argv)
  if argv[1] and argv[1]:match("%.lua$") and not argv[2] and bv.fs.exists(argv[1])
      and not argv[1]:find(":", 1, true) then
    -- A sweep file, unless it is a config (a config has no `config` field).
    local chunk, err = loadfile(argv[1], "t")
    if not chunk then cli.usage(err) end
    local spec = chunk()
    if type(spec) == "table" and spec.config then return spec end
  end
  local spec = {grid = {}}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--workdir" then
      spec.workdir = cli.value(argv, i)
      i = i + 1
    elseif a == "--grid" then
      local key, vals = cli.value(argv, i):match("^([^=]+)=(.+)$")
      if not key then cli.usage("--grid wants KEY=V1,V2,...") end
      local list = {}
      for v in vals:gmatch("[^,]+") do list[#list + 1] = tonumber(v) or v end
      spec.grid[#spec.grid + 1] = {key:gsub("^config%.", ""), list}
      i = i + 1
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
  local jobs = {}
  for _, v in ipairs(variants(spec)) do
    local name = name_of(v)
    local dir = spec.workdir:gsub("/+$", "") .. "/" .. name
    local job = {name = name, dir = dir, variant = v, state = "queued"}
    if bv.fs.exists(dir .. "/SWEEP_DONE") then job.state = "done" end
    jobs[#jobs + 1] = job
  end
  bv.fs.mkdirs(spec.workdir)
  say(string.format("sweep: %d runs in %s, %d at a time%s\n", #jobs, spec.workdir,
    #slots, gpus > 0 and string.format(" on GPU(s) %s", table.concat(gpu_ids, ",")) or
    string.format(" (%d threads each)", threads)))
  for _, job in ipairs(jobs) do
    if job.state == "done" then say("  skip   ", job.name, " (finished before)\n") end
  end

  local function start(job, slot)
    bv.fs.mkdirs(job.dir)
    local argv = {bv.dist.executable(), "train", spec.config, "--workdir", job.dir}
    for _, kv in ipairs(job.variant) do
      argv[#argv + 1] = "--config." .. kv[1] .. "=" .. spell(kv[2])
    end
    local env = {BV_THREADS = tostring(threads), OMP_NUM_THREADS = tostring(threads)}
    if slot.gpu then env.CUDA_VISIBLE_DEVICES = slot.gpu end
    job.pid = bv._proc.spawn(argv, env, job.dir .. "/sweep.log")
    job.slot, slot.job, job.state = slot, job, "running"
    say(string.format("  start  %s%s\n", job.name,
                                  slot.gpu and (" on GPU " .. slot.gpu) or ""))
  end

  -- The live table: every `status` seconds, each job's state, step and latest metrics.
  local status_every, last_status = spec.status or 30, bv.clock()
  local function latest(job)
    local path = job.dir .. "/big_vision_metrics.txt"
    if not bv.fs.exists(path) then return "" end
    local step, shown = nil, {}
    for line in io.lines(path) do
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
    local parts = {step and ("step " .. math.tointeger(step)) or ""}
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
