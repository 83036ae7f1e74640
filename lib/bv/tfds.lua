-- bv.tfds: TFDS datasets where they already live, read natively (no TensorFlow): a big_vision
-- data config {name = "NAME[/CONFIG][:VERSION]", split = "train[:99%]", data_dir = ...} turned
-- into the bv:tfrecord source's shard list.
--
--   local tfds = require "bv.tfds"
--   tfds.is_tfds(data_cfg)                 -- a TFDS name (not "bv:...")
--   local ds = tfds.resolve(data_cfg)      -- {name, config, version, dir, file_format, splits,
--                                          --  features, data_dir}
--   tfds.source_config(data_cfg, {rank =, world =})
--     --> {name = "bv:tfrecord", shards = {{file =, skip =, take =}...}}, examples in the part,
--         examples in the whole split
--   tfds.num_examples(data_cfg)            -- the split's examples (for total_epochs)
--   tfds.label_names(data_cfg, "label")    -- a ClassLabel feature's names, in class order
--   tfds.features(data_cfg)                -- {name = {kind = "image"|"class_label"|..., ...}}
--
-- Where: data_cfg.data_dir, else $TFDS_DATA_DIR, else ~/tensorflow_datasets; then NAME/[CONFIG/]
-- VERSION, the newest prepared version (semantic order) unless the name gives one (wildcards as
-- TFDS's: 1.*.*). Each process reads its part of the split as tfds.even_splits(split, world)
-- [rank] (big_vision's datasets/tfds.py), in the order TFDS reads it with shuffle_files=False.
local json = require "bv.json"
local splits_lib = require "bv.tfds_splits"
local suggest = require "bv.suggest"

local M = {}

-- TFDS's default file name template (core/naming.py).
M.DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"

function M.is_tfds(data_cfg)
  return type(data_cfg) == "table" and type(data_cfg.name) == "string"
    and data_cfg.name:sub(1, 3) ~= "bv:"
end

function M.data_dir(data_cfg)
  local d = data_cfg.data_dir
  if d ~= nil and d ~= bv.null then
    if type(d) ~= "string" or d == "" then
      error("tfds: data_dir must be a directory name, got " .. tostring(d), 0)
    end
    return d, "data_dir"
  end
  local env = os.getenv("TFDS_DATA_DIR")
  if env and env ~= "" then return env, "$TFDS_DATA_DIR" end
  return (os.getenv("HOME") or "") .. "/tensorflow_datasets", "the default ~/tensorflow_datasets"
end

-- "NAME[/CONFIG][:VERSION]" -> name, config, version (TFDS's naming.py pattern; builder
-- keyword arguments and community namespaces are refused).
function M.parse_name(s)
  local function bad(why)
    error(string.format("tfds: bad dataset name '%s': %s (expected NAME, NAME/CONFIG, "
      .. "NAME:1.2.0 or NAME/CONFIG:1.2.0)", bv.snippet(s), why), 0)
  end
  if s:find("=", 1, true) then bad("builder arguments (NAME/arg=value) are not supported") end
  local rest, version = s:match("^(.*):([%d*]+%.[%d*]+%.[%d*]+)$")
  if not rest then rest = s end
  if rest:find(":", 1, true) then
    if version == nil and rest:match(":[^/]*$") and not rest:match("^[%w_%-]+:") then
      bad("a version is MAJOR.MINOR.PATCH")
    end
    bad("community namespaces (NAMESPACE:NAME) are not supported")
  end
  local name, config = rest:match("^([^/]+)/(.+)$")
  name = name or rest
  if not name:match("^%a[%w_]*$") then
    bad("a name is a letter followed by letters, digits or _")
  end
  if config and not config:match("^[%w_+%-.]+$") then bad("a config is letters, digits, _+-.") end
  if version then
    for part in version:gmatch("[^.]+") do
      if part ~= "*" and not part:match("^%d+$") then bad("a version is MAJOR.MINOR.PATCH") end
    end
  end
  return name, config, version
end

local function version_key(v)
  local a, b, c = v:match("^(%d+)%.(%d+)%.(%d+)$")
  return a and {tonumber(a), tonumber(b), tonumber(c)}
end

local function newer(x, y)  -- semantic order, newest first
  local a, b = version_key(x), version_key(y)
  for i = 1, 3 do
    if a[i] ~= b[i] then return a[i] > b[i] end
  end
  return false
end

local function matches(v, pattern)
  local a, p = version_key(v), {}
  for part in pattern:gmatch("[^.]+") do p[#p + 1] = part end
  for i = 1, 3 do
    if p[i] ~= "*" and tonumber(p[i]) ~= a[i] then return false end
  end
  return true
end

local function join(dir, name) return dir:sub(-1) == "/" and dir .. name or dir .. "/" .. name end

-- The prepared versions in dir (names MAJOR.MINOR.PATCH holding dataset_info.json), newest first.
local function versions_in(dir)
  local out = {}
  for _, e in ipairs(bv.fs.list(dir)) do
    if version_key(e) and bv.fs.exists(join(join(dir, e), "dataset_info.json")) then
      out[#out + 1] = e
    end
  end
  table.sort(out, newer)
  return out
end

local function subdirs(dir)
  local out = {}
  for _, e in ipairs(bv.fs.list(dir)) do
    if e:sub(1, 1) ~= "." and bv.fs.is_dir(join(dir, e)) and not version_key(e) then
      out[#out + 1] = e
    end
  end
  table.sort(out)
  return out
end

local function list_or_none(names)
  return #names > 0 and table.concat(names, ", ") or "none"
end

local function read_json(path, what)
  local ok, text = pcall(bv.fs.read_file, path)
  if not ok then error(string.format("tfds: cannot read %s %s: %s", what, path, text), 0) end
  local ok2, v = pcall(json.decode, text)
  if not ok2 then error(string.format("tfds: %s %s is not valid JSON: %s", what, path, v), 0) end
  return v
end

local function to_int(v, what)
  local n = type(v) == "string" and v:match("^%d+$") and math.tointeger(tonumber(v))
    or math.tointeger(v)
  if not n then
    error(string.format("tfds: %s must be a whole number, got %s", what, tostring(v)), 0)
  end
  return n
end

-- dataset_info.json's splits: {{name, shard_lengths, num_bytes, template}...} in its order.
local function read_splits(info, path)
  if type(info.splits) ~= "table" or #info.splits == 0 then
    error(string.format("tfds: %s lists no splits: the dataset is not prepared", path), 0)
  end
  local out = {}
  for i, s in ipairs(info.splits) do
    if type(s.name) ~= "string" then
      error(string.format("tfds: %s: split %d has no name", path, i), 0)
    end
    local lengths = {}
    for j, l in ipairs(s.shardLengths or {}) do
      lengths[j] = to_int(l, string.format("%s: split %s's shardLengths[%d]", path, s.name, j))
    end
    local template = s.filepathTemplate
    if template == nil or template == bv.null or template == "" then
      template = M.DEFAULT_TEMPLATE
    end
    out[i] = {name = s.name, shard_lengths = lengths, template = template,
              num_bytes = s.numBytes and to_int(s.numBytes, path .. ": numBytes") or nil}
  end
  return out
end

-- features.json -> {name = {kind =, ...}} for the top-level features (nested dicts as "a/b").
local CLASS = "tensorflow_datasets.core.features."
local function read_features(dir)
  local path = join(dir, "features.json")
  if not bv.fs.exists(path) then return {} end
  local f = read_json(path, "features file")
  local out = {}
  local function walk(dict, prefix, file_prefix)
    for name, feat in pairs(dict.features or {}) do
      local full = prefix and (prefix .. "/" .. name) or name
      local base = name:gsub("/", ".")
      local file = file_prefix and (file_prefix .. "-" .. base) or base
      local cls = feat.pythonClassName or ""
      local e = {class = cls}
      if feat.featuresDict then
        walk(feat.featuresDict, full, file)
      else
        if feat.image then
          e.kind, e.dtype = "image", feat.image.dtype
          e.encoding = feat.image.encodingFormat
        elseif feat.classLabel then
          e.kind = "class_label"
          e.num_classes = feat.classLabel.numClasses
            and to_int(feat.classLabel.numClasses, path .. ": numClasses")
          e.labels_file = join(dir, file .. ".labels.txt")
        elseif feat.text or cls == CLASS .. "text_feature.Text" then
          e.kind = "text"
        elseif feat.tensor then
          e.kind, e.dtype = "tensor", feat.tensor.dtype
        else
          e.kind = cls:match("([%w_]+)$") or "unknown"
        end
        out[full] = e
      end
    end
  end
  if f.featuresDict then walk(f.featuresDict) end
  return out
end

-- The dataset a data config names: its directory, dataset_info.json's splits and format, and
-- its features. Errors name what is missing and list what is there.
local KEYS = {name = true, split = true, data_dir = true}

function M.resolve(data_cfg)
  if type(data_cfg) ~= "table" or type(data_cfg.name) ~= "string" then
    error("tfds: a data config needs a 'name' (e.g. name = \"imagenet2012\")", 0)
  end
  local extra = {}
  for k in pairs(data_cfg) do
    if not KEYS[k] then extra[#extra + 1] = tostring(k) end
  end
  if #extra > 0 then
    table.sort(extra)
    error(string.format("tfds: dataset '%s': unknown key%s %s%s (a TFDS data config takes name, "
      .. "split and data_dir)", data_cfg.name, #extra > 1 and "s" or "", table.concat(extra, ", "),
      suggest.did_you_mean(extra[1], {"name", "split", "data_dir"})), 0)
  end
  local name, config, version = M.parse_name(data_cfg.name)
  local data_dir, from = M.data_dir(data_cfg)
  local where = string.format("%s (%s)", data_dir, from)
  if not bv.fs.is_dir(data_dir) then
    local msg = string.format("tfds: dataset '%s': no TFDS data directory %s", data_cfg.name, where)
    if data_dir:sub(1, 1) ~= "/" then
      msg = msg .. string.format("; a relative path is relative to the current directory, %s",
                                 bv.fs.cwd())
    end
    error(msg .. "; prepare it with tfds (tfds build NAME --data_dir=DIR) or set data_dir", 0)
  end
  local dir = join(data_dir, name)
  if not bv.fs.is_dir(dir) then
    local have = subdirs(data_dir)
    local others = {}
    for _, d in ipairs(have) do if d ~= "downloads" then others[#others + 1] = d end end
    error(string.format("tfds: no dataset '%s' in %s%s; it has: %s", name, where,
                        suggest.did_you_mean(name, others), list_or_none(others)), 0)
  end
  if config then
    local cdir = join(dir, config)
    if not bv.fs.is_dir(cdir) then
      local have = subdirs(dir)
      error(string.format("tfds: dataset '%s' has no config '%s' in %s%s; its configs: %s",
                          name, config, where, suggest.did_you_mean(config, have),
                          list_or_none(have)), 0)
    end
    dir = cdir
  end
  local versions = versions_in(dir)
  if #versions == 0 then
    local configs = not config and subdirs(dir) or {}
    if #configs > 0 then
      error(string.format("tfds: dataset '%s' has configs (%s): name one, e.g. name = \"%s/%s\"",
                          name, table.concat(configs, ", "), name, configs[1]), 0)
    end
    error(string.format("tfds: dataset '%s' in %s has no prepared version (a MAJOR.MINOR.PATCH "
      .. "directory with dataset_info.json) in %s", data_cfg.name, where, dir), 0)
  end
  local chosen
  if version then
    for _, v in ipairs(versions) do
      if matches(v, version) then chosen = v; break end
    end
    if not chosen then
      error(string.format("tfds: dataset '%s' has no prepared version %s in %s; prepared: %s",
                          name .. (config and ("/" .. config) or ""), version, dir,
                          table.concat(versions, ", ")), 0)
    end
  else
    chosen = versions[1]
  end
  local vdir = join(dir, chosen)
  local info_path = join(vdir, "dataset_info.json")
  local info = read_json(info_path, "dataset info")
  local format = info.fileFormat
  if format == nil or format == bv.null or format == "" then format = "tfrecord" end
  if format ~= "tfrecord" then
    error(string.format("tfds: dataset '%s' %s is stored as %s (%s's fileFormat), which bvlua "
      .. "does not read: only tfrecord is supported; prepare it with file_format='tfrecord'",
      data_cfg.name, chosen, tostring(format), info_path), 0)
  end
  return {name = name, config = config, version = chosen, dir = vdir, data_dir = data_dir,
          file_format = format, info_name = type(info.name) == "string" and info.name or name,
          splits = read_splits(info, info_path), features = read_features(vdir)}
end

-- The shard files of split `s` (TFDS's ShardedFileTemplate, sorted as SplitInfo.filepaths).
function M.shard_files(ds, s)
  local n = #s.shard_lengths
  local digits = math.max(5, #tostring(n))
  local files = {}
  for i = 0, n - 1 do
    local x = string.format("%0" .. digits .. "d", i)
    local y = string.format("%0" .. digits .. "d", n)
    local vars = {DATASET = ds.info_name, SPLIT = s.name, FILEFORMAT = ds.file_format,
                  SHARD_INDEX = x, NUM_SHARDS = y, SHARD_X_OF_Y = x .. "-of-" .. y}
    local rel = s.template:gsub("{([%w_]+)}", function(k)
      if vars[k] == nil then
        error(string.format("tfds: split %s's filepathTemplate '%s' has an unknown {%s}", s.name,
                            bv.snippet(s.template), k), 0)
      end
      return vars[k]
    end)
    files[i + 1] = join(ds.dir, rel)
  end
  table.sort(files)
  return files
end

local function split_of(data_cfg)
  local split = data_cfg.split
  if split == nil or split == bv.null then
    error(string.format("tfds: dataset '%s' needs a split (e.g. split = \"train\")",
                        data_cfg.name), 0)
  end
  return split
end

-- The bv:tfrecord source config for this process's part of the split, the number of examples
-- in that part, and in the whole split. opts = {rank = 0, world = 1, dataset = M.resolve's}.
function M.source_config(data_cfg, opts)
  opts = opts or {}
  local ds = opts.dataset or M.resolve(data_cfg)
  local split = split_of(data_cfg)
  local rank, world = opts.rank or 0, opts.world or 1
  local total = splits_lib.count(splits_lib.absolute(split, ds.splits), ds.splits)
  local arg = world > 1 and splits_lib.even_splits(split, world)[rank + 1] or split
  local abs = splits_lib.absolute(arg, ds.splits)
  local instr = splits_lib.file_instructions(abs, ds.splits)
  if #instr == 0 then
    error(string.format("tfds: dataset '%s' split %s selects no examples (TFDS refuses to read "
      .. "an empty split)", data_cfg.name, splits_lib.describe(arg)), 0)
  end
  local files = {}
  for _, s in ipairs(ds.splits) do files[s.name] = M.shard_files(ds, s) end
  local shards, n = {}, 0
  for _, b in ipairs(splits_lib.interleave(instr)) do
    local f = instr[b.i]
    local file = files[f.split][f.shard]
    shards[#shards + 1] = {file = file, skip = b.skip, take = b.take}
    n = n + (b.take == -1 and f.length - b.skip or b.take)
  end
  return {name = "bv:tfrecord", shards = shards}, n, total
end

-- The number of examples in the whole split (big_vision's total_examples).
function M.num_examples(data_cfg)
  local ds = M.resolve(data_cfg)
  return splits_lib.count(splits_lib.absolute(split_of(data_cfg), ds.splits), ds.splits)
end

function M.features(data_cfg)
  return M.resolve(data_cfg).features
end

-- A ClassLabel feature's names, in class order (TFDS's FEATURE.labels.txt).
function M.label_names(data_cfg, feature)
  local ds = M.resolve(data_cfg)
  feature = feature or "label"
  local f = ds.features[feature]
  if not f or f.kind ~= "class_label" then
    local labels = {}
    for k, v in pairs(ds.features) do
      if v.kind == "class_label" then labels[#labels + 1] = k end
    end
    table.sort(labels)
    error(string.format("tfds: dataset '%s' has no class label feature '%s'%s; its class "
                        .. "labels: %s", data_cfg.name, feature,
                        suggest.did_you_mean(feature, labels), list_or_none(labels)), 0)
  end
  if not bv.fs.exists(f.labels_file) then
    error(string.format("tfds: the class label '%s' of '%s' has no names file %s (classes "
      .. "without names: %s)", feature, data_cfg.name, f.labels_file, tostring(f.num_classes)), 0)
  end
  local names = {}
  for line in (bv.fs.read_file(f.labels_file) .. "\n"):gmatch("([^\n]*)\n") do
    local name = line:match("^%s*(.-)%s*$")
    if name ~= "" then names[#names + 1] = name end
  end
  return names
end

return M
