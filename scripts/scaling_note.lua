-- On-paper scaling of bvlua's data-parallel training on H100s: what each rank sends and
-- receives per step, what each rank holds in memory, and the step time these imply.
--   build/bvlua run scripts/scaling_note.lua
-- No weights are allocated: parameter shapes come from bvlua's model definitions
-- (m:param_shapes()), the owners from bv.sharding's own planner, the optimizer state's shapes
-- from bv.optim (an optimizer that owns nothing keeps only shapes, though building it zeroes
-- each state tensor once on the CPU: most of this script's 10-20 s). It prints markdown (the
-- tables of scripts/scaling_note.md).
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
  {gpus = 64, where = "8 hosts, 1 rail", busbw = 45 * GB, alpha = 100e-6},
  {gpus = 64, where = "8 hosts, 8 rails", busbw = 300 * GB, alpha = 100e-6},
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
local function step_collectives(S, model, remat, micro)
  local calls = {}
  local function add(kind, bytes, what, times)
    for _ = 1, times do calls[#calls + 1] = {kind = kind, bytes = bytes, what = what} end
  end
  if S.world == 1 then return calls end  -- one process: no collectives at all
  local small = {4}  -- the loss (float32) goes first, with the replicated gradients
  for _, p in ipairs(model:param_shapes()) do  -- sorted by name, as sharding.lua sends them
    local o, b = S.owner[p.name], bytes_of(p)
    if S.kind[p.name] == "fsdp" and type(o) == "table" then
      for _ = 1, #o do  -- a layer: fetched by every micro-batch, again by its remat
        add("broadcast", b / #o, "forward", micro)
        if remat(p.name) then add("broadcast", b / #o, "remat", micro) end
        add("reduce", b / #o, "backward", micro)
      end
    elseif S.kind[p.name] == "fsdp" then  -- whole: fetched once, kept until the step ends
      add("broadcast", b, "forward", 1)
      add("reduce", b, "backward", micro)
    else
      small[#small + 1] = b
    end
  end
  for _, b in ipairs(buckets(small)) do add("all_reduce", b, "replicated", 1) end
  if S.sharded then add("all_reduce", 8, "scalars", 1) end  -- the clipping norm's sum over ranks
  return calls
end

-- Per-rank bytes each way (ring: a broadcast or reduce passes S through every rank but one,
-- an all-reduce 2(n-1)/n * S) and the seconds at the network's bus bandwidth, by `what`.
local function traffic(calls, net)
  local n = net.gpus
  local t = {by_what = {}, secs_of = {}, total = 0, secs = 0, calls = #calls}
  for _, c in ipairs(calls) do
    local factor = c.kind == "all_reduce" and 2 * (n - 1) / n or (n - 1) / n
    local wire = c.kind == "all_reduce" and 2 * (n - 1) / n or 1  -- nccl-tests' busbw factors
    local secs = wire * c.bytes / net.busbw + net.alpha
    t.by_what[c.what] = (t.by_what[c.what] or 0) + factor * c.bytes
    t.secs_of[c.what] = (t.secs_of[c.what] or 0) + secs
    t.total, t.secs = t.total + factor * c.bytes, t.secs + secs
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
local function memory(w, S, batch, remat)
  local params, state, mean = held_state(S, w.model, w.opt)
  local acts = batch * w.activations(remat)
  local weights = w.weights_in_flight(S.world, remat)
  return {params = params, mean = mean, grads = params, state = state, weights = weights,
          acts = acts, total = 2 * params + state + weights + acts}
end

-- Micro-batches (accum_steps, a power of two) for the per-GPU batch to fit the HBM budget.
local function micro_batches(w, S, batch, remat)
  local k = 1
  while k < batch and memory(w, S, batch / k, remat).total > HBM_BUDGET do k = k * 2 end
  if memory(w, S, batch / k, remat).total > HBM_BUDGET then return nil end
  return k
end

local function compute_secs(w, batch, remat)
  return batch * w.flops(remat) / (MFU * PEAK_FLOPS)
end

-- One step on `net` with or without remat: the traffic, the compute seconds, the step's seconds
-- with the broadcasts overlapping computation (prefetch) and without (a first step).
local function step(w, S, net, remat)
  local batch = w.batch // net.gpus
  local micro = micro_batches(w, S, batch, remat) or 1
  local t = {by_what = {}, secs_of = {}, total = 0, secs = 0, calls = 0}
  if net.gpus > 1 then
    local remat_of = remat and w.remat_of or function() return false end
    t = traffic(step_collectives(S, w.model, remat_of, micro), net)
  end
  local compute = compute_secs(w, batch, remat)
  local forward = batch * w.forward_flops / (MFU * PEAK_FLOPS)
  local function comm(what) return t.secs_of[what] or 0 end
  -- The backward's broadcasts (remat) and gradient reduces share NCCL's one stream and overlap
  -- the backward's compute (the reduces are started without waiting: fsdp.h's reduce_grad).
  local secs = math.max(forward, comm("forward"))
               + math.max(compute - forward, comm("remat") + comm("backward"))
               + comm("replicated") + comm("scalars")
  return {net = net, t = t, compute = compute, secs = secs, serial = compute + t.secs}
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
  print("#### " .. w.title .. "\n")
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
  local whole = count(model, {"^llm/embedder/", "^img/head/kernel$"})
  local layer = math.max(vit_layers / v.L, llm_layers / g.L)
  local all_layers = vit_layers + llm_layers
  local gating = shape_of(model, "llm/layers/mlp/gating_einsum")  -- [L, 2, D, F] float32
  local prefetch = 256 * 2 ^ 20 + 4 * numel(gating) / g.L
  function w.weights_in_flight(gpus, remat)
    if gpus == 1 then return remat and 2 * (whole + layer) or 2 * (whole + all_layers) end
    return 14 * whole + (remat and 14 * layer or 2 * all_layers + 12 * layer) + prefetch
  end
  function w.remat_of(name) return name:find("^img/") or name:find("^llm/layers/") end
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
  function w.remat_of() return false end
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

assumptions()
report(paligemma())
report(siglip())
