-- bvlua train: resolve a config (file, ':ARGS', --config.* overrides), save it to the workdir
-- and run the trainer it names (config.trainer, default "classification").
local config = require "bv.config"
local config_keys = require "bv.config_keys"
local json = require "bv.json"
local log = require "bv.log"
local utils = require "bv.trainers.utils"

local M = {}

local USAGE_LINE =
  "usage: bvlua train CONFIG[:ARGS] (--workdir DIR | --dry-run) [--nproc N] [--debug] [--no-attach] [--config.KEY=VALUE ...]"

M.USAGE = USAGE_LINE .. [[


Trains a model as the Lua config CONFIG says (a file returning a table, a function
get_config(ARGS), or {get_config =, prepare =, register_pp_ops =}): applies the overrides in
order, writes the resolved config to DIR/config.json, runs the config's prepare (once, on rank
0), then its trainer (config.trainer: classification, the default, or proj.paligemma.train)
with its evaluators, writing big_vision_metrics.txt and checkpoints (ckpt_steps) to DIR. A DIR
that holds a checkpoint resumes from it.

options:
  --workdir DIR          where the run writes its files (required unless --dry-run)
  --dry-run              print the resolved config as JSON (stdout) and check it without
                         training: pp strings and their ops, evaluator types, data files,
                         the model's name and options, model_init, the optimizer and its
                         schedule, the number of steps. Says "ok" or lists every problem,
                         each naming its config key (stderr); exits 1 on a problem. Draws
                         no data, makes no weights and (without --workdir) writes nothing
  --nproc N              start N processes on this machine (one per GPU, or CPU processes)
                         joined by c10d; under torchrun or another launcher, RANK,
                         WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT say the same
  --device NAME          the device each process trains on: auto (cuda:LOCAL_RANK when a GPU
                         is available, else cpu), cpu, cuda or cuda:N; also config.device.
                         Asking for a GPU that is not there is an error
  --backend NAME         the c10d backend: gloo, nccl or auto (default: nccl when training on
                         CUDA, gloo on the CPU)
  --profile START:STOP   record steps START to STOP (e.g. 5:8) with libtorch's profiler:
                         the trace goes to DIR/profile/steps_START-STOP.pt.trace.json (open it
                         in ui.perfetto.dev or chrome://tracing; evaluations and checkpoints
                         are ranges in it), a table to stdout: the training steps' time apart
                         from evaluations and checkpoints, then the slowest ops
  --stop-after N         stop after step N with a checkpoint, as a SIGTERM would (the run
                         resumes from it when started again)
  --no-attach            no `bvlua attach` listener (also config.attach = false): by default
                         rank 0 listens on DIR/.bvlua.attach, a socket only this user may use
  --debug                on an error (a Lua error, the NaN guard), open a REPL with the
                         trainer's state as globals: config, model, params, opt, batch, step,
                         err (and run, the workdir); exit with code 1 when it ends
  --config.KEY=VALUE     override an existing config field (also --config.KEY VALUE);
                         the value is converted to the field's current type, tables take a
                         Python or Lua literal such as [1, 2] or {'depth': 50}
  --noconfig.KEY         set a boolean field to false
  --threads N            libtorch intra-op threads (as `bvlua --threads N train ...`)
  -h, --help             show this help

exit codes:
  0  success (trained, --dry-run found no problem, or --help)
  1  an error (config, override, data, training; the message names it), or the problems
     --dry-run found
  2  usage error
]]

local function usage_error(msg)
  log.error("bvlua train: %s\n%s", msg, USAGE_LINE)
  return 2
end

-- The filesystem helpers are provided natively by the bvlua binary.
local function native_fs()
  local bv = rawget(_G, "bv")
  if type(bv) ~= "table" or type(bv.fs) ~= "table" then
    error("bvlua train: bv.fs is missing; run this through the bvlua binary", 0)
  end
  return bv.fs
end

