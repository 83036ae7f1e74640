-- bv.models: models by big_vision's names (runtime/models/: vit.cpp, ppp/gemma.cpp, ...).
--
--   local m = bv.models.build("vit", {variant = "B/16", num_classes = 1000})
--   m:param_shapes()              -- {{name=, shape=, dtype=, scan=}, ...} sorted, nothing allocated
--   local params = m:init(0)      -- name -> tensor, big_vision's names and shapes
--   local logits, out = m:apply(params, images, {train = false})  -- images: NHWC float
--   two_towers: m:apply(params, images, texts) -> logits; (params, images) -> zimg;
--   (params, nil, texts) -> ztxt (big_vision's None: only the other tower runs)
--   local loss, grads = m:loss_and_grads(params, batch, {loss = "softmax_xent"})
-- The model is built once into a native handle (m.native: the registry entry and the parsed
-- config); every call below goes through it.
local json = require "bv.json"
local log = require "bv.log"

local M = {}

-- A model call's results, after printing as NOTEs the lines the native side left for the log
-- (bv._take_notes: on a GPU, which attention kernel runs, once per kind of call).
local function noted(...)
  local notes = bv._take_notes()
  if notes then
    for _, line in ipairs(notes) do log.note("%s", line) end
  end
  return ...
end

local Model = {}
Model.__index = Model

function M.build(name, cfg)
  if type(name) ~= "string" then error("models.build: expected a model name", 2) end
  cfg = cfg or {}
  local native = bv._models.build(name, json.encode(cfg, {what = "model config"}))
  return setmetatable({name = name, cfg = cfg, native = native,
                       specs = bv._models.param_specs(native)}, Model)
end

function M.names() return bv._models.names() end

function M.doc(name) return bv._models.doc(name) end

-- The config keys model `name` reads, as its C++ file declares them: a list of {name =, type =,
-- default = JSON text ("null": None), doc =, model_key = (a part's table: the key naming the
-- part's model) or nil} (bv.config_keys.model makes them a scope).
function M.config_keys(name) return bv._models.config_keys(name) end

-- Every parameter's name, shape and dtype, sorted by name (no memory is allocated).
function Model:param_shapes() return self.specs end

-- The number of parameters (elements), from the shapes.
function Model:param_count()
  local total = 0
  for _, s in ipairs(self.specs) do
    local n = 1
    for _, d in ipairs(s.shape) do n = n * d end
    total = total + n
  end
  return total
end

function Model:init(seed)
  return bv._models.init(self.native, seed or 0)
end

-- Puts parameters in the memory layout the model computes fastest with (BiT: conv kernels in
-- OIHW memory behind their HWIO shape). Values, names and shapes are unchanged. init already
-- does it; call it after replacing parameters (resume, model_init). Returns params.
function Model:relayout(params)
  bv._models.relayout(self.native, params)
  return params
end

-- m:apply(params, input... [, {train = bool}]) -> output, table of intermediate outputs
function Model:apply(params, ...)
  local args = table.pack(...)
  local opts = {}
  if args.n > 0 and type(args[args.n]) == "table" and not bv.is_tensor(args[args.n]) then
    opts = args[args.n]
    args.n = args.n - 1
  end
  return noted(bv._models.apply(self.native, params, opts.train or false,
                                table.unpack(args, 1, args.n)))
end

local PALIGEMMA = "proj.paligemma.paligemma"
local TWO_TOWERS = "proj.image_text.two_towers"

-- batch[key] is a tensor, else an error that lists the batch's keys (a lookup per step).
local function need(batch, key, wants, fix)
  if not bv.is_tensor(batch[key]) then
    bv.data.require_key(batch, key, {who = "loss_and_grads", wants = wants, fix = fix})
  end
end

-- Why a model has no classification step (a message), or nil when it has one. The two-tower
-- model's image-only call returns zimg, which is no classifier's logits.
function M.classification_refusal(name)
  if name ~= TWO_TOWERS then return nil end
  return TWO_TOWERS .. " has no classification step (big_vision trains it with the "
    .. "contrastive trainer proj/image_text/siglip, which bvlua does not have); train its "
    .. "image tower as a vit from 'FILE.npz:img'"
end

-- One training step's forward, loss and backward (runtime/train/step.cpp), the batch from the
-- pp: classifiers take {image =, labels =} (one-hot or multi-hot), PaliGemma takes {image =,
-- text =, mask_ar =, mask_loss =} (the prefix-LM loss). opts = {loss = "sigmoid_xent" |
-- "softmax_xent" (classifiers), label_smoothing = 0 (PaliGemma), accum_steps = 1,
-- mixup_p = 0 and rng (classifiers), autocast = "bfloat16" | nil (float16 is refused: it
-- needs loss scaling)}.
-- Returns the batch's mean loss, a scalar tensor left on the parameters' device (loss:item()
-- reads it: a host sync, which the trainers do at log steps only), and name -> gradient.
function Model:loss_and_grads(params, batch, opts)
  opts = opts or {}
  if type(batch) ~= "table" then
    error("loss_and_grads: the batch must be a table with an image tensor", 2)
  end
  local refused = M.classification_refusal(self.name)
  if refused then error("loss_and_grads: " .. refused, 2) end
  need(batch, "image", "the model", 'keep "image" in the pp')
  if self.name == PALIGEMMA then
    for _, key in ipairs({"text", "mask_ar", "mask_loss"}) do
      need(batch, key, "PaliGemma's loss", "use bv.paligemma.combine_and_keep_train in the pp")
    end
    return noted(bv._models.lm_loss_and_grads(self.native, params, batch.image, batch.text,
                                              batch.mask_ar, batch.mask_loss, opts))
  end
  need(batch, "labels", "the loss",
       'make one-hot labels in the pp: onehot(num_classes, key="label", key_result="labels")')
  return noted(bv._models.loss_and_grads(self.native, params, batch.image, batch.labels, opts))
end

-- Decoding with a KV cache (Gemma, PaliGemma): prefill runs the prompt once and keeps every
-- layer's keys and values; extend then costs one token per row.
--   ppp.gemma:
--     local logits, cache = m:prefill(params, tokens, {max_len = 64, input_mask = mask})
--     local next_logits = m:extend(params, cache, next_tokens)  -- next_tokens [B] -> [B, vocab]
--   proj.paligemma.paligemma (the prompt may end in padding, input_mask 0):
--     local logits, cache = m:prefill(params, {image =, text =, mask_ar =, input_mask =},
--                                     {max_decode_len = 16})      -- logits [B, vocab]
function Model:prefill(params, tokens, opts)
  opts = opts or {}
  if self.name == PALIGEMMA then
    local b = tokens
    if type(b) ~= "table" or not bv.is_tensor(b.image) or not bv.is_tensor(b.text) then
      error("prefill: PaliGemma takes a batch table with image and text tensors", 2)
    end
    local ones = bv.ones(b.text:shape(), "int64"):to(b.text:device())
    return noted(bv._models.paligemma_prefill(self.native, params, b.image, b.text,
                                              b.mask_ar or ones, b.input_mask or ones,
                                              opts.max_decode_len or 0))
  end
  if self.name ~= "ppp.gemma" then error("prefill: " .. self.name .. " does not decode", 2) end
  return noted(bv._models.gemma_prefill(self.native, params, tokens,
                                        opts.max_len or tokens:size(2) + 32, opts.input_mask))
end

function Model:extend(params, cache, tokens)
  if self.name == PALIGEMMA then
    return noted(bv._models.paligemma_extend(self.native, params, cache, tokens))
  end
  if self.name ~= "ppp.gemma" then error("extend: " .. self.name .. " does not decode", 2) end
  return noted(bv._models.gemma_extend(self.native, params, cache, tokens))
end

-- One token per row from logits [B, V] by a big_vision sampler spec ("greedy",
-- "temperature(0.7)", "nucleus(0.9)"), drawing from `rng`; returns tokens [B] and their
-- log-probabilities [B]. tok_mask: token ids [K] never to sample.
function M.sample(logits, sampler, rng, tok_mask)
  return bv._models.sample(logits, sampler or "greedy", rng, tok_mask)
end

-- ---------------------------------------------------------------------------------------------
-- model_init: starting from a checkpoint, as big_vision's load functions do.

-- PaliGemma's checkpoints sit behind a licence wall: users download them into a folder named
-- by BV_GEMMA_DIR, and configs refer to them by big_vision's vanity names.
local function resolve_vanity(name)
  if name:match("^pt_%w+") and not name:find("/") and not name:find("%.npz$") then
    local dir = os.getenv("BV_GEMMA_DIR")
    if not dir then
      error(string.format("model_init '%s' is a vanity name for $BV_GEMMA_DIR/%s.npz, but "
        .. "BV_GEMMA_DIR is not set", name, name), 0)
    end
    return dir .. "/" .. name .. ".npz"
  end
  return name
end

-- "path.npz" or "path.npz:sub/tree" -> path, prefix ("" for the whole file).
local function split_init(init)
  local path, sub = init:match("^(.*%.npz):([^/:][^:]*)$")
  if path then return path, sub .. "/" end
  return resolve_vanity(init), ""
end

-- The file that model_init `init` reads ("path.npz", "path.npz:sub/tree", a vanity name such as
-- pt_224 under $BV_GEMMA_DIR); an error when a vanity name has no BV_GEMMA_DIR.
function M.init_file(init)
  return (split_init(init))
end

-- big_vision's pyloop_to_scan / scan_to_pyloop for ViT's "Transformer/encoderblock" tree, so a
-- checkpoint of either form loads into a model of either form.
local function convert_scan(loaded, wanted)
  local want_scan = false
  for name in pairs(wanted) do
    if name:find("^Transformer/encoderblock/") then want_scan = true end
  end
  local out = {}
  for name, t in pairs(loaded) do
    local i, rest = name:match("^Transformer/encoderblock_(%d+)/(.*)$")
    local srest = name:match("^Transformer/encoderblock/(.*)$")
    if want_scan and i then
      local key = "Transformer/encoderblock/" .. rest
      out[key] = out[key] or {}
      out[key][tonumber(i) + 1] = t
    elseif not want_scan and srest then
      for layer = 1, t:size(1) do out["Transformer/encoderblock_" .. (layer - 1) .. "/" .. srest] = t[layer] end
    else
      out[name] = t
    end
  end
  for name, v in pairs(out) do
    if type(v) == "table" then out[name] = bv.stack(v) end
  end
  return out
end

local function matches_any(name, regexes)
  for _, re in ipairs(regexes or {}) do
    if bv.fullmatch(re, name) then return true end
  end
  return false
end

-- big_vision's {img = init, llm = init} form: each part of the model (the parameters under
-- "img/", "llm/") from its own file; dont_load patterns match names inside a part ("head/.*").
-- Parts not named stay as they are.
function Model:_load_parts(params, inits, opts)
  local parts = {}
  for part, init in pairs(inits) do
    if type(part) ~= "string" or type(init) ~= "string" then
      error("model_init: a table must map part names to inits, e.g. {img = 'x.npz:img'}", 0)
    end
    parts[#parts + 1] = part
  end
  table.sort(parts)
  local out = {}
  for name, t in pairs(params) do out[name] = t end
  local report = {loaded = {}, missing = {}, unused = {}, resampled = {}}
  for _, part in ipairs(parts) do
    local prefix, sub = part .. "/", {}
    for name, t in pairs(params) do
      if name:sub(1, #prefix) == prefix then sub[name:sub(#prefix + 1)] = t end
    end
    if next(sub) == nil then
      error(string.format("model_init: the model has no parameters under '%s'", prefix), 0)
    end
    local got, r = self:load(sub, inits[part], opts)
    for name, t in pairs(got) do out[prefix .. name] = t end
    for k, list in pairs(r) do
      for _, name in ipairs(list) do table.insert(report[k], prefix .. name) end
    end
  end
  for _, k in ipairs({"loaded", "missing", "unused", "resampled"}) do table.sort(report[k]) end
  return out, report
end

-- Nothing of a whole checkpoint matched the model: when the model's names sit under one of the
-- file's top-level folders (a two-tower SigLIP file's img/ and txt/), name the ":img" to use.
local function suggest_subtree(init, loaded, params)
  local folders = {}
  for name in pairs(loaded) do
    local top = name:match("^([^/]+)/")
    if top then folders[top] = (folders[top] or 0) end
  end
  local best, best_n, total = nil, 0, 0
  for _ in pairs(params) do total = total + 1 end
  for top in pairs(folders) do
    local n = 0
    for name in pairs(params) do
      if loaded[top .. "/" .. name] then n = n + 1 end
    end
    if n > best_n then best, best_n = top, n end
  end
  if not best then return end
  local names = {}
  for top in pairs(folders) do names[#names + 1] = top .. "/" end
  table.sort(names)
  error(string.format("model_init '%s': none of the model's parameters is in the file, whose "
    .. "names sit under %s; %d of its %d are under '%s/': use '%s:%s'", init,
    table.concat(names, ", "), best_n, total, best, init, best), 0)
end

-- Loads `init` (a path, "path.npz:subtree", or a vanity name) over `params` (the model's fresh
-- parameters, which give the names and shapes wanted). opts: dont_load = {regex, ...} keeps
-- those from `params`; allow_missing / allow_unused turn the report into a warning.
-- The loaded values are copied into params' own tensors, in place (on their device, in their
-- dtype; each host copy is released once copied). Returns the parameters and a report
-- {loaded=, missing=, unused=, resampled=}.
function Model:load(params, init, opts)
  opts = opts or {}
  if type(init) == "table" then return self:_load_parts(params, init, opts) end
  local path, prefix = split_init(init)
  if not bv.fs.exists(path) then
    error(string.format("model_init '%s': no such file %s%s", init, path,
      path:sub(1, 1) == "/" and "" or " (relative to the current directory)"), 0)
  end
  local loaded = bv.ckpt.load_npz(path, function(name) return name:sub(1, #prefix) == prefix end)
  if prefix ~= "" then
    local sub = {}
    for name, t in pairs(loaded) do sub[name:sub(#prefix + 1)] = t end
    loaded = sub
    if next(loaded) == nil then
      error(string.format("model_init '%s': no parameters under '%s' in %s", init, prefix, path), 0)
    end
  end
  loaded = convert_scan(loaded, params)
  local out, report = {}, {loaded = {}, missing = {}, unused = {}, resampled = {}}
  local names = {}
  for name in pairs(params) do names[#names + 1] = name end
  table.sort(names)  -- errors name the same parameter on every run
  for _, name in ipairs(names) do
    local fresh, t = params[name], loaded[name]
    if matches_any(name, opts.dont_load) or t == nil then
      out[name] = fresh
      if t == nil and not matches_any(name, opts.dont_load) then report.missing[#report.missing + 1] = name end
    else
      local want, got = fresh:shape(), t:shape()
      local same = #want == #got
      for d = 1, #want do same = same and want[d] == got[d] end
      if not same and name == "pos_embedding" then
        t = bv._models.resample_posemb(t, want[2])
        report.resampled[#report.resampled + 1] = name
      elseif not same then
        error(string.format("model_init '%s': '%s' has shape {%s} in the checkpoint but the model "
          .. "wants {%s}", init, name, table.concat(got, ", "), table.concat(want, ", ")), 0)
      end
      -- Into the model's own tensor, on its device and in its dtype and layout: the loaded
      -- host copy goes as soon as it is copied.
      fresh:copy_(t)
      out[name] = fresh
      t:release()
      report.loaded[#report.loaded + 1] = name
    end
  end
  for name in pairs(loaded) do
    if params[name] == nil then report.unused[#report.unused + 1] = name end
  end
  for _, k in ipairs({"loaded", "missing", "unused", "resampled"}) do table.sort(report[k]) end
  if prefix == "" and #report.loaded == 0 then suggest_subtree(init, loaded, params) end
  local function check(list, what, allowed)
    if #list > 0 and not allowed then
      error(string.format("model_init '%s': %d parameter%s %s: %s%s", init, #list,
        #list == 1 and "" or "s", what, table.concat(list, ", ", 1, math.min(#list, 10)),
        #list > 10 and ", ..." or ""), 0)
    end
  end
  check(report.missing, "missing from the checkpoint (allow with allow_missing, or list them in "
    .. "dont_load)", opts.allow_missing)
  check(report.unused, "in the checkpoint not used by the model (allow with allow_unused)",
        opts.allow_unused)
  return out, report
end

return M
