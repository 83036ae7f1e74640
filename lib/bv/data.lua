-- bv.data: big_vision's input pipelines from a config's `input` section.
--
--   local it, total = bv.data.training(config.input, {seed = 0, config = "configs/x.lua:arg"})
--   local batch = it:next()      -- key -> stacked tensor (strings: lists)
--   it:position()                -- save it; {position = p} resumes at the same example
--   it:skipped()                 -- examples dropped by skip_errors (bad JSON-L lines too)
--   it:skipped_by_source()       -- {[fname or mixture name] = count}; it:last_skipped_error()
--
-- The work happens in native worker threads (bindings/data.cpp, runtime/data/pipeline.cpp),
-- each with its own Lua state. opts.config ("path.lua[:args]"): each worker runs that config's
-- register_pp_ops (bv.config.register_pp_ops; not get_config), so the config's own ops exist
-- there; opts.requires: modules each worker requires (ops registered by a module);
-- opts.pin_memory: batches stacked in pinned host memory, for a GPU (the trainers set it when
-- they train on one; see bv.to_device_async). prefetch_to / on_device: evaluation batches
-- copied to the device ahead.
--
-- Every input bounded: images over input.max_pixels (height * width, default PIL's
-- MAX_IMAGE_PIXELS) are refused from their header, before decoding, as bad examples
-- (skip_errors skips and counts them); a batch size whose buffers cannot fit in the memory
-- available is refused at the first example, naming the key (opts.memory_bytes: the memory to
-- fit in, for tests).
local tfds = require "bv.tfds"

local M = {}

-- PIL's Image.MAX_IMAGE_PIXELS (1024 * 1024 * 1024 // 4 // 3): input.max_pixels's default.
M.DEFAULT_MAX_PIXELS = 89478485

-- Keys that belong to one dataset of a mixture (input[name]), never to the top of `input`.
local PER_PIPELINE = {"shuffle_buffer_size", "cache_raw", "num_parallel_calls", "pre_filter_fn",
                      "post_filter_fn", "pack", "skip_errors"}

-- A source from a big_vision data config: {name = "bv:jsonl", fname = ..., fopen_keys = ...},
-- or a TFDS dataset {name = "NAME[/CONFIG][:VERSION]", split = "train[:99%]", data_dir = ...}
-- (bv.tfds: read as bv:tfrecord). A file it names that does not exist is an error
-- (M.check_path; opts.where: "input.data"). opts.skip_errors: a JSON-L line that is not a valid
-- example is kept as one that fails in the pipeline (skipped and counted there, see
-- it:skipped()) instead of failing here; src:bad_lines() counts them.
-- Returns the source and the number of examples in the whole split (for epochs). A TFDS
-- source with opts.world > 1 holds process opts.rank's part only (tfds.even_splits, as
-- big_vision's datasets/tfds.py): M.is_process_part(data_cfg) says so.
function M.source(data_cfg, opts)
  if type(data_cfg) ~= "table" or type(data_cfg.name) ~= "string" then
    error("data: a data config needs a 'name' (e.g. name = \"bv:jsonl\")", 2)
  end
  local src_opts = {skip_errors = opts and opts.skip_errors and true or false}
  if tfds.is_tfds(data_cfg) then
    local cfg, _, total = M.tfds_config(data_cfg, opts)
    return bv._data.source(cfg, src_opts), total
  end
  M.check_path(data_cfg, opts and opts.where)
  local src = bv._data.source(data_cfg, src_opts)
  return src, src:size()
end

-- Whether M.source gives this data config's process part (TFDS) rather than the whole split
-- that the pipeline splits across processes (bv:jsonl, bv:imagefolder).
M.is_process_part = tfds.is_tfds

-- A TFDS data config's bv:tfrecord source config, examples in this process's part, and in the
-- whole split; errors start with opts.where ("evals.val.data").
function M.tfds_config(data_cfg, opts)
  local ok, cfg, n, total = pcall(tfds.source_config, data_cfg,
                                  {rank = opts and opts.rank, world = opts and opts.world})
  if not ok then
    error(opts and opts.where and (opts.where .. ": " .. tostring(cfg)) or cfg, 0)
  end
  return cfg, n, total
end

-- Fails when a data config's file (bv:jsonl's fname, bv:imagefolder's root) does not exist;
-- `where` names the config ("input.data", "evals.val.data"). A relative path is relative to the
-- current directory, which the message names; the lines data set's files say how to draw them
-- (bv.lines). Trainers check their evaluators' data at the start, not at the first evaluation.
function M.check_path(data_cfg, where)
  if type(data_cfg) ~= "table" then return end
  if tfds.is_tfds(data_cfg) then  -- the dataset, its version and the split's arithmetic
    M.tfds_config(data_cfg, {where = where})
    return
  end
  local key = ({["bv:jsonl"] = "fname", ["bv:imagefolder"] = "root"})[data_cfg.name]
  local path = key and data_cfg[key]
  if type(path) ~= "string" or path == "" or bv.fs.exists(path) then return end
  local msg = string.format("%s: no such %s '%s' (%s)", data_cfg.name,
                            key == "root" and "directory" or "file", path,
                            where and (where .. "." .. key) or key)
  if path:sub(1, 1) ~= "/" then
    msg = msg .. string.format(": a relative path is relative to the current directory, %s; "
      .. "run bvlua from the directory it is relative to, or give an absolute path", bv.fs.cwd())
  end
  local make = require("bv.lines").how_to_make(path)
  if make then msg = msg .. ". To draw the lines data set there: " .. make end
  error(msg, 0)
