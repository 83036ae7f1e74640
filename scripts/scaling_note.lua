-- On-paper scaling of bvlua's data-parallel training on H100s: what each rank sends and
-- receives per step, what each rank holds in memory, and the step time these imply.
--   build/bvlua run scripts/scaling_note.lua
-- No weights are allocated: parameter shapes come from bvlua's model definitions
-- (m:param_shapes()), the owners from bv.sharding's own planner, the optimizer state's shapes
-- from bv.optim (an optimizer that owns nothing keeps only shapes, though building it zeroes
-- each state tensor once on the CPU). It prints markdown: scripts/scaling_note.md from its
-- "Assumed:" line on is this output as printed (regenerate it after a change here;
-- tests/cli/scaling_note_test.sh compares the two), the prose above that line is by hand.
--
-- After today's tables, "Planned changes (issue 34)" runs the same model with the changes that
-- issue plans (hybrid mesh, bf16 on the wire, no second broadcast for remat, replicate's
-- all-reduce during the backward), each alone and combined, at the fixed global batch and at a
-- fixed batch per GPU, against the issue's goals; its assumptions are printed with it (planned()).
--
-- What is modelled is what bvlua does today (runtime/distributed/fsdp.cpp, dist.cpp,
-- lib/bv/sharding.lua):
--   fsdp       every read of a parameter that another rank owns is a broadcast from its owner;
--              a scanned stack is read a layer at a time, and a rematerialised layer reads its
--              layers again in the backward (a second broadcast); a whole tensor (the
--              embedding table) is fetched once per step and kept until the step ends. The
--              backward reduces each fetched value's gradient to its owner. Parameters under
--              min_size_to_shard_mb (4 MiB) stay replicated: their gradients and the loss are
--              all-reduced after the backward, in 32 MiB buckets. Everything travels as float32.
--              From the second step on, each read starts the broadcasts of the reads that
--              followed it in the step before (up to 4 reads or 256 MiB ahead): broadcasts
--              overlap computation. The gradient reduces are started without waiting and
--              overlap the rest of the backward.
--   replicate  one all-reduce of every gradient (32 MiB buckets) after the backward.
-- So a step takes max(forward compute, forward broadcasts) + max(backward compute, remat
-- broadcasts + reduces) + all-reduces: NCCL runs one collective at a time, and replicate's
-- all-reduces, issued after the backward, hold the step up. Stop flags travel over a Gloo group
-- on the host.
local sharding = require "bv.sharding"
local json = require "bv.json"

local GB, GiB = 1e9, 2 ^ 30

-- ---------------------------------------------------------------------------------------------
-- Hardware and efficiency assumptions

-- H100 SXM5: 989 TFLOP/s dense bf16 tensor-core peak (NVIDIA's datasheet: 1,979 with 2:4
-- sparsity), 80 GB of HBM3 (the driver shows 79.6 GiB). We assume 40% of peak for all the
-- matmul and attention work, remat's recomputation included (an assumption, not a measurement:
-- bvlua has not run on a GPU yet), and that 72 GiB is usable (CUDA context, NCCL buffers,
-- allocator fragmentation take the rest).
local PEAK_FLOPS = 989e12
local MFU = 0.40
local HBM_BUDGET = 72 * GiB

-- NCCL bus bandwidths (nccl-tests doc/PERFORMANCE.md: broadcast and reduce take S / busbw,
-- all-reduce takes S * 2(n-1)/n / busbw) and a fixed cost per collective (alpha; our guess for
-- a ring over 8, resp. 64 ranks). 8 GPUs: NVLink 4 through NVSwitch, ~360 GB/s (a third-party
-- 8xH100 run of nccl-tests, github.com/aigatech/vpbenchmarking, measured 480 GB/s all-reduce
-- with NVLS but only 213 GB/s broadcast). 64 GPUs on 8 hosts with one 400 Gb/s InfiniBand NIC
-- per GPU: two cases. "1 rail": the collective gets one NIC's ~45 GB/s (the pessimistic case);
-- "8 rails": NCCL's rings cross each host boundary on all 8 NICs at once, up to 8 x 45; the
-- same third-party run measured 286 GB/s broadcast and 331 GB/s all-reduce on 4 such hosts.
local NETS = {
  {gpus = 1},
  {gpus = 8, where = "1 host, NVLink", busbw = 360 * GB, alpha = 20e-6},
  {gpus = 64, where = "8 hosts, 1 rail", busbw = 45 * GB, alpha = 100e-6, rails = 1},
  {gpus = 64, where = "8 hosts, 8 rails", busbw = 300 * GB, alpha = 100e-6, rails = 8},
}
for _, net in ipairs(NETS) do
  net.label = net.where and string.format("%d (%s)", net.gpus, net.where) or tostring(net.gpus)
end

-- ---------------------------------------------------------------------------------------------
-- Shapes

local DTYPE_BYTES = {float32 = 4, bfloat16 = 2, float16 = 2, float64 = 8, int64 = 8, int32 = 4}

local function numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

local function bytes_of(p) return numel(p.shape) * DTYPE_BYTES[p.dtype] end

local function shape_of(model, name)
  for _, p in ipairs(model:param_shapes()) do
    if p.name == name then return p.shape end
  end
  error("no parameter " .. name)
end

-- Elements of the parameters whose names match any of the Lua patterns.
local function count(model, patterns)
  local n = 0
  for _, p in ipairs(model:param_shapes()) do
    for _, pat in ipairs(patterns) do
      if p.name:find(pat) then n = n + numel(p.shape); break end
    end
  end
  return n
end

-- ---------------------------------------------------------------------------------------------
-- Who owns what (bv.sharding's planner, for a world of `gpus` ranks; rank 0's view)

local function plan(model, opt, strategy, gpus)
  local S = sharding.new({sharding_strategy = strategy}, nil)
  S.world = gpus  -- plan() reads only the world size: no process group is needed
  S:plan(model:param_shapes(), function(n) return opt:frozen(n) end,
         function(n) return opt:rows_independent(n) end)
  return S
end

-- Adds `bytes` of a tensor belonging to parameter `name` to what each rank holds: all of it on
-- every rank (replicated), on its owner, or split by rows among the owners of a stack's layers
-- (`rows`: the tensor runs along the stack's rows, as parameters, gradients and Adam's moments do).
local function spread(S, name, bytes, rows, held)
  local o = S.owner[name]
  if o == nil then
    for r = 0, S.world - 1 do held[r] = held[r] + bytes end
  elseif type(o) == "number" then
    held[o] = held[o] + bytes
  elseif rows then
    for _, r in ipairs(o) do held[r] = held[r] + bytes / #o end
  else
    local seen = {}
    for _, r in ipairs(o) do
      if not seen[r] then held[r], seen[r] = held[r] + bytes, true end
    end
  end
end

local function zeros(S)
  local t = {}
  for r = 0, S.world - 1 do t[r] = 0 end
  return t
