-- The classification trainer end to end on a tiny generated data set: the loss falls and the
-- validation accuracy rises, an interrupted and resumed run is bit-identical to an uninterrupted
-- one, and the NaN guard stops training without touching the last checkpoint.
local T = require "tests.lua.lib.testing"
local json = require "bv.json"
local metrics = require "bv.metrics"
local trainer = require "bv.trainers.classification"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp .. "/data")

-- 16x16 images whose colour gives the label (red, green, blue), with noise: learnable fast.
local function make_split(name, n, seed)
  local rng, lines = bv.rng(seed), {}
  for i = 1, n do
    local label = (i - 1) % 3
    local img = bv.rand({16, 16, 3}, rng) * 120
    img[{{}, {}, label + 1}] = img[{{}, {}, label + 1}] + 120
    local file = string.format("%s_%03d.png", name, i)
    bv.image.write_png(img:to("uint8"), tmp .. "/data/" .. file)
    lines[i] = json.encode({image = file, label = label})
  end
  bv.fs.write_file(tmp .. "/data/" .. name .. ".jsonl", table.concat(lines, "\n"))
end
make_split("train", 48, 1)
make_split("val", 24, 2)

local TAIL = 'value_range(-1, 1)|onehot(3, key="label", key_result="labels")|keep("image", "labels")'
local PP = "decode|" .. TAIL

local function config(total_steps)
  local data = function(split)
    return {name = "bv:jsonl", fname = tmp .. "/data/" .. split .. ".jsonl",
            fopen_keys = {image = tmp .. "/data"}}
  end
  return {
    seed = 0, total_steps = total_steps, num_classes = 3, loss = "softmax_xent",
    input = {data = data("train"), batch_size = 8, shuffle_buffer_size = 16, pp = "decode|flip_lr|" .. TAIL},
    model_name = "vit", model = {variant = "mu/8", depth = 1},
    optax_name = "scale_by_adam", lr = 0.01, wd = 1e-4,
    schedule = {decay_type = "cosine", warmup_steps = 2},
    log_training_steps = 1, ckpt_steps = 3,
    evals = {val = {type = "classification", data = data("val"), pp = PP, log_steps = total_steps,
                    loss_name = "softmax_xent"}},
  }
end

-- The metrics that don't depend on wall time, per step.
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

