-- The metrics file agrees with the checkpoints after any interruption (bv.trainers.utils): a
-- step's line is on disk before its checkpoint, a resume from step S moves the lines of later
-- steps aside (big_vision_metrics.txt.dropped-N), a start from scratch moves an old file aside
-- (.before-N), so that every step has exactly one line and nothing is deleted. The helpers of
-- bv.metrics first, then the classification trainer on a tiny data set.
local T = require "tests.lua.lib.testing"
local json = require "bv.json"
local metrics = require "bv.metrics"
local trainer = require "bv.trainers.classification"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp .. "/data")

local function lines_of(path)
  local out = {}
  for line in bv.fs.read_file(path):gmatch("([^\n]*)\n") do out[#out + 1] = line end
  return out
end

local function steps_of(path)
  local out = {}
  for _, row in ipairs(metrics.read(path)) do out[#out + 1] = row.step end
  return out
end

-- bv.metrics -----------------------------------------------------------------------------------

T.test("truncate_after keeps the steps up to the checkpoint and moves the rest aside", function()
  local dir = tmp .. "/trunc"
  bv.fs.mkdirs(dir)
  local path = dir .. "/big_vision_metrics.txt"
  local file = {}
  for s = 0, 5 do file[#file + 1] = string.format('{"step": %d, "a": %d.5}', s, s) end
  file[#file + 1] = '{"step": 2, "val/prec@1": NaN}'  -- an eval line of step 2: kept
  file[#file + 1] = '{"step": 6, "a": 6.'              -- cut short by a crash
  bv.fs.write_file(path, table.concat(file, "\n"))
  local r = metrics.truncate_after(path, 3)
  T.eq({r.kept, r.dropped, r.at_step, r.aside}, {5, 3, 1, path .. ".dropped-1"})
  T.eq(steps_of(path), {0, 1, 2, 3, 2})
  T.eq(lines_of(path)[5], '{"step": 2, "val/prec@1": NaN}')
  T.eq(lines_of(path .. ".dropped-1"), {file[5], file[6], file[8]})
  -- Nothing to drop: nothing changes, no file made.
  r = metrics.truncate_after(path, 3)
  T.eq({r.kept, r.dropped, r.aside}, {5, 0, nil})
  T.eq(bv.fs.exists(path .. ".dropped-2"), false)
  -- Back to step 0; the next free name.
  r = metrics.truncate_after(path, 0)
  T.eq({r.kept, r.dropped, r.aside}, {1, 4, path .. ".dropped-2"})
  T.eq(lines_of(path), {file[1]})
  -- No file: nothing to do.
  T.eq(metrics.truncate_after(dir .. "/none.txt", 3).kept, 0)
end)

T.test("set_aside moves a file to the first free .TAG-N", function()
  local dir = tmp .. "/aside"
  bv.fs.mkdirs(dir)
  local path = dir .. "/big_vision_metrics.txt"
  T.eq(metrics.set_aside(path, "before"), nil)
  bv.fs.write_file(path, "one\n")
  T.eq(metrics.set_aside(path, "before"), path .. ".before-1")
  bv.fs.write_file(path, "two\n")
  T.eq(metrics.set_aside(path, "before"), path .. ".before-2")
  T.eq(bv.fs.exists(path), false)
  T.eq(bv.fs.read_file(path .. ".before-1"), "one\n")
  T.eq(bv.fs.read_file(path .. ".before-2"), "two\n")
end)

T.test("sync puts the written lines on disk; a writer with no file has nothing to sync", function()
  local dir = tmp .. "/sync"
  local mw = metrics.writer(dir, {print = function() end})
  mw:sync()
  mw:step_start(1)
  mw:measure("a", 1)
  mw:step_end()
  mw:sync()
  T.eq(lines_of(dir .. "/big_vision_metrics.txt"), {'{"step": 1, "a": 1.0}'})
  mw:close()
end)

-- The trainer ----------------------------------------------------------------------------------

local function make_split(name, n, seed)
  local rng, lines = bv.rng(seed), {}
  for i = 1, n do
    local label = (i - 1) % 3
    local img = bv.rand({8, 8, 3}, rng) * 120
    img[{{}, {}, label + 1}] = img[{{}, {}, label + 1}] + 120
    local file = string.format("%s_%03d.png", name, i)
    bv.image.write_png(img:to("uint8"), tmp .. "/data/" .. file)
    lines[i] = json.encode({image = file, label = label})
  end
  bv.fs.write_file(tmp .. "/data/" .. name .. ".jsonl", table.concat(lines, "\n"))
end
make_split("train", 24, 1)
make_split("val", 12, 2)

local TAIL = 'value_range(-1, 1)|onehot(3, key="label", key_result="labels")|keep("image", "labels")'

-- 8 steps, a checkpoint every 3 (kept: 3 and 6; 8 is the last), the evaluator every 3 steps.
local function config()
  local data = function(split)
    return {name = "bv:jsonl", fname = tmp .. "/data/" .. split .. ".jsonl",
            fopen_keys = {image = tmp .. "/data"}}
  end
  return {
    seed = 0, total_steps = 8, num_classes = 3, loss = "softmax_xent",
    input = {data = data("train"), batch_size = 4, shuffle_buffer_size = 8,
             pp = "decode|flip_lr|" .. TAIL},
    model_name = "vit", model = {variant = "mu/4", depth = 1},
    optax_name = "scale_by_adam", lr = 0.01, schedule = {decay_type = "cosine", warmup_steps = 2},
    log_training_steps = 1, ckpt_steps = 3, keep_ckpt_steps = 3,
    evals = {val = {type = "classification", data = data("val"), pp = "decode|" .. TAIL,
                    log_steps = 3, loss_name = "softmax_xent"}},
  }
end

-- The metrics that don't depend on wall time, one table per line.
local function deterministic_lines(path)
  local out = {}
  for _, row in ipairs(metrics.read(path)) do
    local kept = {}
    for k, v in pairs(row) do
      if not (k:find("uptime") or k:find("img/sec") or k:find("core_hours") or k:find("hostmem")
              or k:find("^z/secs")) then kept[k] = v end
    end
    out[#out + 1] = kept
  end
  return out
end

-- Runs fn with bv.log's output (stdout and stderr) captured; returns it.
local function output_of(fn)
  local buf, real_out, real_err = {}, io.stdout, io.stderr
  local sink = {write = function(self, ...)
    for _, s in ipairs({...}) do buf[#buf + 1] = tostring(s) end
    return self
  end, flush = function(self) return self end}
  io.stdout, io.stderr = sink, sink
  local ok, err = pcall(fn)
  io.stdout, io.stderr = real_out, real_err
  if not ok then error(err, 0) end
  return table.concat(buf)
end

local whole = tmp .. "/whole"
trainer(config(), whole, {})
local WANT = deterministic_lines(whole .. "/big_vision_metrics.txt")

T.test("the uninterrupted run: one line per step, evals in the line of their step", function()
  T.eq(steps_of(whole .. "/big_vision_metrics.txt"), {0, 1, 2, 3, 4, 5, 6, 7, 8})
  for _, row in ipairs(WANT) do
    T.eq(row["val/prec@1"] ~= nil, row.step % 3 == 0 or row.step == 8, "val at step " .. row.step)
  end
end)

T.test("a step's line, evals included, is on disk before its checkpoint is saved", function()
  local work, real_save, seen = tmp .. "/order", bv.ckpt.save, {}
  bv.ckpt.save = function(workdir, step, ...)
    local last = lines_of(workdir .. "/big_vision_metrics.txt")
    seen[#seen + 1] = {step, metrics.decode_line(last[#last])}
    return real_save(workdir, step, ...)
  end
  local ok, err = pcall(trainer, config(), work, {})
  bv.ckpt.save = real_save
  assert(ok, err)
  -- big_vision checkpoints at the first step too; the evaluator runs at 3, 6 and 8.
  T.eq(#seen, 4)
  for i, s in ipairs(seen) do
    T.eq(s[1], ({1, 3, 6, 8})[i])
    T.eq(s[2].step, s[1], "the last line when checkpoint " .. s[1] .. " is saved")
    T.truthy(s[2].training_loss, "training metrics of " .. s[1])
    T.eq(s[2]["val/prec@1"] ~= nil, s[1] > 1, "eval metrics of " .. s[1])
  end
end)

T.test("lines written after the checkpoint by a run that died are moved aside", function()
  local work = tmp .. "/died"
  trainer(config(), work, {stop_after = 4})
  -- What a run killed before its step-6 checkpoint leaves: lines for 5 and 6, one cut short.
  local path = work .. "/big_vision_metrics.txt"
  local f = assert(io.open(path, "a"))
  f:write('{"step": 5, "training_loss": 1.0}\n{"step": 6, "training_loss": 2.0}\n{"step": 7, "tr')
  f:close()
  local out = output_of(function() trainer(config(), work, {}) end)
  T.truthy(out:find("Resuming from step 4: moved 3 line(s) of big_vision_metrics.txt", 1, true), out)
  T.eq(deterministic_lines(path), WANT)
  T.eq(lines_of(path .. ".dropped-1"),
       {'{"step": 5, "training_loss": 1.0}', '{"step": 6, "training_loss": 2.0}', '{"step": 7, "tr'})
end)

T.test("a fallback to an older checkpoint re-runs its steps without a second line", function()
  local work = tmp .. "/fallback"
  trainer(config(), work, {})
  T.eq(bv.ckpt.list(work), {3, 6, 8})
  -- The newest checkpoint is corrupt: the run goes back to 6 and runs 7 and 8 again.
  local file = work .. "/ckpt-000000008/tensors.safetensors"
  local bytes = bv.fs.read_file(file)
  bv.fs.write_file(file, bytes:sub(1, -3) .. string.char(bytes:byte(-2) ~ 1) .. bytes:sub(-1))
  local out = output_of(function() trainer(config(), work, {}) end)
  T.truthy(out:find("WARNING: LAST names ckpt-000000008, which could not be used", 1, true), out)
  T.truthy(out:find("Resumed from " .. work .. "/ckpt-000000006 at step 6", 1, true), out)
  local path = work .. "/big_vision_metrics.txt"
  T.eq(deterministic_lines(path), WANT)
  T.eq(steps_of(path .. ".dropped-1"), {7, 8})
end)

T.test("a run from scratch moves an earlier run's metrics file aside", function()
  local work = tmp .. "/scratch"
  trainer(config(), work, {stop_after = 2})
  -- The checkpoints and LAST deleted, the metrics file left (or a run killed before its first
  -- checkpoint): the new run starts from scratch beside the old file.
  os.execute("rm -rf '" .. work .. "'/ckpt-* '" .. work .. "/LAST'")
  local old = bv.fs.read_file(work .. "/big_vision_metrics.txt")
  local out = output_of(function() trainer(config(), work, {}) end)
  T.truthy(out:find("WARNING: starting from scratch, but " .. work .. " already has "
                    .. "big_vision_metrics.txt from an earlier run", 1, true), out)
  T.eq(bv.fs.read_file(work .. "/big_vision_metrics.txt.before-1"), old)
  T.eq(deterministic_lines(work .. "/big_vision_metrics.txt"), WANT)
end)

T.test("skip_errors: the skipped count goes into the metrics file and the final note", function()
  local work = tmp .. "/skips"
  -- Two bad lines among the training examples: one not JSON, one naming a missing image.
  local lines = lines_of(tmp .. "/data/train.jsonl")
  table.insert(lines, 5, '{"image": "train_001.png", "label": 1')
  table.insert(lines, 9, '{"image": "nope.png", "label": 1}')
  bv.fs.write_file(tmp .. "/data/skips.jsonl", table.concat(lines, "\n"))
  local cfg = config()
  cfg.input.data.fname = tmp .. "/data/skips.jsonl"
  cfg.input.skip_errors = true
  cfg.input.shuffle_buffer_size = 1  -- in file order: both bad lines are read by step 3
  local out = output_of(function() trainer(cfg, work, {}) end)
  local rows = metrics.read(work .. "/big_vision_metrics.txt")
  T.eq(rows[1].skipped_examples, nil, "step 0 has no training metrics")
  T.eq(rows[#rows].step, 8)
  -- The data repeats: each pass over the file skips both lines again.
  local n = rows[#rows].skipped_examples
  T.truthy(n >= 2 and n % 2 == 0, "skipped_examples " .. tostring(n))
  T.eq(rows[2].skipped_examples <= n, true)
  local count, last = out:match("NOTE: skip_errors: skipped (%d+) bad training example%(s%); "
                                .. "the last: ([^\n]+)")
  T.eq(tonumber(count), n, out)
  T.truthy(last:find("nope.png", 1, true) or last:find("skips.jsonl:", 1, true), last)
  -- Without skip_errors the metric is not written (big_vision's file, unchanged).
  T.eq(metrics.read(whole .. "/big_vision_metrics.txt")[2].skipped_examples, nil)
end)

T.run()
os.execute("rm -rf '" .. tmp .. "'")