end

local function max_rank(held)
  local m = 0
  for _, v in pairs(held) do m = math.max(m, v) end
  return m
end

local function mean_rank(held)
  local sum, n = 0, 0
  for _, v in pairs(held) do sum, n = sum + v, n + 1 end
  return sum / n
end

-- Bytes of parameters (= gradients: each rank keeps the gradients of what it owns) and of
-- optimizer state on the most loaded rank, and the parameters' mean over ranks.
local function held_state(S, model, opt)
  local params, state = zeros(S), zeros(S)
  local shapes = {}
  for _, p in ipairs(model:param_shapes()) do
    shapes[p.name] = p
    spread(S, p.name, bytes_of(p), true, params)
  end
  for _, s in ipairs(opt:state_spec()) do
    local aligned = #s.shape >= 1 and s.shape[1] == shapes[s.param].shape[1]
    spread(S, s.param, numel(s.shape) * DTYPE_BYTES[s.dtype], aligned, state)
  end
  return max_rank(params), max_rank(state), mean_rank(params)
end

-- ---------------------------------------------------------------------------------------------
-- One step's collectives: {kind = "broadcast" | "reduce" | "all_reduce", bytes = S, what = ...}

local BUCKET = 32 * 2 ^ 20  -- dist.cpp's kBucketBytes

