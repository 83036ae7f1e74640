-- bv.paligemma: the pp strings of big_vision's PaliGemma transfer configs
-- (configs/proj/paligemma/transfers/common.py), for Lua configs:
--
--   pp = "decode|resize(224)|value_range(-1, 1)|strfmt('caption en', outkey='prefix')|"
--        .. bv.paligemma.combine_and_keep_train{text_len = 64}
--
-- Training examples come out as `text` = [bos prefix... sep suffix... eos pad...] (text_len + 1
-- ids: the trainer feeds text[:-1] and predicts text[1:]), `mask_ar` (0 on prefix and separator:
-- full attention; 1 on suffix and padding: causal) and `mask_loss` (1 on suffix and eos only).
-- Eval examples have text_len ids, no eos, and `mask_input` (1 on real tokens) instead of
-- mask_loss. The ops are tok, masked_concat and tolen (lib/bv/pp/proj/paligemma/ops.lua).
local M = {}

M.TOKENIZER = 'gemma(tokensets=("loc", "seg"))'

-- ---------------------------------------------------------------------------------------------
-- Python's repr() of plain values, so generated pp strings read like big_vision's.

local function repr_string(s)
  -- Python picks single quotes unless the text has a ' and no ".
  local q = (s:find("'", 1, true) and not s:find('"', 1, true)) and '"' or "'"
  local named = {["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t", [q] = "\\" .. q}
  return q .. s:gsub("[%c\\'\"]", function(c)
    if named[c] then return named[c] end
    if c == "'" or c == '"' then return c end
    return string.format("\\x%02x", c:byte())
  end) .. q
end

local function repr_float(x)
  if x ~= x then return "nan" end
  if x == math.huge then return "inf" end
  if x == -math.huge then return "-inf" end
  for digits = 1, 17 do
    local s = string.format("%." .. digits .. "g", x)
    if tonumber(s) == x then
      if not s:find("[.eEn]") then s = s .. ".0" end
      return s
    end
  end
  return string.format("%.17g", x)
end

function M.repr(v)
  local null = require("bv.literal").null
  if v == nil or v == null then return "None" end
  if type(v) == "boolean" then return v and "True" or "False" end
  if type(v) == "string" then return repr_string(v) end
  if math.type(v) == "integer" then return string.format("%d", v) end
  if type(v) == "number" then return repr_float(v) end
  if type(v) == "table" then
    local n = #v
    local keys = {}
    for k in pairs(v) do
      if not (math.type(k) == "integer" and k >= 1 and k <= n) then keys[#keys + 1] = k end
    end
    if #keys == 0 then
      local parts = {}
      for i = 1, n do parts[i] = M.repr(v[i]) end
      return "[" .. table.concat(parts, ", ") .. "]"
    end
    if n > 0 then error("repr: a table is either a list or a dict, not both", 2) end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    local parts = {}
    for i, k in ipairs(keys) do parts[i] = M.repr(k) .. ": " .. M.repr(v[k]) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  error("repr: cannot write a " .. type(v) .. " as a Python literal", 2)
end

-- ---------------------------------------------------------------------------------------------
-- The pp helpers

-- big_vision's argument order for tok(); anything else follows, sorted.
local TOK_ORDER = {"key", "inkey", "outkey", "text", "length", "bos", "eos", "model"}

-- tok{key = 'prefix', bos = 'yes'} -> "tok(key='prefix', bos='yes', model='gemma(...)')".
-- model defaults to M.TOKENIZER.
function M.tok(kw)
  local args = {}
  for k, v in pairs(kw or {}) do args[k] = v end
  if args.model == nil then args.model = M.TOKENIZER end
  local parts, done = {}, {}
  for _, k in ipairs(TOK_ORDER) do
    if args[k] ~= nil then
      parts[#parts + 1] = k .. "=" .. M.repr(args[k])
      done[k] = true
    end
  end
  local rest = {}
  for k in pairs(args) do
    if not done[k] then rest[#rest + 1] = k end
  end
  table.sort(rest)
  for _, k in ipairs(rest) do parts[#parts + 1] = k .. "=" .. M.repr(args[k]) end
  return "tok(" .. table.concat(parts, ", ") .. ")"
end

-- Checks the options table of a helper: text_len a positive integer, nothing unknown.
local function options(fn, opts, allowed)
  if math.type(opts) == "integer" then opts = {text_len = opts} end
  if type(opts) ~= "table" then
    error(string.format("paligemma.%s: expected {text_len = N, ...}, got a %s", fn, type(opts)), 3)
  end
  for k in pairs(opts) do
    if not allowed[k] then
      error(string.format("paligemma.%s: unknown option '%s'", fn, tostring(k)), 3)
    end
  end
  if math.type(opts.text_len) ~= "integer" or opts.text_len < 1 then
    error(string.format("paligemma.%s: text_len must be a positive integer, got %s", fn,
                        tostring(opts.text_len)), 3)
  end
  return opts
end

-- `before`: one pp string or a list of them.
local function before_ops(before)
  if before == nil then return {} end
  if type(before) == "string" then return {before} end
  local out = {}
  for i, s in ipairs(before) do out[i] = s end
  return out
end

local function quoted_list(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = string.format('"%s"', k) end
  return table.concat(parts, ", ")
end

-- combine_and_keep_train{text_len = N, before = {...}, sep = "\n", model = M.TOKENIZER}
function M.combine_and_keep_train(opts)
  opts = options("combine_and_keep_train", opts,
                 {text_len = true, before = true, sep = true, model = true})
  local n, model, sep = opts.text_len + 1, opts.model, opts.sep or "\n"
  local ops = before_ops(opts.before)
  for _, op in ipairs({
    M.tok{key = "prefix", bos = "yes", model = model},
    M.tok{key = "suffix", eos = "yes", model = model},
    M.tok{key = "septok", text = sep, model = model},
    'masked_concat(["prefix", "septok", "suffix"], outkey="text", mask_ar=[0, 0, 1], '
      .. 'mask_loss=[0, 0, 1])',
    -- text_len + 1 because the trainer drops one position (inputs text[:-1], targets text[1:]).
    string.format('tolen(%d, pad_value=0, key="text")', n),
    string.format('tolen(%d, pad_value=1, key="mask_ar")', n),
    string.format('tolen(%d, pad_value=0, key="mask_loss")', n),
    'keep("image", "text", "mask_ar", "mask_loss")',
  }) do ops[#ops + 1] = op end
  return table.concat(ops, "|")
end

-- combine_and_keep_eval{text_len = N, keep = {...}, before = {...}, sep = "\n", model = ...}:
-- the suffix (empty unless the data has one) is tokenized without eos, and decoding continues
-- from it.
function M.combine_and_keep_eval(opts)
  opts = options("combine_and_keep_eval", opts,
                 {text_len = true, keep = true, before = true, sep = true, model = true})
  local n, model, sep = opts.text_len, opts.model, opts.sep or "\n"
  local keep = {"image", "text", "mask_ar", "mask_input"}
  for _, k in ipairs(opts.keep or {}) do keep[#keep + 1] = k end
  local ops = before_ops(opts.before)
  for _, op in ipairs({
    M.tok{key = "prefix", bos = "yes", model = model},
    M.tok{key = "septok", text = sep, model = model},
    'setdefault("suffix", "")',
    M.tok{key = "suffix", eos = "no", model = model},
    'masked_concat(["prefix", "septok", "suffix"], outkey="text", mask_ar=[0, 0, 1], '
      .. 'mask_input=[1, 1, 1])',
    string.format('tolen(%d, pad_value=0, key="text")', n),
    string.format('tolen(%d, pad_value=1, key="mask_ar")', n),
    string.format('tolen(%d, pad_value=0, key="mask_input")', n),
    "keep(" .. quoted_list(keep) .. ")",
  }) do ops[#ops + 1] = op end
  return table.concat(ops, "|")
end

-- The tokenizer the helpers use by default (needs the Gemma model: see bv.text).
function M.tokenizer(opts) return bv.text.tokenizer(M.TOKENIZER, opts) end

-- Whether config `c` tokenizes with Gemma's tokenizer: a pp string (input.pp, an evaluator's pp)
-- or an evaluator's tokenizer naming gemma(...).
local function uses_gemma(c)
  local function gemma(s) return type(s) == "string" and s:find("gemma%(") ~= nil end
  if gemma(c.input and c.input.pp) then return true end
  for _, e in pairs(c.evals or {}) do
    if type(e) == "table" and (gemma(e.pp) or gemma(e.pp_fn) or gemma(e.tokenizer)) then
      return true
    end
  end
  return false
end

M.uses_gemma = uses_gemma

-- For a config's prepare, before any data worker builds a pp: when `c` tokenizes with Gemma's
-- tokenizer and its model file is nowhere bv.text looks, an error that says first what to run
-- (`train_cmd`: the config's `bvlua train ...` line; `cpu_cmd`: one that needs no download, if
-- any), then why.
function M.check_tokenizer(c, train_cmd, cpu_cmd)
  if not uses_gemma(c) then return end
  local ok, why = pcall(bv.text.gemma_model_path)
  if ok then return end
  local looked = tostring(why):match("%(looked in: (.-)%); set") or tostring(why)
  error(string.format("paligemma: no Gemma tokenizer. To fix: fetch it (gsutil cp %s ckpts/) "
    .. "into the folder with the PaliGemma checkpoint and name that folder in BV_GEMMA_DIR: "
    .. "BV_GEMMA_DIR=ckpts %s%s. Why: the pp tokenizes with %s, whose model file big_vision "
    .. "reads from GCS and bvlua from $BV_GEMMA_DIR, as %s (looked in: %s)",
    bv.text.GEMMA_GCS_MODEL, train_cmd,
    cpu_cmd and (". On a CPU with nothing to download: " .. cpu_cmd) or "", M.TOKENIZER,
    table.concat(bv.text.GEMMA_FILE_NAMES, " or "), looked), 0)
end

return M