T.test("training lowers the loss and lifts validation accuracy above chance", function()
  local work = tmp .. "/run"
  trainer(config(30), work, {})
  local steps, losses = metrics.series(work .. "/big_vision_metrics.txt", "training_loss")
  T.eq(#steps, 30)
  T.truthy(losses[#losses] < losses[1] * 0.5, string.format("loss %.3f -> %.3f", losses[1], losses[#losses]))
  local _, acc = metrics.series(work .. "/big_vision_metrics.txt", "val/prec@1")
  T.truthy(acc[#acc] > 0.8, "val prec@1 " .. acc[#acc])
  T.eq(bv.ckpt.list(work)[#bv.ckpt.list(work)], 30)
end)

T.test("an interrupted and resumed run is bit-identical to an uninterrupted one", function()
  local whole, parts = tmp .. "/whole", tmp .. "/parts"
  trainer(config(8), whole, {})
  local stopped = trainer(config(8), parts, {stop_after = 5})
  T.eq(stopped.stopped, 5)
  T.eq(bv.ckpt.load(parts).step, 5)
  trainer(config(8), parts, {})
  T.eq(deterministic_lines(parts .. "/big_vision_metrics.txt"),
       deterministic_lines(whole .. "/big_vision_metrics.txt"))
  local a, b = bv.ckpt.load(whole), bv.ckpt.load(parts)
  T.eq(a.step, 8); T.eq(b.step, 8)
  for name, t in pairs(a.tensors) do T.truthy(b.tensors[name] == t, name .. " identical") end
end)

T.test("the NaN guard names the step window and leaves the last checkpoint alone", function()
  local work = tmp .. "/nan"
  trainer(config(8), work, {stop_after = 3})
  local cfg = config(8)
  cfg.input.pp = "decode|test_nan_image|" .. TAIL
  T.raises(function()
    trainer(cfg, work, {config_file = "tests/lua/fixtures/cfg_test_ops.lua"})
  end, "training_loss became nan or inf somewhere within steps [4, 4]")
  T.eq(bv.ckpt.load(work).step, 3)
end)

T.test("the NaN guard checks values in the order given, over the steps since the last", function()
  local utils = require "bv.trainers.utils"
  local state = {last_checked = 4}
  utils.check_finite(state, 5, {"training_loss", 0.5}, {"l2_grads", 1.0})
  T.eq(state.last_checked, 5)
  T.raises(function()
    utils.check_finite(state, 7, {"training_loss", 0 / 0}, {"l2_grads", math.huge})
  end, "training_loss became nan or inf somewhere within steps [6, 7]")
  T.raises(function()
    utils.check_finite(state, 7, {"training_loss", 1.0}, {"l2_grads", -math.huge})
  end, "l2_grads became nan or inf somewhere within steps [6, 7]")
  T.eq(state.last_checked, 5)
end)

T.test("no checkpoint of a run gone bad: the NaN guard runs before a save", function()
  -- Between log steps the loss stays on the device; a due checkpoint reads it first.
  local utils = require "bv.trainers.utils"
  local state = {rank = 1, run = {}, last_checked = 1, keep_every = 0, ckpt_every = 3,
                 total_steps = 10, shard = {stop_requested = function() return false end}}
  T.raises(function() utils.end_of_step(state, 3, {}, bv.tensor(0 / 0)) end,
           "training_loss became nan or inf somewhere within steps [2, 3]")
end)

-- What a run prints on stdout (bv.log and the progress line write through io.stdout).
local function stdout_of(fn)
  local buf, real = {}, io.stdout
  io.stdout = {write = function(self, ...)
    for _, s in ipairs({...}) do buf[#buf + 1] = tostring(s) end
    return self
  end, flush = function(self) return self end}
  local ok, err = pcall(fn)
  io.stdout = real
  if not ok then error(err, 0) end
  return table.concat(buf)
end

T.test("stdout: big_vision's notes, the eval results, a progress line per logged step", function()
  local work, cfg = tmp .. "/stdout", config(4)
  local out = stdout_of(function() trainer(cfg, work, {stop_after = 2}) end)
  local function has(text)
    T.truthy(out:find(text, 1, true), string.format("%q in:\n%s", text, out))
  end
  has(string.format("NOTE: Training on cpu (%d threads)\n", bv.threads()))
  has("NOTE: Running for 4 steps, that means 0.666667 epochs\n")
  has("NOTE: val evaluation...\n")  -- the initial evaluation, at step 0
  has("\n[0] val/prec@1 = ")
  has("step 2/4 [50.0%] | loss ")
  has("NOTE: stop_after received: saved a checkpoint at step 2 and stopped\n")
  local saved = bv.ckpt.load(work).path
  out = stdout_of(function() trainer(cfg, work, {}) end)
  has("NOTE: Resumed from " .. saved .. " at step 2\n")
  has("step 4/4 [100.0%] | loss ")
  has("\n[4] val/prec@1 = ")
  has("NOTE: Done!\n")
end)

-- The chrono's measurements, by step, and the steps with big_vision's z/secs/update0.
local function chrono_rows(path)
  local out, update0 = {}, {}
  for _, row in ipairs(metrics.read(path)) do
    if row.examples_seen then
      out[row.step] = {examples_seen = row.examples_seen, epoch = row.epoch, progress = row.progress}
    end
    if row["z/secs/update0"] then update0[#update0 + 1] = row.step end
  end
  return out, update0
end

T.test("chrono: eval steps tick; a checkpoint between log steps resumes the counts exactly", function()
  local cfg = config(8)
  cfg.log_training_steps, cfg.ckpt_steps = 3, 5
  cfg.evals.val.log_steps = 4
  local whole, parts = tmp .. "/chrono_whole", tmp .. "/chrono_parts"
  trainer(cfg, whole, {})
  local want, update0 = chrono_rows(whole .. "/big_vision_metrics.txt")
  T.eq(update0, {1})  -- the first step of a process
  -- Log steps 1, 2 (warm-up), 3, 6, 8; step 4 only evaluates, and ticks as big_vision's.
  T.eq(want[4], {examples_seen = 32, epoch = 32 / 48, progress = 0.5})
  T.eq(want[5], nil)
  trainer(cfg, parts, {stop_after = 5})
  trainer(cfg, parts, {})
  local got
  got, update0 = chrono_rows(parts .. "/big_vision_metrics.txt")
  T.eq(update0, {1, 6})
  for _, step in ipairs({1, 2, 3, 4, 6, 8}) do T.eq(got[step], want[step], "step " .. step) end
  T.eq(got[7], {examples_seen = 56, epoch = 56 / 48, progress = 7 / 8})  -- the resumed warm-up
end)

T.test("chrono: the final note counts every eval, the final one too, in Walltime and (eval)", function()
  -- A clock that creeps (1 ms a reading) except in evaluations, which take 100 s each: at steps
  -- 0, 4 and 8.
  local clock = {t = 0}
  local evaluators = require "bv.evaluators"
  local from_config = evaluators.from_config
  evaluators.from_config = function(...)
    local evals = from_config(...)
    for _, e in ipairs(evals) do
      local run = e.evaluator.run
      e.evaluator.run = function(self, ...)
        clock.t = clock.t + 100
        return run(self, ...)
      end
    end
    return evals
  end
  local cfg = config(8)
  cfg.evals.val.log_steps = 4
  local ok, out = pcall(stdout_of, function()
    trainer(cfg, tmp .. "/chrono_note", {clock = function()
      clock.t = clock.t + 0.001
      return clock.t
    end})
  end)
  evaluators.from_config = from_config
  T.truthy(ok, out)
  T.truthy(out:find("NOTE: Done!\nSteps:8/8 [100.0%]\nWalltime:5m0s (5m0s eval)\nETA:0s\n"
                    .. "Total train time:0s\n", 1, true), out)
end)

-- The fake device (runtime/device/fake_device.h): host memory and the CPU's kernels, but an op
-- that meets a CPU tensor among device ones fails. A whole run there (steps, logs, a checkpoint,
-- an evaluation, a resume) shows that the trainer leaves nothing on the CPU by mistake.
T.device_test("on a device: the same run as on the CPU, resumed there too", function(device)
  local cpu, dev, parts = tmp .. "/on_cpu", tmp .. "/on_dev", tmp .. "/on_dev_parts"
  local cfg = config(6)
  cfg.mixup = {p = 0.2}  -- its random stream stays on the host; the images it mixes do not
  trainer(cfg, cpu, {})
  trainer(cfg, dev, {device = device})
  trainer(cfg, parts, {device = device, stop_after = 3})
  trainer(cfg, parts, {device = device})
  -- Device memory, as big_vision logs it (y/devmem/dev0/*): the parameters at least, and none
  -- on the CPU, which has no device allocator.
  local peak, param_bytes = 0, nil
  for _, row in ipairs(metrics.read(dev .. "/big_vision_metrics.txt")) do
    peak = math.max(peak, row["y/devmem/dev0/peak_bytes_in_use"] or 0)
    param_bytes = param_bytes or row.param_bytes
  end
  T.truthy(param_bytes and peak >= param_bytes, string.format("peak %s, params %s", peak, param_bytes))
  for _, row in ipairs(metrics.read(cpu .. "/big_vision_metrics.txt")) do
    T.eq(row["y/devmem/dev0/bytes_in_use"], nil)
  end
  local want = deterministic_lines(cpu .. "/big_vision_metrics.txt")
  for _, work in ipairs({dev, parts}) do
    local got = deterministic_lines(work .. "/big_vision_metrics.txt")
    T.eq(#got, #want)
    for i, row in ipairs(want) do
      for k, v in pairs(row) do
        T.near(got[i][k], v, 1e-4 * math.abs(v) + 1e-6, string.format("%s step %s %s", work, row.step, k))
      end
    end
    local a, b = bv.ckpt.load(cpu), bv.ckpt.load(work)
    for name, t in pairs(a.tensors) do
      T.eq(b.tensors[name]:device(), "cpu")  -- checkpoints hold host tensors
      -- Loose where gradients are rounding noise (a key bias cannot change attention), which
      -- Adam scales up to lr-sized steps.
      local err = (b.tensors[name]:to("float32") - t:to("float32")):abs():max():item()
      T.truthy(err <= 1e-4 * t:to("float32"):abs():max():item() + 1e-3, name .. " " .. err)
    end
  end
end)

-- A step's device memory does not grow from step to step: the gradients are freed after the
-- update (not when Lua's collector gets to them, which would keep them through the next
-- backward), and nothing else is kept. The fake device counts its memory as CUDA's allocator
-- does; y/devmem/dev0/peak_bytes_in_use is the peak so far, logged after every step.
T.device_test("on a device, the peak memory of a step does not grow: gradients are freed",
              function(device)
  local cfg = config(8)
  cfg.evals = {}
  -- Parameters (8 MB) larger than a step's activations, so that a set of gradients shows.
  cfg.model = {variant = "mu/8", depth = 1, width = 256, mlp_dim = 4096, num_heads = 4}
  local work = tmp .. "/peak_per_step"
  trainer(cfg, work, {device = device})
  local peaks = {}
  for _, row in ipairs(metrics.read(work .. "/big_vision_metrics.txt")) do
    if row["y/devmem/dev0/peak_bytes_in_use"] then
      peaks[#peaks + 1] = row["y/devmem/dev0/peak_bytes_in_use"]
    end
  end
  T.truthy(#peaks >= 4, "y/devmem/dev0/peak_bytes_in_use logged at " .. #peaks .. " steps")
  T.eq(peaks[#peaks], peaks[1], "the peak after the last step against the first logged: "
       .. table.concat(peaks, ", "))
end)

-- Dropout draws from the device's own generator (CUDA's; the fake device's), which the trainer
-- seeds per rank and step: a run stopped and resumed ends with exactly the parameters of an
-- uninterrupted one.
T.device_test("dropout on a device: a resumed run draws what an uninterrupted one does",
              function(device)
  local cfg = config(4)
  cfg.evals = {}
  cfg.model = {variant = "mu/8", depth = 1, dropout = 0.2}
  local whole, parts = tmp .. "/dropout_whole", tmp .. "/dropout_parts"
  trainer(cfg, whole, {device = device})
  trainer(cfg, parts, {device = device, stop_after = 2})
  trainer(cfg, parts, {device = device})
  local a, b = bv.ckpt.load(whole), bv.ckpt.load(parts)
  T.eq(b.step, 4)
  for name, t in pairs(a.tensors) do
    T.truthy(b.tensors[name]:equal(t), name .. " differs after the resume")
  end
end)

T.test("matmul_precision: CUDA's TF32 flags follow it, the CPU's numbers do not", function()
  local runs = {}
  for _, precision in ipairs({"highest", "default"}) do
    local cfg = config(3)
    cfg.matmul_precision = precision
    runs[precision] = tmp .. "/precision_" .. precision
    trainer(cfg, runs[precision], {})
    local tf32 = precision ~= "highest"
    T.eq(bv.tf32(), {cublas = tf32, cudnn = tf32}, precision)
  end
  -- Unset, it is big_vision's (JAX's) "default": TF32 allowed.
  bv.set_matmul_precision("highest")
  trainer(config(3), tmp .. "/precision_unset", {})
  T.eq(bv.tf32(), {cublas = true, cudnn = true})
  T.eq(deterministic_lines(runs.highest .. "/big_vision_metrics.txt"),
       deterministic_lines(runs.default .. "/big_vision_metrics.txt"))
  local cfg = config(3)
  cfg.matmul_precision = "fastest"
  T.raises(function() trainer(cfg, tmp .. "/precision_bad", {}) end,
           'config.matmul_precision: \'fastest\' is not one of "default", "high", "highest"')
  T.raises(function() bv.set_matmul_precision("HIGH") end, "config.matmul_precision: 'HIGH'")
  T.eq(bv.tf32(), {cublas = true, cudnn = true}, "a refused value changes nothing")
  T.truthy(not bv.fs.exists(tmp .. "/precision_bad/big_vision_metrics.txt"), "refused before training")
end)

-- config.deterministic: libtorch's deterministic-algorithms switch follows it (on CUDA an op
-- with no deterministic kernel then fails naming itself; scripts/gpu_check's resume check uses
-- it); unset is off, and anything but a boolean is refused before training.
T.test("deterministic: libtorch's switch follows it, unset is off", function()
  local cfg = config(3)
  cfg.deterministic = true
  trainer(cfg, tmp .. "/deterministic_on", {})
  T.eq(bv.deterministic(), true)
  trainer(config(3), tmp .. "/deterministic_unset", {})
  T.eq(bv.deterministic(), false)
  T.eq(deterministic_lines(tmp .. "/deterministic_on/big_vision_metrics.txt"),
       deterministic_lines(tmp .. "/deterministic_unset/big_vision_metrics.txt"))
  cfg.deterministic = "yes"
  T.raises(function() trainer(cfg, tmp .. "/deterministic_bad", {}) end,
           "config.deterministic must be true or false, got yes")
  T.truthy(not bv.fs.exists(tmp .. "/deterministic_bad/big_vision_metrics.txt"), "refused before training")
end)

T.test("autocast = float16 is refused before training: it needs loss scaling", function()
  local cfg = config(3)
  cfg.autocast = "float16"
  T.raises(function() trainer(cfg, tmp .. "/fp16", {}) end,
           'config.autocast = "float16" needs loss scaling, which bvlua does not do: use "bfloat16"')
  T.truthy(not bv.fs.exists(tmp .. "/fp16/big_vision_metrics.txt"), "refused before training")
  cfg.autocast = "fp8"
  T.raises(function() trainer(cfg, tmp .. "/fp8", {}) end, 'config.autocast: unknown dtype "fp8"')
end)

T.run()
os.execute("rm -rf '" .. tmp .. "'")
