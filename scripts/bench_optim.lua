-- The optimizer benchmark's one side (scripts/bench's `optim` section runs it, each side in its
-- own process): one optimizer update of a model's whole parameter set, the fused update
-- (multi-tensor _foreach_* and in-place ops, bvlua's default) against the reference (the plain
-- per-parameter ops every update made before it, config._reference_update).
--   bvlua run scripts/bench_optim.lua MODEL OPTIMIZER IMPL STEPS
--     -> "updates/s minor-page-faults-per-update kernel-share-of-cpu-time cpu-ms-per-update"
--   bvlua run scripts/bench_optim.lua MODEL OPTIMIZER IMPL count
--     -> a JSON line: the op calls of one update as libtorch's profiler records them: `calls`,
--        the calls bvlua makes (the outermost ops: what a GPU launches at least one kernel for),
--        `mul` and `div` among them, `nested` every op call at any depth (on the CPU a
--        multi-tensor op runs the per-tensor kernels one by one, and they count here), and
--        `allocs` (aten::empty*, new tensors)
-- MODEL: pg_tiny (scripts/bench_paligemma.lua's tiny PaliGemma) or vitb16 (ViT-B/16, 224 px,
-- 1000 classes); its parameters as init makes them, random gradients. OPTIMIZER: adam
-- (scale_by_adam), adafactor (big_vision.scale_by_adafactor), momentum (big_vision.momentum_hp)
-- or sgd (big_vision.sgd), each with decoupled weight decay 1e-4 on the kernels and
-- grad_clip_norm 1, as big_vision's configs; updates without the norms, as the trainer's
-- between log steps. IMPL: fused or reference. BENCH_DEVICE=cuda runs it on the GPU.
local json = require "bv.json"

local name, optimizer, impl, steps = arg[1], arg[2], arg[3], arg[4]
local MODELS = {
  pg_tiny = {"proj.paligemma.paligemma", {
    img_model = "bit", img = {depth = 26, width = 0.5},
    llm = {variant = "gemma_2b", width = 64, depth = 2, mlp_dim = 128, num_heads = 2,
           num_kv_heads = 1, head_dim = 32, vocab_size = 43}}},
  vitb16 = {"vit", {variant = "B/16", num_classes = 1000, image_size = 224}},
}
local OPTAX = {adam = "scale_by_adam", adafactor = "big_vision.scale_by_adafactor",
               momentum = "big_vision.momentum_hp", sgd = "big_vision.sgd"}
local spec = MODELS[name] or error("bench_optim: MODEL is pg_tiny or vitb16, not " .. tostring(name), 0)
local optax_name = OPTAX[optimizer] or error("bench_optim: OPTIMIZER is adam, adafactor, "
                                             .. "momentum or sgd, not " .. tostring(optimizer), 0)
assert(impl == "fused" or impl == "reference", "bench_optim: IMPL is fused or reference")
local device = os.getenv("BENCH_DEVICE") or "cpu"

local model = bv.models.build(spec[1], spec[2])
local params = model:init(0)
local rng = bv.rng(1)
local grads = {}
for n, t in pairs(params) do
  params[n] = t:to(device)
  grads[n] = (bv.randn(t:shape(), rng) * 1e-3):to(device)
end
local config = {optax_name = optax_name, lr = 1e-3, wd = 1e-4, grad_clip_norm = 1.0,
                schedule = {decay_type = "cosine", warmup_steps = 1},
                _reference_update = impl == "reference"}
local opt = bv.optim.new(json.encode(config), model:param_shapes(),
                         {total_steps = 1000, batch_size = 1, data_size = 1, device = device})
local function step() opt:update(params, grads, {norms = false}) end
step()  -- warm-up: the state exists from here on
local _, any = next(params)
local function finish() any:sum():item() end

if steps ~= "count" then
  -- As bench_timing.lua, and the process's CPU time per update (user and system), which other
  -- work on a shared machine moves less than the wall clock.
  local n = tonumber(steps)
  local t0, u0 = bv.clock(), bv.usage()
  for _ = 1, n do step() end
  finish()
  local t1, u1 = bv.clock(), bv.usage()
  local cpu = (u1.user_s + u1.system_s) - (u0.user_s + u0.system_s)
  print(string.format("%.3f %d %.3f %.3f", n / (t1 - t0), (u1.minor_faults - u0.minor_faults) // n,
                      (u1.system_s - u0.system_s) / math.max(cpu, 1e-9), cpu / n * 1e3))
  return
end

-- One update recorded; the nesting of the ops comes from the trace (per thread, an op inside
-- another's span is its callee).
local trace = os.tmpname()
bv.profiler.start{}
step()
local r = bv.profiler.stop(trace)
local events = {}
for _, e in ipairs(json.decode(bv.fs.read_file(trace)).traceEvents) do
  if e.ph == "X" and e.cat == "cpu_op" then events[#events + 1] = e end
end
os.remove(trace)
table.sort(events, function(a, b)
  if a.tid ~= b.tid then return a.tid < b.tid end
  if a.ts ~= b.ts then return a.ts < b.ts end
  return a.dur > b.dur
end)
local out = {calls = 0, mul = 0, div = 0, nested = 0, allocs = 0, params = 0, elements = 0}
local open_tid, open_end = nil, -math.huge
for _, e in ipairs(events) do
  if e.tid ~= open_tid or e.ts >= open_end then  -- outside the last outermost op: outermost
    open_tid, open_end = e.tid, e.ts + e.dur
    out.calls = out.calls + 1
    local op = e.name:match("^aten::(.*)$") or e.name
    op = op:gsub("^_foreach_", ""):gsub("_$", "")
    if op == "mul" then out.mul = out.mul + 1 elseif op == "div" then out.div = out.div + 1 end
  end
end
for _, op in ipairs(r.ops) do
  out.nested = out.nested + op.calls
  if op.name:match("^aten::empty") then out.allocs = out.allocs + op.calls end
end
for _, t in pairs(params) do out.params, out.elements = out.params + 1, out.elements + t:numel() end
print(json.encode(out))