end

local function common(opts)
  return {
    seed = opts.seed or 0,
    workers = opts.workers or bv.threads(),
    rank = opts.rank or 0,
    world = opts.world or 1,
    config = opts.config,
    requires = opts.requires,
    position = opts.position,
    pin_memory = opts.pin_memory,
    memory_bytes = opts.memory_bytes,
  }
end

-- With several processes, sources that hold this process's part already (TFDS's even splits)
-- must not be split again by the pipeline (it splits every source across spec.world): the
-- pipeline then sees one process, with this rank mixed into the seed so that processes still
-- shuffle and augment differently. A mixture of both kinds cannot be split both ways.
local function own_parts(spec, parts, where)
  if spec.world <= 1 then return end
  local own, other = 0, 0
  for _, p in ipairs(parts) do
    if p then own = own + 1 else other = other + 1 end
  end
  if own == 0 then return end
  if other > 0 then
    error(string.format("data: %s mixes TFDS datasets (each process reads its tfds.even_splits "
      .. "part) with bv: sources (split across processes by the pipeline), which %d processes "
      .. "cannot read together; use one kind of source", where, spec.world), 0)
  end
  spec.seed = spec.seed ~ (spec.rank * 0x9E3779B97F4A7C15)
  spec.rank, spec.world = 0, 1
end

-- The decoders' cap from `value` (input.max_pixels; nil: the default), named `key`.
local function max_pixels(spec, value, key)
  if value == nil or value == bv.null then value = M.DEFAULT_MAX_PIXELS end
  if math.type(value) ~= "integer" or value < 1 then
    error(string.format("data: %s must be a positive integer (pixels: height * width), got %s",
                        key, tostring(value)), 0)
  end
  spec.max_pixels, spec.max_pixels_key = value, key
end