-- The trainer a config names: `trainer = "classification"` (the default) is
-- lib/bv/trainers/classification.lua; a path ending in .lua is a trainer file of the user's own.
-- A trainer is a function(config, workdir, run).
function M.find_trainer(name)
  name = name or "classification"
  local trainer
  if name:match("%.lua$") then
    local chunk, err = loadfile(name, "t")
    if not chunk then error("trainer '" .. name .. "': " .. err, 0) end
    trainer = chunk()
  else
    local modname = "bv.trainers." .. name
    if not package.searchpath(modname, package.path) then
      error(string.format("unknown trainer '%s' (no lib/bv/trainers/%s.lua; give a .lua file "
        .. "for a trainer of your own)", name, name:gsub("%.", "/")), 0)
    end
    trainer = require(modname)
  end
  if type(trainer) ~= "function" then
    error("trainer '" .. name .. "' must return a function(config, workdir, run)", 0)
  end
  return trainer
end

-- A config's leaves as {"a.b.c" = JSON text}; lists are leaves.
local function leaves(v, prefix, out)
  if type(v) == "table" and next(v) ~= nil and v[1] == nil then
    for k, x in pairs(v) do leaves(x, prefix == "" and tostring(k) or prefix .. "." .. k, out) end
  else
    out[prefix] = json.encode(v)
  end
  return out
end