-- dist.cpp's for_each_bucket over the tensors' sizes, in order: one all-reduce per bucket.
local function buckets(sizes)
  local out, cur = {}, nil
  for _, n in ipairs(sizes) do
    if cur and cur + n > BUCKET then out[#out + 1], cur = cur, nil end
    cur = (cur or 0) + n
  end
  if cur then out[#out + 1] = cur end
  return out
end

-- remat(name): whether the layer that reads `name` is rematerialised. micro: accum_steps.
-- opts (the planned changes; {} is today): wire = bytes per element of what fsdp broadcasts and
-- reduces and of the gradients' all-reduces (4: float32 today, 2: bfloat16); keep = a layer's
-- fetched parameters stay until its recomputation (no remat broadcast); hybrid = S plans one
-- host's ranks (the mesh's `data` axis): broadcasts and reduces stay in the host ("host"), and
-- each owner all-reduces its shard's gradient with its peers on the other hosts ("cross"; once
-- a step, after accumulation in float32). A call's group: nil (all ranks), "host" or "cross".
local function step_collectives(S, model, remat, micro, opts)
  opts = opts or {}
  local scale = (opts.wire or 4) / 4
  local group = opts.hybrid and "host" or nil
  local calls = {}
  local function add(kind, bytes, what, times, g, owner)
    for _ = 1, times do
      calls[#calls + 1] = {kind = kind, bytes = bytes, what = what, group = g, owner = owner}
    end
  end
  if S.world == 1 then return calls end  -- one process: no collectives at all
  local small = {4}  -- the loss (float32) goes first, with the replicated gradients
  for _, p in ipairs(model:param_shapes()) do  -- sorted by name, as sharding.lua sends them
    local o, b = S.owner[p.name], bytes_of(p)
    if S.kind[p.name] == "fsdp" and type(o) == "table" then
      for _, r in ipairs(o) do  -- a layer: fetched by every micro-batch, again by its remat
        add("broadcast", scale * b / #o, "forward", micro, group)
        if remat(p.name) and not opts.keep then
          add("broadcast", scale * b / #o, "remat", micro, group)
        end
        add("reduce", scale * b / #o, "backward", micro, group)
        if opts.hybrid then add("all_reduce", scale * b / #o, "cross", 1, "cross", r) end
      end
    elseif S.kind[p.name] == "fsdp" then  -- whole: fetched once, kept until the step ends
      add("broadcast", scale * b, "forward", 1, group)
      add("reduce", scale * b, "backward", micro, group)
      if opts.hybrid then add("all_reduce", scale * b, "cross", 1, "cross", o) end
    else
      small[#small + 1] = scale * b
    end
  end
  for _, b in ipairs(buckets(small)) do add("all_reduce", b, "replicated", 1) end
  if S.sharded then add("all_reduce", 8, "scalars", 1) end  -- the clipping norm's sum over ranks
  return calls
end

-- The ring's per-rank bytes each way and the nccl-tests bus-bandwidth factor of a collective
-- over n ranks (a broadcast or reduce passes S through every rank but one, an all-reduce
-- 2(n-1)/n * S).
local function factors(kind, n)
  if kind == "all_reduce" then return 2 * (n - 1) / n, 2 * (n - 1) / n end
  return (n - 1) / n, 1
end

-- Per-rank bytes each way and the seconds at the network's bus bandwidth, by `what`. Calls of
-- the hybrid mesh's "host" group run over NVLink among the host's 8 ranks (NETS[2]); "cross"
-- calls are one owner's all-reduce with its peers on the other hosts: each rank's own calls run
-- one after another, all 8 ranks' at once, each on its own NIC's share of the host's network
-- (busbw / rails), and all of them together at most at the host's busbw. The bytes are
-- averaged over ranks; `net_bytes` counts the calls that use the network (all of them when one
-- ring spans the hosts), `nvlink_bytes` the host group's.
local function traffic(calls, net)
  local host, hosts = NETS[2], net.gpus // NETS[2].gpus
  local t = {by_what = {}, secs_of = {}, total = 0, secs = 0, calls = #calls, net_bytes = 0,
             nvlink_bytes = 0}
  local function account(what, bytes, secs)
    t.by_what[what] = (t.by_what[what] or 0) + bytes
    t.secs_of[what] = (t.secs_of[what] or 0) + secs
    t.total, t.secs = t.total + bytes, t.secs + secs
  end
  local cross = {}  -- owner (a host's rank) -> {bytes, calls}
  for _, c in ipairs(calls) do
    if c.group == "cross" then
      local x = cross[c.owner] or {bytes = 0, calls = 0}
      x.bytes, x.calls, cross[c.owner] = x.bytes + c.bytes, x.calls + 1, x
    else
      local g = c.group == "host" and host or net
      local factor, wire = factors(c.kind, g.gpus)
      account(c.what, factor * c.bytes, wire * c.bytes / g.busbw + g.alpha)
      if g == host then
        t.nvlink_bytes = t.nvlink_bytes + factor * c.bytes
      else
        t.net_bytes = t.net_bytes + factor * c.bytes
      end
    end
  end
  if next(cross) then
    local factor = factors("all_reduce", hosts)
    local sum, most, calls_most = 0, 0, 0
    for _, x in pairs(cross) do
      sum, most, calls_most = sum + x.bytes, math.max(most, x.bytes), math.max(calls_most, x.calls)
    end
    local secs = factor * math.max(sum / net.busbw, most / (net.busbw / net.rails))
                 + calls_most * net.alpha
    local bytes = factor * sum / host.gpus  -- averaged over a host's ranks
    account("cross", bytes, secs)
    t.net_bytes = t.net_bytes + bytes
  end
  return t
end

-- ---------------------------------------------------------------------------------------------
-- Activations (bytes per example), under bf16 autocast with libtorch's fused attention: what
-- the autograd graph keeps (counted op by op in runtime/models/vit.cpp and gemma.cpp; the
-- residual stream is float32, matmul inputs are saved as their bf16 casts, weights counted
-- apart). Rematerialised, a layer keeps only its float32 input, and its backward rebuilds one
-- layer at a time (counted twice: activations and their gradients).

-- ViT block, per token: x and h (layer norms' inputs, fp32) 8D, bf16 casts for qkv, out and
-- Dense_0 6D, qkv 6D, attention output 2D, Dense_0 output (gelu's input) 2F, gelu output 2F.
local function vit_token_layer(D, F) return 22 * D + 4 * F end

-- Gemma block, per token: two RMSNorms (input and x*rsqrt, fp32) 16D, bf16 casts of the normed
-- input (q, k, v einsums and the two MLP matmuls) 10D, q (raw, kept by RoPE, and its cast) 4NH,
-- k and v 8KH, attention output and its copy 4NH, the GeGLU MLP 8F, the additive mask row 2S.
local function gemma_token_layer(g)
  return 26 * g.D + 8 * g.N * g.H + 8 * g.K * g.H + 8 * g.F + 2 * g.S
end

local function stack_activations(tokens, layers, D, per_layer, remat)
  if remat then return tokens * (layers * 4 * D + 2 * per_layer) end
  return tokens * layers * per_layer
end

-- ---------------------------------------------------------------------------------------------
-- Markdown

local function row(cells) print("| " .. table.concat(cells, " | ") .. " |") end

local function header(cells)
  row(cells)
  local rule = {}
  for i = 1, #cells do rule[i] = "---" end
  row(rule)
end

-- Prints `text` as a paragraph wrapped at 100 columns, then a blank line.
local function para(text)
  local lines, line = {}, nil
  for word in text:gmatch("%S+") do
    if line and #line + 1 + #word > 100 then
      lines[#lines + 1], line = line, word
    else
      line = line and line .. " " .. word or word
    end
  end
  lines[#lines + 1] = line
  print(table.concat(lines, "\n") .. "\n")
end

local function gb(x) return string.format("%.2f", x / GB) end
local function gib(x) return string.format("%.1f", x / GiB) end
local function secs(x) return string.format("%.3f", x) end

-- ---------------------------------------------------------------------------------------------
-- A workload: a model, its optimizer, strategy, batch, and the activation and FLOP models.

-- Per-rank memory for a per-GPU batch; `weights` is what is fetched or cast on top of the
-- held state.
local function memory(w, S, batch, remat, opts)
  local params, state, mean = held_state(S, w.model, w.opt)
  local acts = batch * w.activations(remat)
  local weights = w.weights_in_flight(S.world, remat, opts or {})
  return {params = params, mean = mean, grads = params, state = state, weights = weights,
          acts = acts, total = 2 * params + state + weights + acts}
end

-- Micro-batches (accum_steps, a power of two) for the per-GPU batch to fit the HBM budget.
local function micro_batches(w, S, batch, remat, opts)
  local k = 1
  while k < batch and memory(w, S, batch / k, remat, opts).total > HBM_BUDGET do k = k * 2 end
  if memory(w, S, batch / k, remat, opts).total > HBM_BUDGET then return nil end
  return k
end

local function compute_secs(w, batch, remat)
  return batch * w.flops(remat) / (MFU * PEAK_FLOPS)
end

-- A window where `c` seconds of compute and `m` of communication run side by side: max(c, m)
-- when the overlap is perfect (f = 1, today's tables), plus (1 - f) of the overlapped part
-- when it is not (NCCL's kernels take SMs and memory bandwidth from the compute).
local function window(c, m, f) return math.max(c, m) + (1 - f) * math.min(c, m) end

-- Replicate's gradient all-reduce, bucketed and started as each bucket completes (planned
-- change (d)): the backward produces w.backward_units in order, each unit's gradients (at `wire`
-- bytes an element) ready when its backward ends, cut into BUCKET-sized all-reduces that queue
-- on NCCL's one stream. Returns the backward window: until both compute and the last bucket
-- are done, plus (1 - f) of the communication that ran during the compute.
local function overlapped_all_reduce(w, net, batch, remat, wire, f)
  local t, done, parts = 0, 0, {}
  for _, u in ipairs(w.backward_units(batch, remat)) do
    t = t + u.secs
    local left = u.params * wire
    while left > 0 do
      local b = math.min(left, BUCKET)
      local factor = factors("all_reduce", net.gpus)
      local start = math.max(t, done)
      done = start + factor * b / net.busbw + net.alpha
      parts[#parts + 1] = {start, done}
      left = left - b
    end
  end
  local hidden = 0
  for _, p in ipairs(parts) do hidden = hidden + math.max(0, math.min(p[2], t) - p[1]) end
  return math.max(t, done) + (1 - f) * math.min(hidden, t)
end

-- One step on `net` with or without remat: the traffic, the compute seconds, the step's seconds
-- with the broadcasts overlapping computation (prefetch) and without (a first step). opts: the
-- planned changes (step_collectives; overlap = replicate's bucketed all-reduce during the
-- backward), batch = the per-GPU batch (default: the global batch split over the GPUs), f = the
-- overlap fraction (default 1). With the hybrid mesh, S is a host's plan (8 ranks).
local function step(w, S, net, remat, opts)
  opts = opts or {}
  local f = opts.f or 1
  local batch = opts.batch or w.batch // net.gpus
  local micro = micro_batches(w, S, batch, remat, opts) or 1
  local t = {by_what = {}, secs_of = {}, total = 0, secs = 0, calls = 0, net_bytes = 0,
             nvlink_bytes = 0}
  if net.gpus > 1 then
    local remat_of = remat and w.remat_of or function() return false end
    t = traffic(step_collectives(S, w.model, remat_of, micro, opts), net)
  end
  local compute = compute_secs(w, batch, remat)
  local forward = batch * w.forward_flops / (MFU * PEAK_FLOPS)
  local function comm(what) return t.secs_of[what] or 0 end
  -- The backward's broadcasts (remat), gradient reduces and (hybrid) each owner's cross-host
  -- all-reduces share NCCL's one stream and overlap the backward's compute (the reduces are
  -- started without waiting: fsdp.h's reduce_grad).
  local backward_comm = comm("remat") + comm("backward") + comm("cross")
  if opts.streams then  -- cross-host all-reduces on a stream of their own, beside NVLink's
    backward_comm = math.max(comm("remat") + comm("backward"), comm("cross"))
  end
  local backward = window(compute - forward, backward_comm, f)
  local tail = comm("replicated") + comm("scalars")
  if opts.overlap and net.gpus > 1 then  -- (d): the all-reduce runs during the backward
    assert(micro == 1, "(d) is modelled for one micro-batch a step")
    backward = overlapped_all_reduce(w, net, batch, remat, (opts.wire or 4), f)
    tail = comm("scalars")
  end
  local secs = window(forward, comm("forward"), f) + backward + tail
  return {net = net, t = t, compute = compute, secs = secs, serial = compute + t.secs,
          batch = batch, micro = micro}
end

local function memory_table(w, plans)
  para("Memory per GPU (GiB; the most loaded rank; params: max (mean over ranks)):")
  header({"GPUs", "batch/GPU", "params (fp32)", "grads", "optimizer", "weights in flight",
          "activations", "total", "accum_steps to fit"})
  for _, gpus in ipairs({1, 8, 64}) do
    local S, batch = plans[gpus], w.batch // gpus
    for _, remat in ipairs({true, false}) do
      local m = memory(w, S, batch, remat)
      local k = micro_batches(w, S, batch, remat)
      row({tostring(gpus) .. (remat and ", remat" or ", no remat"), tostring(batch),
           gib(m.params) .. " (" .. gib(m.mean) .. ")", gib(m.grads), gib(m.state),
           gib(m.weights), gib(m.acts), gib(m.total), k and tostring(k) or "does not fit"})
    end
  end
  print()
end

local function traffic_table(w, with, without)
  para("Sent and received per GPU per step with remat (GB each way, averaged over ranks; " ..
       "with the accum_steps above):")
  local head = {"GPUs", "batch/GPU"}
  for _, h in ipairs(w.traffic_header) do head[#head + 1] = h end
  for _, h in ipairs({"total", "collectives", "total, no remat"}) do head[#head + 1] = h end
  header(head)
  for i, r in ipairs(with) do
    local cells = {r.net.label, tostring(w.batch // r.net.gpus)}
    for _, what in ipairs(w.traffic_columns) do cells[#cells + 1] = gb(r.t.by_what[what] or 0) end
    cells[#cells + 1] = gb(r.t.total)
    cells[#cells + 1] = tostring(r.t.calls)
    cells[#cells + 1] = gb(without[i].t.total)
    row(cells)
  end
  print()
end

local function time_table(w, with, without)
  para(string.format("Step time with remat (global batch %d; compute at %d%% of 989 TFLOP/s; " ..
                     "\"exposed\": the step's time beyond its compute):", w.batch, MFU * 100))
  header({"GPUs", "compute (s)", "communication (s)", "step (s)", "exposed", "examples/s",
          "speed-up vs 1 GPU", "step, nothing overlapped (s)", "step, no remat (s)"})
  for i, r in ipairs(with) do
    local exposed = string.format("%.0f%%", 100 * (r.secs - r.compute) / r.secs)
    row({r.net.label, secs(r.compute), secs(r.t.secs), secs(r.secs), exposed,
         string.format("%.0f", w.batch / r.secs), string.format("%.1fx", with[1].secs / r.secs),
         secs(r.serial), secs(without[i].secs)})
  end
  print()
end

local function report(w)
  print("## " .. w.title .. "\n")
  para(w.about)
  local plans, with, without = {}, {}, {}
  for _, net in ipairs(NETS) do
    plans[net.gpus] = plans[net.gpus] or plan(w.model, w.opt, w.strategy, net.gpus)
    with[#with + 1] = step(w, plans[net.gpus], net, true)
    without[#without + 1] = step(w, plans[net.gpus], net, false)
  end
  memory_table(w, plans)
  traffic_table(w, with, without)
  time_table(w, with, without)
  return plans
end

-- ---------------------------------------------------------------------------------------------
-- PaliGemma-3B full fine-tuning (big_vision configs/proj/paligemma/transfers/*.py: batch 256,
-- scale_by_adam with b2=0.999 and float32 moments, grad_clip_norm 1, fsdp over the data axis;
-- cococap.py's text_len 32 at 224 px)

local function opt_for(config, model, batch)
  return bv.optim.new(json.encode(config), model:param_shapes(),
                      {total_steps = 1000, batch_size = batch, data_size = batch * 1000,
                       owned = {}})
end

local function paligemma()
  local model = bv.models.build("proj.paligemma.paligemma", {})  -- PaliGemma-3B at 224 px
  local cfg = {optax_name = "scale_by_adam", optax = {b2 = 0.999}, lr = 1e-5, wd = 0,
               grad_clip_norm = 1.0, schedule = {decay_type = "cosine", warmup_percent = 0.05}}
  local w = {title = "PaliGemma-3B, full fine-tuning, fsdp", model = model, batch = 256,
             strategy = 'fsdp(axis="data")', opt = opt_for(cfg, model, 256)}
  -- Sizes, from the shapes: ViT So400m/14 and Gemma 2B.
  local v_ln = shape_of(model, "img/Transformer/encoderblock/LayerNorm_0/scale")
  local v = {L = v_ln[1], D = v_ln[2],
             F = shape_of(model, "img/Transformer/encoderblock/MlpBlock_0/Dense_0/bias")[2],
             T = (224 // shape_of(model, "img/embedding/kernel")[1]) ^ 2}
  local q = shape_of(model, "llm/layers/attn/q_einsum/w")        -- [L, N, D, H]
  local kv = shape_of(model, "llm/layers/attn/kv_einsum/w")      -- [L, 2, K, D, H]
  local text = 32                                                 -- text_len positions
  local g = {L = q[1], N = q[2], D = q[3], H = q[4], K = kv[3],
             F = shape_of(model, "llm/layers/mlp/linear")[2],
             V = shape_of(model, "llm/embedder/input_embedding")[1], S = v.T + text}
  local vit_layers = count(model, {"^img/Transformer/encoderblock/.*/kernel$"})
  local vit_other = count(model, {"^img/embedding/kernel$", "^img/head/kernel$"})
  local llm_layers = count(model, {"^llm/layers/attn/.*/w$", "^llm/layers/mlp/"})
  w.about = string.format(
    "%d parameters (from `param_shapes()`); Adam (b2 = 0.999, float32 moments) as big_vision's " ..
    "PaliGemma transfers; global batch 256 at 224 px: %d image tokens and %d text positions " ..
    "(text_len 32); `config.autocast = \"bfloat16\"`; \"remat\" means the scanned ViT's default " ..
    "and `model.llm.remat_policy = \"nothing_saveable\"`.", model:param_count(), v.T, text)

  -- Forward FLOPs per example: 2 per multiply-add of the matmuls, attention 4 T S width.
  local function layers_fwd()
    return 2 * v.T * vit_layers + 4 * v.T * v.T * v.D * v.L
         + 2 * g.S * llm_layers + 4 * g.S * g.S * g.N * g.H * g.L
  end
  local fwd = layers_fwd() + 2 * v.T * vit_other + 2 * text * g.V * g.D  -- + logits of the text
  w.forward_flops = fwd
  function w.flops(remat) return 3 * fwd + (remat and layers_fwd() or 0) end

  -- Logits of the text positions: float32 logits and log-softmax kept, and as much again while
  -- the loss's backward runs.
  local loss_head = text * 16 * g.V
  function w.activations(remat)
    local vit = stack_activations(v.T, v.L, v.D, vit_token_layer(v.D, v.F), remat)
    local llm = stack_activations(g.S, g.L, g.D, gemma_token_layer(g), remat)
    return vit + llm + loss_head
  end

  -- Weights on top of the held state. One process: bf16 casts (all layers' without remat,
  -- saved for the backward; with remat one layer's plus the embedding's, which the logits
  -- keep). fsdp: whole units (embedding, image head) fetched in float32 and kept all step, their
  -- bf16 cast, their gradient and the copy the reduce works on (3.5x their fp32 size); layers:
  -- with remat one layer in fp32 + bf16 + its gradient and copy (14 bytes a parameter); without
  -- remat every layer's bf16 cast, plus one layer's fp32, gradient and copy. And the prefetch
  -- buffers: up to 256 MiB, plus the read that crosses it (a Gemma MLP kernel, 268 MB).
  -- Planned changes: with a bf16 wire (opts.wire = 2) what arrives is already the bf16 the
  -- matmuls take, and its gradient and the reduce's copy are bf16: 6 bytes a parameter instead
  -- of 14. Keeping the fetched layers for remat (opts.keep) holds every layer's bf16 value
  -- until its recomputation, as no remat does.
  local whole = count(model, {"^llm/embedder/", "^img/head/kernel$"})
  local layer = math.max(vit_layers / v.L, llm_layers / g.L)
  local all_layers = vit_layers + llm_layers
  local gating = shape_of(model, "llm/layers/mlp/gating_einsum")  -- [L, 2, D, F] float32
  function w.weights_in_flight(gpus, remat, opts)
    if gpus == 1 then return remat and 2 * (whole + layer) or 2 * (whole + all_layers) end
    local wire = opts and opts.wire or 4
    local work = wire + (wire == 4 and 2 or 0) + 2 * wire  -- fetched, bf16 cast, grad, copy
    local prefetch = 256 * 2 ^ 20 + wire * numel(gating) / g.L
    local keep = not remat or (opts and opts.keep)
    return work * whole + (keep and 2 * all_layers + (work - 2) * layer or work * layer)
           + prefetch
  end
  function w.remat_of(name) return name:find("^img/") or name:find("^llm/layers/") end
  w.key, w.short = "paligemma", "PaliGemma-3B (fsdp)"
  w.variants = {
    {name = "today", opts = {}},
    {name = "(a) hybrid mesh", opts = {hybrid = true}},
    {name = "(b) bf16 on the wire", opts = {wire = 2}},
    {name = "(c) no second broadcast", opts = {keep = true}},
    {name = "(a) + (b)", opts = {hybrid = true, wire = 2}},
    {name = "(b) + (c)", opts = {wire = 2, keep = true}},
    {name = "(a) + (b) + (c)", opts = {hybrid = true, wire = 2, keep = true}},
    {name = "(a) + (b) + (c), embedding split by rows (not planned)",
     opts = {hybrid = true, wire = 2, keep = true, split = true}},
    {name = "(a) + (b) + (c), embedding split, cross-host on a second stream (not planned)",
     opts = {hybrid = true, wire = 2, keep = true, split = true, streams = true}},
  }
  w.combined = 7  -- all the planned changes
  w.traffic_header = {"forward broadcasts", "remat broadcasts", "backward reduces",
                      "all-reduces (small params, loss)"}
  w.traffic_columns = {"forward", "remat", "backward", "replicated"}
  return w
end

-- ---------------------------------------------------------------------------------------------
-- SigLIP So400m/14 fine-tuned as a 1000-class classifier, replicated (big_vision
-- configs/transfer.py: batch 512, big_vision.momentum_hp with bf16 momentum, grad_clip_norm 1)

local function siglip()
  local model = bv.models.build("vit", {variant = "So400m/14", pool_type = "map",
                                        num_classes = 1000, scan = true})
  local cfg = {optax_name = "big_vision.momentum_hp", lr = 0.01, grad_clip_norm = 1.0,
               schedule = {decay_type = "cosine", warmup_steps = 500}}
  local w = {title = "SigLIP So400m/14, 1000-class fine-tuning, replicate", model = model,
             batch = 512, strategy = "replicate", opt = opt_for(cfg, model, 512)}
  local ln = shape_of(model, "Transformer/encoderblock/LayerNorm_0/scale")
  local v = {L = ln[1], D = ln[2],
             F = shape_of(model, "Transformer/encoderblock/MlpBlock_0/Dense_0/bias")[2],
             T = (224 // shape_of(model, "embedding/kernel")[1]) ^ 2}
  local layers = count(model, {"^Transformer/encoderblock/.*/kernel$"})
  local other = count(model, {"^embedding/kernel$"})
  -- The MAP head projects keys and values of every token, the rest for its one probe token.
  local map_kv = count(model, {"^MAPHead_0/.*/key/kernel$", "^MAPHead_0/.*/value/kernel$"})
  local head = count(model, {"^MAPHead_0/.*/kernel$", "^head/kernel$"}) - map_kv
  w.about = string.format(
    "%d parameters (`vit`, variant \"So400m/14\", MAP head, 1000 classes, scanned); " ..
    "big_vision's transfer.py: global batch 512 at 224 px (%d tokens), momentum_hp " ..
    "(bf16 momentum), replicate; bf16 autocast; \"remat\" is the scanned ViT's default.",
    model:param_count(), v.T)
  local function layers_fwd() return 2 * v.T * layers + 4 * v.T * v.T * v.D * v.L end
  local fwd = layers_fwd() + 2 * v.T * (other + map_kv) + 2 * head + 4 * v.T * v.D
  w.forward_flops = fwd
  function w.flops(remat) return 3 * fwd + (remat and layers_fwd() or 0) end
  function w.activations(remat)
    return stack_activations(v.T, v.L, v.D, vit_token_layer(v.D, v.F), remat)
  end
  local layer = layers / v.L
  function w.weights_in_flight(_, remat) return remat and 2 * layer or 2 * layers end
  -- The backward in order, for planned change (d): the heads first (MAP head, classifier,
  -- final norm), then the layers from the last (each with its recomputation under remat), then
  -- the embedding and position embedding; seconds and parameters (whose gradients it produces).
  local all = model:param_count()
  local head_params = count(model, {"^MAPHead_0/", "^head/", "^Transformer/encoder_norm/"})
  local layer_params = count(model, {"^Transformer/encoderblock/"}) / v.L
  local head_fwd = 2 * head + 2 * v.T * map_kv + 4 * v.T * v.D
  function w.backward_units(batch, remat)
    local s = batch / (MFU * PEAK_FLOPS)
    local units = {{secs = s * 2 * head_fwd, params = head_params}}
    local per_layer = layers_fwd() / v.L
    for _ = 1, v.L do
      units[#units + 1] = {secs = s * (remat and 3 or 2) * per_layer, params = layer_params}
    end
    units[#units + 1] = {secs = s * 2 * 2 * v.T * other,
                         params = all - head_params - v.L * layer_params}
    return units
  end
  function w.remat_of() return false end
  w.key, w.short = "siglip", "SigLIP So400m/14 (replicate)"
  w.variants = {
    {name = "today", opts = {}},
    {name = "(b) bf16 on the wire", opts = {wire = 2}},
    {name = "(d) all-reduce during the backward", opts = {overlap = true}},
    {name = "(b) + (d)", opts = {wire = 2, overlap = true}},
  }
  w.combined = 4
  w.traffic_header = {"gradient all-reduce"}
  w.traffic_columns = {"replicated"}
  return w
end

-- The assumptions, as the tables use them.
local function assumptions()
  para(string.format("Assumed: H100 SXM 80 GB, %.0f TFLOP/s dense bf16 at %d%% utilisation, " ..
                     "%.0f GiB usable; NCCL bus bandwidth and fixed cost per collective:",
                     PEAK_FLOPS / 1e12, MFU * 100, HBM_BUDGET / GiB))
  for _, net in ipairs(NETS) do
    if net.busbw then
      print(string.format("- %d GPUs, %s: %.0f GB/s, %.0f us", net.gpus, net.where,
                          net.busbw / GB, net.alpha * 1e6))
    end
  end
  print()
end

-- ---------------------------------------------------------------------------------------------
-- The planned changes (issue 34), on paper, over the same model: each alone and combined, for
-- the global batch of today's tables and for a fixed batch per GPU (the global batch / 8, what
-- one host runs today, kept as hosts are added).

local REGIMES = {
  {name = "fixed global batch", per_gpu = function(w, gpus) return w.batch // gpus end},
  {name = "fixed batch per GPU", per_gpu = function(w) return w.batch // 8 end},
}

local GOALS = {  -- issue 34: speed-up of 64 H100s over one GPU
  {work = "paligemma", rails = 1, x = 40}, {work = "paligemma", rails = 8, x = 50},
  {work = "siglip", rails = 1, x = 40},
}

local OVERLAPS = {1, 0.85, 0.7, 0.5}  -- overlap fractions of the sensitivity table

-- Not planned, for comparison: a plan whose whole fsdp tensors (the embedding table, the image
-- head) are split by rows among the ranks like a layer stack's layers, so that their
-- broadcasts, reduces, Adam state and (hybrid) cross-host all-reduces are spread over the
-- ranks and their NICs instead of falling on one owner.
local function split_whole(plans, gpus)
  local key = "split" .. gpus
  if plans[key] then return plans[key] end
  local S = plans[gpus]
  local T = setmetatable({owner = {}}, {__index = S})
  for name, o in pairs(S.owner) do
    if type(o) == "number" then
      local rows = {}
      for i = 1, gpus do rows[i] = (o + i - 1) % gpus end
      T.owner[name] = rows
    else
      T.owner[name] = o
    end
  end
  plans[key] = T
  return T
end

-- One GPU's examples/s at the per-GPU batch: the reference of every speed-up.
local function one_gpu(w, plans, batch)
  return batch / step(w, plans[1], NETS[1], true, {batch = batch}).secs
end

-- A variant on `net` in a regime: the step (with remat), its speed-up over one GPU at the same
-- per-GPU batch, its memory on the most loaded GPU, and whether keep (c) had to be dropped.
local function run_variant(w, plans, net, regime, opts, f)
  local batch = regime.per_gpu(w, net.gpus)
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.batch, o.f = batch, f
  if net.gpus <= 8 then o.hybrid = nil end  -- one host: the replica axis has size 1
  local S = o.hybrid and plans[8] or plans[net.gpus]
  if o.split then S = split_whole(plans, o.hybrid and 8 or net.gpus) end
  local dropped = false
  if o.keep then  -- only when memory allows: the same accum_steps as without keeping
    local without = {}
    for k, v in pairs(o) do without[k] = v end
    without.keep = nil
    if micro_batches(w, S, batch, true, o) ~= micro_batches(w, S, batch, true, without) then
      o.keep, dropped = nil, true
    end
  end
  local r = step(w, S, net, true, o)
  local micro = r.micro
  r.mem = memory(w, S, batch / micro, true, o).total
  r.speedup = (net.gpus * batch / r.secs) / one_gpu(w, plans, batch)
  r.dropped = dropped
  return r
end

local function cell(r)
  return string.format("%.3f s, %.1fx%s", r.secs, r.speedup, r.dropped and " (keep dropped)" or "")
end

local function variants_table(w, plans, regime)
  local b64 = regime.per_gpu(w, 64)
  para(string.format("%s, %s: %d per GPU on 8 GPUs, %d on 64 (global batch %d on 64). Step " ..
                     "time with remat and speed-up over one GPU (in examples/s, one GPU at the " ..
                     "same per-GPU batch); traffic and memory on 64 GPUs:",
                     w.short, regime.name, regime.per_gpu(w, 8), b64, 64 * b64))
  header({"change", "8 GPUs (1 host)", "64 GPUs, 1 rail", "64 GPUs, 8 rails",
          "GB each way per GPU, 64: NVLink + network", "memory, most loaded GPU (GiB)"})
  local out = {}
  for _, v in ipairs(w.variants) do
    local rs = {}
    for i = 2, #NETS do rs[#rs + 1] = run_variant(w, plans, NETS[i], regime, v.opts, 1) end
    local t = rs[3].t
    local nv = v.opts.hybrid and gb(t.nvlink_bytes) or "0"
    row({v.name, cell(rs[1]), cell(rs[2]), cell(rs[3]), nv .. " + " .. gb(t.net_bytes),
         gib(rs[3].mem)})
    out[v.name] = rs
  end
  print()
  return out
end

-- Smallest per-GPU batch (up to 64x the fixed-global one) at which `opts` on `net` reaches `x`.
local function batch_needed(w, plans, net, opts, x)
  for b = w.batch // net.gpus, 64 * w.batch // net.gpus do
    local regime = {per_gpu = function() return b end}
    if run_variant(w, plans, net, regime, opts, 1).speedup >= x then return b end
  end
end

-- Network bus bandwidth (GB/s, the host's, over all its rails) at which `opts` reaches `x`.
local function bandwidth_needed(w, plans, net, regime, opts, x)
  local lo, hi = net.busbw, 100 * net.busbw
  local function at(bw)
    local n = {}
    for k, v in pairs(net) do n[k] = v end
    n.busbw = bw
    return run_variant(w, plans, n, regime, opts, 1).speedup
  end
  if at(lo) >= x then return lo end
  if at(hi) < x then return nil end
  for _ = 1, 40 do
    local mid = (lo + hi) / 2
    if at(mid) >= x then hi = mid else lo = mid end
  end
  return hi
end

local function planned(works)
  print("## Planned changes (issue 34)\n")
  para("The same model with the changes that issue 34 plans, each alone and combined, with " ..
       "remat, for the global batch of the tables above and for a fixed batch per GPU (the " ..
       "global batch / 8, what one host runs today, kept as hosts are added: how users scale " ..
       "up). (a) Hybrid sharding over big_vision's two-axis mesh, `mesh = {{\"replica\", 8}, " ..
       "{\"data\", -1}}`: parameters sharded within a host's `data` axis (the owners of the " ..
       "8-GPU plan), broadcasts and reduces over NVLink within the host, then each owner " ..
       "all-reduces its own shard's gradient with its 7 peers on the other hosts, once a " ..
       "step. (b) bfloat16 on the wire: fsdp's broadcasts and reduces and the gradients' " ..
       "all-reduces carry half the bytes (float32 accumulation on the owner; the loss and " ..
       "the clipping norm stay float32). (c) No second broadcast for remat: a layer's " ..
       "fetched parameters (their bf16 values) stay until its recomputation, when memory " ..
       "allows (same accum_steps as without). (d) Replicate's all-reduce bucketed (32 MiB) " ..
       "and started as each bucket's gradients are complete during the backward.")
  para(string.format("Assumed for these rows, beyond the assumptions above: within a host " ..
       "NVLink at %.0f GB/s and %.0f us a collective (the 8-GPU row's); across hosts, each " ..
       "owner's shard all-reduce (%.0f us a collective) runs on its own NIC's share of the " ..
       "host's network, %.0f GB/s on one rail (the 8 ranks' all-reduces share it) and " ..
       "%.0f / 8 = %.1f GB/s a rank on eight rails, and all 8 ranks' together never beyond the " ..
       "host's %.0f or %.0f GB/s; a rank's collectives run one at a time on NCCL's one stream, " ..
       "as today. bf16 halves the bytes and nothing else (same bandwidths, same fixed costs). " ..
       "Overlap fraction f = 1 in the tables, as in today's rows: communication that runs " ..
       "beside compute costs nothing; a window of c seconds of compute and m of communication " ..
       "takes max(c, m) + (1 - f) min(c, m), and the last table shows f < 1. (d)'s buckets " ..
       "follow the backward: the heads' gradients first, then one layer at a time from the " ..
       "last (a scanned stack's gradient is bucketed per layer slice as each layer's backward " ..
       "ends, as fsdp reads it), the embedding last; a layer's backward takes its share of " ..
       "the backward FLOPs. Ignored, as in today's rows: the last layer's reduce after the " ..
       "backward (about 1 ms). In the tables' traffic column, without (a) all of a GPU's " ..
       "collectives run on one ring over the 64 ranks and count as network.",
       NETS[2].busbw / GB, NETS[2].alpha * 1e6, NETS[3].alpha * 1e6, NETS[3].busbw / GB,
       NETS[4].busbw / GB, NETS[4].busbw / GB / 8, NETS[3].busbw / GB, NETS[4].busbw / GB))
  local results = {}
  for _, wp in ipairs(works) do
    local w, plans = wp.w, wp.plans
    print("### " .. w.short .. "\n")
    results[w.key] = {}
    for _, regime in ipairs(REGIMES) do
      results[w.key][regime.name] = variants_table(w, plans, regime)
    end
  end

  -- Memory of (c): keeping the fetched layers for remat, against today's one layer.
  local pg = works[1]
  para("The memory (c) costs (PaliGemma-3B, GiB on the most loaded GPU, with remat; 72 GiB " ..
       "usable of the H100's 80 GB):")
  header({"per-GPU batch", "GPUs", "weights in flight: today", "keep (c)", "bf16 + keep",
          "total: today", "keep (c)", "hybrid + bf16 + keep"})
  for _, c in ipairs({{8, REGIMES[1]}, {64, REGIMES[1]}, {64, REGIMES[2]}}) do
    local gpus, w = c[1], pg.w
    local batch = c[2].per_gpu(w, gpus)
    local S = pg.plans[gpus]
    local m0 = memory(w, S, batch, true, {})
    local mk = memory(w, S, batch, true, {keep = true})
    local mbk = memory(w, S, batch, true, {keep = true, wire = 2})
    local mall = memory(w, pg.plans[8], batch, true, {keep = true, wire = 2})
    row({tostring(batch), tostring(gpus), gib(m0.weights), gib(mk.weights), gib(mbk.weights),
         gib(m0.total), gib(mk.total), gib(mall.total)})
  end
  print()

  -- Sensitivity to the overlap fraction: the combined changes.
  para("Today and the combined changes when only part of the overlapped communication hides " ..
       "(speed-up of 64 GPUs over one, 1 rail / 8 rails):")
  local head = {"workload, regime"}
  for _, f in ipairs(OVERLAPS) do head[#head + 1] = string.format("f = %.2f", f) end
  header(head)
  for _, wp in ipairs(works) do
    for _, v in ipairs({wp.w.variants[1], wp.w.variants[wp.w.combined]}) do
      for _, regime in ipairs(REGIMES) do
        local cells = {wp.w.short .. ", " .. v.name .. ", " .. regime.name}
        for _, f in ipairs(OVERLAPS) do
          local a = run_variant(wp.w, wp.plans, NETS[3], regime, v.opts, f)
          local b = run_variant(wp.w, wp.plans, NETS[4], regime, v.opts, f)
          cells[#cells + 1] = string.format("%.1fx / %.1fx", a.speedup, b.speedup)
        end
        row(cells)
      end
    end
  end
  print()

  -- The goals.
  para("Issue 34's goals, with all the planned changes that apply (f = 1); for a goal missed at " ..
       "the fixed global batch, what it would need with them: the smallest per-GPU batch that " ..
       "meets it, or the host's network bus bandwidth (all its rails together) at the global " ..
       "batch of today's tables; and, not planned, PaliGemma with its embedding split by rows " ..
       "(its broadcasts, reduces, Adam state and cross-host all-reduce spread over the host's " ..
       "ranks and NICs instead of one owner's), then also with the cross-host all-reduces on " ..
       "an NCCL stream of their own, running beside the NVLink reduces:")
  header({"goal", "fixed global batch", "fixed batch per GPU", "fixed global batch: would need",
          "fixed global batch, not planned: embedding split / and a second stream"})
  for _, g in ipairs(GOALS) do
    local wp = g.work == "paligemma" and works[1] or works[2]
    local w = wp.w
    local best = w.variants[w.combined]
    local net = g.rails == 1 and NETS[3] or NETS[4]
    local col = g.rails == 1 and 2 or 3
    local cells = {string.format("%s, 64 GPUs, %d rail%s: %dx", w.short, g.rails,
                                 g.rails > 1 and "s" or "", g.x)}
    for _, regime in ipairs(REGIMES) do
      local r = results[w.key][regime.name][best.name][col]
      cells[#cells + 1] = string.format("%.1fx, %s", r.speedup,
                                        r.speedup >= g.x and "met" or "missed")
    end
    local r = results[w.key][REGIMES[1].name][best.name][col]
    if r.speedup < g.x then
      local b = batch_needed(w, wp.plans, net, best.opts, g.x)
      local bw = bandwidth_needed(w, wp.plans, net, REGIMES[1], best.opts, g.x)
      cells[#cells + 1] = string.format(
        "%s, or %s at global %d", b and string.format("%d per GPU (global %d)", b, 64 * b)
                                     or "no batch up to 64x",
        bw and string.format("%.0f GB/s (%.1f x %d)", bw / GB, bw / net.busbw, net.busbw / GB)
           or "no bandwidth up to 100x", w.batch)
    else
      cells[#cells + 1] = "-"
    end
    local extra = {}
    for i = w.combined + 1, #w.variants do
      local rs = results[w.key][REGIMES[1].name][w.variants[i].name][col]
      extra[#extra + 1] = string.format("%.1fx", rs.speedup)
    end
    cells[#cells + 1] = #extra > 0 and table.concat(extra, " / ") or "-"
    row(cells)
  end
  print()
  return results
end

-- Which change buys what, in words, from the results of planned().
local function what_buys_what(works, results)
  local function r(wp, regime, v, col)  -- col: 1 = 8 GPUs, 2 = 64 on 1 rail, 3 = on 8 rails
    return results[wp.w.key][REGIMES[regime].name][wp.w.variants[v].name][col]
  end
  local function x(wp, regime, v) -- "A / B": the speed-up on one rail / eight rails
    return string.format("%.1fx / %.1fx", r(wp, regime, v, 2).speedup, r(wp, regime, v, 3).speedup)
  end
  local pg, sl = works[1], works[2]
  local hosts = NETS[3].gpus // NETS[2].gpus
  local share = 2 * (hosts - 1) / hosts
  local grad16 = 2 * pg.w.model:param_count()
  local one = step(pg.w, pg.plans[1], NETS[1], true).secs
  local today, keep = r(pg, 1, 1, 3), r(pg, 1, 4, 3)
  para(string.format(
    "What buys what. PaliGemma-3B at the fixed global batch (%d examples a GPU on 64), one " ..
    "rail / eight rails: today %s. (b) bf16 on the wire halves every byte: %s. (c) drops the " ..
    "remat broadcasts (%.1f of the %.1f GB each way a GPU) for every layer's bf16 value kept " ..
    "until its recomputation (%.1f GiB on the most loaded GPU instead of %.1f, of 72): %s. " ..
    "(a) moves the broadcasts and reduces onto " ..
    "NVLink and leaves %.2f GB a GPU (float32) on the network, against %.1f today: %s; on " ..
    "eight rails it loses to today's ring, because the embedding table's one owner " ..
    "all-reduces its %.1f GB gradient across hosts through its own NIC. (a) + (b): %s. " ..
    "All three: %s, short of both goals. On one rail no schedule can reach 40x at this " ..
    "batch: the %d hosts must exchange 2(h-1)/h of the bf16 gradient, %.1f GB, through %.0f " ..
    "GB/s, %.2f s, while 40x allows %.3f s a step (compute is %.3f s). On eight rails, " ..
    "splitting the embedding by rows would give %.1fx, and running the cross-host " ..
    "all-reduces on a second NCCL stream beside the NVLink reduces %.1fx, past 50x.",
    pg.w.batch // 64, x(pg, 1, 1), x(pg, 1, 3), today.t.by_what.remat / GB, today.t.total / GB,
    keep.mem / GiB, today.mem / GiB, x(pg, 1, 4),
    r(pg, 1, 2, 3).t.net_bytes / GB, today.t.net_bytes / GB, x(pg, 1, 2),
    4 * count(pg.w.model, {"^llm/embedder/"}) / GB, x(pg, 1, 5), x(pg, 1, pg.w.combined),
    hosts, share * grad16 / GB, NETS[3].busbw / GB, share * grad16 / NETS[3].busbw, one / 40,
    today.compute, r(pg, 1, pg.w.combined + 1, 3).speedup, r(pg, 1, pg.w.combined + 2, 3).speedup))
  para(string.format(
    "At a fixed batch per GPU (%d, global %d on 64) compute grows with the GPUs and hides the " ..
    "same traffic: today %s; (b) alone %s, (a) + (b) %s, all three %s: both goals met, and " ..
    "still %s if only 70%% of the overlapped communication hides.",
    pg.w.batch // 8, 64 * (pg.w.batch // 8), x(pg, 2, 1), x(pg, 2, 3), x(pg, 2, 5),
    x(pg, 2, pg.w.combined),
    (function()
      local best = pg.w.variants[pg.w.combined].opts
      return string.format("%.1fx / %.1fx",
                           run_variant(pg.w, pg.plans, NETS[3], REGIMES[2], best, 0.7).speedup,
                           run_variant(pg.w, pg.plans, NETS[4], REGIMES[2], best, 0.7).speedup)
    end)()))
  local sl_today = r(sl, 1, 1, 2)
  local sl_grad16 = 2 * sl.w.model:param_count()
  para(string.format(
    "SigLIP So400m/14 with replicate: (b) halves the all-reduce (%.2f GB each way a GPU " ..
    "instead of %.2f) and (d) runs it under the backward, all but the last buckets. At the " ..
    "fixed global batch: today %s, (b) %s, (d) %s, both %s. 40x on one rail is out of reach " ..
    "at %d examples a GPU: the bf16 all-reduce alone takes %.3f s at %.0f GB/s, and 40x " ..
    "allows %.3f s a step (compute is %.3f s). At a fixed batch per GPU (%d): today %s " ..
    "(one rail's 40x is met already), both %s.",
    r(sl, 1, 2, 2).t.total / GB, sl_today.t.total / GB, x(sl, 1, 1), x(sl, 1, 2), x(sl, 1, 3),
    x(sl, 1, sl.w.combined), sl.w.batch // 64,
    2 * 63 / 64 * sl_grad16 / NETS[3].busbw, NETS[3].busbw / GB,
    step(sl.w, sl.plans[1], NETS[1], true).secs / 40, sl_today.compute, sl.w.batch // 8,
    x(sl, 2, 1), x(sl, 2, sl.w.combined)))
  para("A caveat on (b): NCCL sums bf16 in bf16 along its ring (each hop rounds to bf16's 8-bit " ..
       "significand), so a reduce over 64 ranks rounds more than one over 8 then 8; the float32 " ..
       "accumulation on the owner covers micro-batches and the optimizer, not the ring.")
end

assumptions()
local pg = paligemma()
local sl = siglip()
local works = {{w = pg, plans = report(pg)}, {w = sl, plans = report(sl)}}
what_buys_what(works, planned(works))