-- Returns the training iterator (shuffled, repeated forever, batches of batch_size / world
-- with the remainder dropped) and the number of examples in the whole split (for epochs).
function M.training(input, opts)
  opts = opts or {}
  if type(input) ~= "table" or type(input.data) ~= "table" then
    error("data.training: expected the config's input section with a 'data' table", 2)
  end
  local spec = common(opts)
  local sources, pps, weights, src_names, total = {}, {}, {}, {}, 0
  local parts = {}  -- whether each source is this process's part already (TFDS)
  local function source(data_cfg, skip_errors, where)
    parts[#parts + 1] = M.is_process_part(data_cfg)
    return M.source(data_cfg, {skip_errors = skip_errors, where = where, rank = spec.rank,
                               world = spec.world})
  end
  if type(input.data.name) == "string" then
    local src, n = source(input.data, input.skip_errors, "input.data")
    sources[1], pps[1], weights[1] = src, input.pp or "", 1
    src_names[1] = input.data.fname or input.data.root or input.data.name
    total = n
    spec.shuffle_buffer_size = input.shuffle_buffer_size
    spec.cache_raw = input.cache_raw
    spec.skip_errors = input.skip_errors
  else
    for _, k in ipairs(PER_PIPELINE) do
      if input[k] ~= nil then
        error(string.format("data: input.%s belongs to each dataset of a mixture "
          .. "(input.<name>.%s)", k, k), 2)
      end
    end
    local names = {}
    for name in pairs(input.data) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
      local w = input.data[name]
      local sub = input[name]
      if type(sub) ~= "table" then error("data: mixture entry '" .. name .. "' has no input." .. name, 2) end
      if w > 0 then
        local src, n = source(sub.data, sub.skip_errors, "input." .. name .. ".data")
        sources[#sources + 1], pps[#pps + 1], weights[#weights + 1] = src, sub.pp or "", w
        src_names[#src_names + 1] = name
        total = total + n
        -- One setting for the whole mixture: the first dataset's (they are usually equal).
        spec.shuffle_buffer_size = spec.shuffle_buffer_size or sub.shuffle_buffer_size
        spec.skip_errors = spec.skip_errors or sub.skip_errors
        spec.cache_raw = spec.cache_raw or sub.cache_raw
      end
    end
  end
  local bs = input.batch_size
  if math.type(bs) ~= "integer" or bs < 1 then error("data: input.batch_size must be a positive integer", 2) end
  if bs % spec.world ~= 0 then
    error(string.format("data: batch_size %d is not divisible by %d processes", bs, spec.world), 2)
  end
  spec.sources, spec.pp, spec.weights, spec.names = sources, pps, weights, src_names
  spec.batch_size = bs // spec.world
  own_parts(spec, parts, "input.data")
  spec.batch_size_key = "input.batch_size"
  max_pixels(spec, input.max_pixels, "input.max_pixels")
  spec.shuffle, spec["repeat"] = true, true
  spec.prefetch = input.prefetch or 2
  return bv._data.pipeline(spec), total
end

-- The evaluation iterator: every example of this process's part exactly once, in order; the
-- last batch is padded with zeros and the bool key `_mask` marks the real rows.
-- cfg = {data = {...}, pp = "...", batch_size = N, max_pixels = M (default as input's)};
-- opts.batch_size_key and opts.max_pixels_key: the config keys the errors name.
function M.inference(cfg, opts)
  opts = opts or {}
  local spec = common(opts)
  local src, total = M.source(cfg.data, {rank = spec.rank, world = spec.world, where = opts.where})
  spec.sources, spec.pp, spec.weights = {src}, {cfg.pp or ""}, {1}
  local bs = cfg.batch_size
  if math.type(bs) ~= "integer" or bs < 1 then error("data: batch_size must be a positive integer", 2) end
  spec.batch_size = math.max(1, bs // spec.world)
  own_parts(spec, {M.is_process_part(cfg.data)}, opts.where or "data")
  spec.batch_size_key = opts.batch_size_key or "batch_size"
  max_pixels(spec, cfg.max_pixels, opts.max_pixels_key or "max_pixels")
  spec.shuffle, spec["repeat"], spec.pad_last_batch = false, false, true
  spec.cache_raw = cfg.cache_raw
  return bv._data.pipeline(spec), total
end

-- A batch's keys as "{image, label}", sorted, without the pipeline's own (_mask).
function M.keys_str(batch)
  local keys = {}
  for k in pairs(batch) do
    if type(k) ~= "string" or k:sub(1, 1) ~= "_" then keys[#keys + 1] = tostring(k) end
  end
  table.sort(keys)
  return "{" .. table.concat(keys, ", ") .. "}"
end

-- Fails unless batch[key] is a tensor, with a message that names the batch's keys and who wants
-- the missing one. opts = {who = "classification trainer", batch = "the training batch" (default
-- "the batch"), wants = "the loss", fix = how to make the key in the pp}:
--   classification trainer: the training batch has keys {image, label}, but the loss wants
--   'labels': make one-hot labels in the train pp: onehot(3, key="label", key_result="labels")
-- Trainers call it on their first batch, so that a step does no extra work.
function M.require_key(batch, key, opts)
  local v = batch[key]
  if bv.is_tensor(v) then return v end
  local what = opts.batch or "the batch"
  local msg
  if v == nil then
    msg = string.format("%s: %s has keys %s, but %s wants '%s'", opts.who, what, M.keys_str(batch),
                        opts.wants, key)
  else
    msg = string.format("%s: %s wants '%s' as a tensor, but %s's '%s' is a %s", opts.who,
                        opts.wants, key, what, key, type(v) == "table" and "list" or type(v))
  end
  error(opts.fix and (msg .. ": " .. opts.fix) or msg, 0)
end

-- Batches bound for a device, copied ahead (big_vision prefetches to the devices): an iterator
-- over `it`'s batches, still on the host, that starts copying each next batch to `device` on a
-- side stream (bv.to_device_async) when it hands out the current one. M.on_device(batch) then
-- gives the batch's device copy, waiting only for what is not there yet. Evaluators read their
-- labels on the host and hand the batch to a predict function that runs on the device
-- (bv.trainers.utils wraps it in on_device).
local ahead = setmetatable({}, {__mode = "k"})  -- host batch -> {copy =, device =, on =}

function M.prefetch_to(it, device)
  local function start(batch)
    if batch then ahead[batch] = {copy = bv.to_device_async(batch, device), on = device} end
    return batch
  end
  local nxt = start(it:next())
  return setmetatable({}, {
    __index = {next = function()
      local current = nxt
      if current ~= nil then nxt = start(it:next()) end
      return current
    end},
    __close = function() getmetatable(it).__close(it) end,
  })
end

-- `batch` on `device`: its prefetched copy when M.prefetch_to started one, else a copy made
-- now. Keys the caller has removed from the host batch since (an evaluator's labels) are left
-- out; other values ride along.
function M.on_device(batch, device)
  local entry = ahead[batch]
  if not entry or entry.on ~= device then
    entry = {copy = bv.to_device_async(batch, device), on = device}
    ahead[batch] = entry
  end
  entry.device = entry.device or entry.copy:wait()
  local out = {}
  for k in pairs(batch) do out[k] = entry.device[k] end
  return out
end

return M