-- "lr 0.001 -> 0.003", one per key that differs between two config.json texts, sorted.
function M.config_changes(old_text, new_text)
  local old, new = leaves(json.decode(old_text), "", {}), leaves(json.decode(new_text), "", {})
  local keys, changes = {}, {}
  for k in pairs(old) do keys[#keys + 1] = k end
  for k in pairs(new) do
    if old[k] == nil then keys[#keys + 1] = k end
  end
  table.sort(keys)
  for _, k in ipairs(keys) do
    if old[k] ~= new[k] then
      changes[#changes + 1] = string.format("%s %s -> %s", k, old[k] or "(unset)",
                                            new[k] or "(unset)")
    end
  end
  return changes
end

-- Resuming a workdir (it holds a checkpoint) with a config that differs from its config.json:
-- say which values changed, and keep the previous file beside the new one (config.json.N).
local function keep_changed_config(fs, workdir, path, text)
  if not fs.exists(path) or #bv.ckpt.list(workdir) == 0 then return end
  local old = fs.read_file(path)
  if old == text then return end
  local ok, changes = pcall(M.config_changes, old, text)
  local n = 1
  while fs.exists(path .. "." .. n) do n = n + 1 end
  fs.write_file(path .. "." .. n, old)
  if not ok then changes = {"(the previous config.json is not valid JSON)"} end
  if #changes == 0 then changes = {"(the same values, written differently)"} end
  log.note("Resuming %s with a config that differs from the one it was trained with (kept as "
    .. "config.json.%d):\n  %s", workdir, n, table.concat(changes, "\n  "))
end

-- The workdir's lock file (bv.fs.lock_workdir): one `bvlua train` writes a workdir at a time.
local LOCK_FILE = ".bvlua.lock"

-- What a run that failed before its first step leaves in a workdir it made: nothing worth
-- keeping when the directory holds only config.json (its lock, config_source.json) and a metrics file with no
-- line past step 0 (the initial evals). Returns those names, or nil when there is anything else (a checkpoint, a
-- step's line, a file of the config's prepare or of someone else).
function M.unused_workdir(dir)
  local fs = native_fs()
  if not fs.is_dir(dir) then return nil end
  local names = fs.list(dir)
  for _, name in ipairs(names) do
    if name == require("bv.metrics").FILE_NAME then
      for line in fs.read_file(dir .. "/" .. name):gmatch("[^\n]+") do
        if not line:match('^{"step": 0[,}]') then return nil end
      end
    elseif name ~= "config.json" and name ~= LOCK_FILE and name ~= require("bv.attach").SOCKET
           and name ~= require("bv.config_source").FILE_NAME then
      return nil
    end
  end
  return names
end

-- Removes DIR, which this invocation made, when the run failed and left nothing worth keeping
-- there (M.unused_workdir), so that it does not look like a run (`bvlua runs`, sweep's
-- skip/resume); says so on stderr. A directory that was there before is never touched: the
-- guard is only armed (guard.workdir) by the call that made it.
local function workdir_guard()
  return setmetatable({}, {__close = function(guard, err)
    local dir = guard.workdir
    if not dir or (err == nil and (guard.rc or 0) == 0) then return end
    local names = M.unused_workdir(dir)
    if not names then return end
    local shown = {}
    for _, name in ipairs(names) do
      os.remove(dir .. "/" .. name)
      if name ~= LOCK_FILE and name ~= require("bv.attach").SOCKET then
        shown[#shown + 1] = name
      end
    end
    names = shown
    if os.remove(dir) then
      log.error("bvlua train: removed %s, which this run had created: it failed before its "
        .. "first step and left only %s there", dir,
        #names > 0 and table.concat(names, " and ") or "nothing")
    end
  end})
end

-- --dry-run: the config's JSON on stdout, then its notes and "ok", or every problem
-- (bv.preflight), on stderr. Returns whether there was none (then the workdir, if given, gets
-- its config.json as a run's would).
function M.dry_run_ok(spec, cfg, text)
  local problems, notes = require("bv.preflight").problems(spec, cfg)
  io.stdout:write(text)
  io.stdout:flush()
  for _, n in ipairs(notes) do io.stderr:write("NOTE: ", n, "\n") end
  if #problems == 0 then
    io.stderr:write("bvlua train --dry-run: ok\n")
    return true
  end
  io.stderr:write(string.format("bvlua train --dry-run: %d problem%s in %s:\n", #problems,
                                #problems == 1 and "" or "s", spec))
  for _, p in ipairs(problems) do io.stderr:write("  ", p, "\n") end
  return false
end

-- Runs `bvlua train` with the words after "train"; returns the process exit code.
function M.main(argv)
  local opts, err = config.parse_cli(argv or {})
  if not opts then return usage_error(err) end
  if opts.help then
    io.stdout:write(M.USAGE)
    return 0
  end
  -- Checked before loading so a long config is not evaluated just to fail on the flags.
  if not opts.workdir and not opts.dry_run then
    return usage_error("--workdir is required (or use --dry-run)")
  end
  -- --backend nccl without NCCL or a GPU fails here, in one process as in many, before anything
  -- is launched or loaded.
  if opts.backend then bv.dist.backend(opts.backend) end
  local cfg = config.load(opts.config)
  local problems, notes = config.apply_overrides(cfg, opts.overrides)
  for _, note in ipairs(notes) do
    if opts.dry_run then
      io.stderr:write("NOTE: ", note, "\n")  -- --dry-run's stdout is the config's JSON alone
    else
      log.note("%s", note)
    end
  end
  if #problems > 0 and opts.dry_run then  -- every bad override at once, as for the config
    io.stderr:write(string.format("bvlua train --dry-run: %d problem%s in the overrides of %s:\n",
                                  #problems, #problems == 1 and "" or "s", opts.config))
    for _, p in ipairs(problems) do io.stderr:write("  ", p, "\n") end
    return 1
  end
  if #problems > 0 then error(table.concat(problems, "\n"), 0) end
  -- Keys no component reads: typos, mostly (big_vision configs carry extra keys sometimes).
  for _, w in ipairs(config_keys.unknown(cfg)) do log.warn("%s", w) end
  -- The device, checked before anything is written or launched: a GPU asked for and not there
  -- fails here. (--device wins over config.device; the trainers read run.device.)
  local device = bv.device(opts.device or (cfg.device ~= bv.null and cfg.device) or "auto")
  -- The collectives' backend follows the device: NCCL (auto: when compiled in) for CUDA
  -- tensors, Gloo for host ones (and for the test device, through host copies).
  local backend = opts.backend or (device:match("^cuda") and "auto" or "gloo")
  if backend == "nccl" and not device:match("^cuda") then
    error(string.format("--backend nccl moves CUDA tensors, but this run trains on %s "
                        .. "(--device cuda, or --backend gloo)", device), 0)
  end
  utils.stopped_before_start("while the config was read")
  local text = config.to_json(cfg, 2) .. "\n"
  if opts.dry_run and not M.dry_run_ok(opts.config, cfg, text) then return 1 end
  local saved_to
  local guard <close> = workdir_guard()  -- a failure before the first step: the new workdir goes
  if opts.workdir and bv.dist.env().rank == 0 then  -- of several processes, rank 0 writes
    local fs = native_fs()
    local made = not fs.exists(opts.workdir)
    fs.mkdirs(opts.workdir)
    -- One writer per workdir, for the whole run (a second `bvlua train` stops here, naming this
    -- one); --nproc's ranks run under this process's lock. Holding it, whatever *.tmp-<pid>
    -- files are there were left by interrupted writers.
    local no_lock = fs.lock_workdir(opts.workdir)
    if no_lock then log.warn("%s", no_lock) end
    -- Armed only now: a trainer refused the lock never removes the holder's new workdir.
    if made then guard.workdir = opts.workdir end
    local leftovers = fs.remove_tmp_leftovers(opts.workdir)
    if #leftovers > 0 then
      log.note("Removed what an interrupted run left in %s: %s", opts.workdir,
               table.concat(leftovers, ", "))
    end
    saved_to = opts.workdir:gsub("/+$", "") .. "/config.json"
    keep_changed_config(fs, opts.workdir, saved_to, text)
    fs.write_file(saved_to, text)
    -- Which config file made this run, for what opens the workdir later (the REPL runs its
    -- register_pp_ops).
    require("bv.config_source").write(opts.workdir, opts.config)
  end
  if opts.dry_run then return 0 end
  -- config.json shows None as null; the trainer gets None as absent (bv.config_keys).
  cfg = config_keys.without_nulls(cfg)
  local trainer = M.find_trainer(cfg.trainer)
  if opts.nproc and opts.nproc > 1 then
    guard.rc = M.launch(argv, opts.nproc)
    return guard.rc
  end
  -- This process's device is made current before anything is allocated on it (a pinned batch,
  -- NCCL's communicator): on CUDA the first allocation makes a context on the current device,
  -- GPU 0 unless set. (Not in a launcher of --nproc processes: it uses no device.)
  bv.set_device(device)
  local run = {config_file = opts.config, device = device, profile = opts.profile,
               stop_after = opts.stop_after, no_attach = opts.no_attach}
  local env = bv.dist.env()
  if env.world_size > 1 then
    -- One of several processes: join the group; rank 0 alone writes files and the terminal.
    run.group = bv.dist.init{backend = backend,
                             timeout = tonumber(os.getenv("BV_DIST_TIMEOUT") or "") or 300}
    run.rank, run.world = run.group:rank(), run.group:world_size()
  end
  -- What the config declares it needs made (its prepare: data drawn, a tokenizer trained): once
  -- per run, on rank 0, while the other ranks wait; before anything reads data.
  if (run.rank or 0) == 0 then config.prepare(opts.config, cfg) end
  if run.group then run.group:barrier() end
  if not run.group then utils.stopped_before_start("while the run was set up") end
  -- --debug opens its REPL on rank 0 only: the other ranks' output goes through the launcher.
  if not opts.debug or (run.rank or 0) ~= 0 then
    trainer(cfg, opts.workdir, run)
    return 0
  end
  local failure
  local ok = xpcall(trainer, function(e)
    failure = {message = tostring(e), traceback = debug.traceback(tostring(e), 2)}
  end, cfg, opts.workdir, run)
  if ok then return 0 end
  M.debug_repl(failure, run.state or {}, cfg, opts.workdir)
  guard.rc = 1
  return 1
end

-- `--nproc N`: the same command, without --nproc, in N processes joined by c10d.
function M.launch(argv, nproc)
  local cmd = {bv.dist.executable(), "train"}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--nproc" then
      i = i + 1  -- and its value
    elseif not a:match("^%-%-nproc=") then
      cmd[#cmd + 1] = a
    end
    i = i + 1
  end
  return bv.dist.launch(cmd, nproc, {port = 0, grace = 30})
end

-- `--debug`: the error and its traceback on stderr, then a REPL in which the trainer's last
-- state can be examined before the process exits.
function M.debug_repl(failure, state, cfg, workdir)
  io.stdout:write("\n")  -- off the progress line, when one is on the terminal
  log.setup()  -- and what follows goes below it, not through it
  log.error("bvlua train: %s", failure.traceback)
  local globals = {config = state.config or cfg, model = state.model, params = state.params,
                   owned = state.owned, opt = state.opt, batch = state.batch, step = state.step,
                   err = failure.message}
  local ok, run = pcall(function() return require("bv.inspect").run(workdir) end)
  if ok then globals.run = run end
  require("bv.repl").start({globals = globals, banner = "--debug: the training failed at step "
    .. tostring(state.step) .. ": " .. failure.message
    .. "\nglobals: config, model, params, owned (what this rank updates), opt, batch, step, err,"
    .. " run; Ctrl-D exits (code 1)"})
end

return M
