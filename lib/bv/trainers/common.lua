-- What the trainers share around their training step: the metrics writer, the evaluators and
-- how one runs, and the checkpoint save. Each trainer keeps its own loop, as big_vision's do;
-- these are the parts that would otherwise be copied word for word.
local metrics = require "bv.metrics"
local evaluators = require "bv.evaluators"
local sharding = require "bv.sharding"

local M = {}

-- The metrics file and log lines (rank 0 writes). Evaluator metrics (under the prefixes that
-- M.evaluations adds) and eval timings get lines of their own; the training metrics are on the
-- progress line.
function M.metrics_writer(workdir, rank, say)
  local prefixes = {}
  local mw = metrics.writer(workdir, {enabled = rank == 0, print = say, show = function(name)
    if name:find("^z/secs/eval/") then return true end
    for _, p in ipairs(prefixes) do
      if name:sub(1, #p) == p then return true end
    end
    return false
  end})
  mw.eval_prefixes = prefixes
  return mw
end

-- The evaluators of config.evals and run_eval(e, params, step), which runs one and logs its
-- metrics. t = {config, run, predict_fns, get_steps, mw, chrono, note, workdir, shard}.
-- Evaluators get ctx = {workdir, step, write (rank 0 only), rank, world, and with several
-- processes sum(x) over ranks and gather(string) -> every rank's on rank 0; evaluators that use
-- them run their part of the split}.
function M.evaluations(t)
  local eval_config = evaluators.copy(t.config)
  -- Evaluators' data workers load the config file too, for ops it registers inline.
  for _, e in pairs(eval_config.evals or {}) do e._config_file = t.run.config_file end
  local evals = evaluators.from_config(eval_config, t.predict_fns, t.get_steps)
  for _, e in ipairs(evals) do table.insert(t.mw.eval_prefixes, e.prefix) end
  local shard = t.shard
  local sum = shard.world > 1 and function(x) return shard:sum(x) end or nil
  local gather = shard.world > 1 and function(s) return shard:gather_strings(s) end or nil

  local function run_eval(e, params, step)
    t.chrono:pause()
    -- Evaluators run whole models: fsdp parameters are gathered for them (a collective; every
    -- rank evaluates at the same steps), and dropped afterwards.
    params = shard:full_params(params)
    t.note(e.name .. " evaluation...")
    local ctx = {workdir = t.workdir, step = step, write = shard.rank == 0, rank = shard.rank,
                 world = shard.world, sum = sum, gather = gather}
    t.chrono:log_timing("z/secs/eval/" .. e.name, function()
      for _, kv in ipairs(e.evaluator:run(params, ctx)) do
        t.mw:measure(e.prefix .. kv[1], kv[2])
      end
    end)
    params = nil
    if shard.fs then collectgarbage() end
    t.chrono:resume()
  end
  return evals, run_eval
end

-- The end of training step `step`, the same in every trainer: a checkpoint when one is due or a
-- stop was asked for (on any rank), then the evaluators that are due. Returns {stopped = step}
-- when the run must end here (the trainer returns it), else nil.
-- t = {shard, run, mw, progress, note, save(step, keep), evals, run_eval, total_steps,
--      ckpt_every, keep_every}.
function M.end_of_step(t, step, params)
  local stop = t.shard:stop_requested() or (t.run.stop_after == step and "stop_after")
  local keep = bv.optim.itstime(step, t.keep_every, t.total_steps, {first = false})
  if stop or keep or bv.optim.itstime(step, t.ckpt_every, t.total_steps) then t.save(step, keep) end
  if stop then
    t.mw:step_end()
    t.mw:close()
    t.progress:finish()
    t.note(string.format("%s received: saved a checkpoint at step %d and stopped", stop, step))
    return {stopped = step}
  end
  for _, e in ipairs(t.evals) do
    if bv.optim.itstime(step, e.log_steps or 0, t.total_steps, {first = false}) then
      t.run_eval(e, params, step)
    end
  end
  t.mw:step_end()
end

-- Bytes of parameters and of optimizer state that rank 0 holds and that all ranks hold
-- together (fsdp: about 1/world each; zero1: the optimizer state only).
function M.measure_memory(mw, shard, params, opt)
  local p, s = shard:param_bytes(params), sharding.state_bytes(opt)
  mw:measure("param_bytes", p)
  mw:measure("param_bytes_all", shard:sum(p))
  mw:measure("opt_state_bytes", s)
  mw:measure("opt_state_bytes_all", shard:sum(s))
end

-- Saves a checkpoint of params, the optimizer state and `extra` tensors (e.g. an rng) with the
-- chrono and data position. Every rank calls it (the optimizer state may be spread over
-- ranks); rank 0 writes the full, unsharded values, so any number of processes can resume.
-- t = {workdir, shard, opt, full_spec (the whole optimizer's state_spec), chrono, train_iter}.
function M.save(t, params, step, keep, extra)
  t.chrono:pause()
  local opt_state = t.shard:full_opt_state(t.opt, t.full_spec)
  params = t.shard:full_params(params)
  if t.shard.rank == 0 then
    local tensors = {}
    for name, x in pairs(extra or {}) do tensors[name] = x end
    for name, x in pairs(params) do tensors["params/" .. name] = x end
    for name, x in pairs(opt_state) do tensors["opt/" .. name] = x end
    bv.ckpt.save(t.workdir, step, tensors, {chrono = t.chrono:state(), world = t.shard.world,
                 data_position = t.train_iter:position()}, {keep = keep})
  end
  t.chrono:resume()
end

return M
