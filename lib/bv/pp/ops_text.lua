-- big_vision's text pp ops (pp/ops_text.py): strfmt, lower, tokenize, coco_captions and the
-- ImageNet class-name ops (clip_i1k_label_names, i21k_label_names). Token ids are int32 tensors,
-- as TF's tokenizers give them. Tokenizers come from bv.text and are cached, so building a pp
-- function per worker loads each model once. The module's table holds the token-length helpers
-- that PaliGemma's ops (pp/proj/paligemma/ops.lua) share, as big_vision's import ops_text.
local pp = require "bv.pp"

local M = {}

-- Shortest decimal that reads back as the same float32, like TF's float printing.
local function format_float32(x)
  local want = string.pack("f", x)
  for digits = 6, 9 do
    local s = string.format("%." .. digits .. "g", x)
    if string.pack("f", tonumber(s)) == want then return s end
  end
  return string.format("%.9g", x)
end

-- A value as tf.strings.format("{}", v, summarize=-1) prints it: 42, 3.14, [0 1 2].
local function render(v)
  if bv.is_tensor(v) then v = v:totable() end
  if type(v) == "string" then return v end
  if type(v) == "boolean" then return v and "True" or "False" end
  if type(v) == "number" then
    if math.type(v) == "integer" then return string.format("%d", v) end
    return format_float32(v)
  end
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = render(x) end
    return "[" .. table.concat(parts, " ") .. "]"
  end
  error("strfmt: cannot format a " .. type(v), 0)
end

-- Splits a Python format template into literal text and field names ("{{" and "}}" are braces).
local function parse_template(template)
  local parts, pos, text = {}, 1, {}
  while pos <= #template do
    local c = template:sub(pos, pos)
    local two = template:sub(pos, pos + 1)
    if two == "{{" or two == "}}" then
      text[#text + 1] = c
      pos = pos + 2
    elseif c == "{" then
      local close = template:find("}", pos, true)
      if not close then error("strfmt: unmatched '{' in template '" .. template .. "'", 0) end
      local field = template:sub(pos + 1, close - 1)
      if field == "" or field:find("[:!{]") then
        error("strfmt: only plain {field} names are supported, got '{" .. field .. "}'", 0)
      end
      parts[#parts + 1] = table.concat(text)
      parts[#parts + 1] = {field = field}
      text = {}
      pos = close + 1
    elseif c == "}" then
      error("strfmt: single '}' in template '" .. template .. "'", 0)
    else
      text[#text + 1] = c
      pos = pos + 1
    end
  end
  parts[#parts + 1] = table.concat(text)
  return parts
end

pp.register("strfmt", function(a)
  local parts, outkey = parse_template(a.template), a.outkey
  return function(data)
    local out = {}
    for i, p in ipairs(parts) do
      if type(p) == "string" then
        out[i] = p
      else
        local v = data[p.field]
        if v == nil then pp.missing_key(data, p.field) end
        out[i] = render(v)
      end
    end
    data[outkey] = table.concat(out)
    return data
  end
end, "strfmt(template, outkey='text'): fills {key} fields of a Python-style template from "
  .. "the example")

pp.register("lower", pp.inkeyoutkey(function()
  return function(x)
    if type(x) == "string" then return x:lower() end
    if type(x) == "table" then
      local out = {}
      for i, s in ipairs(x) do out[i] = s:lower() end
      return out
    end
    error("lower: expected a string or a list of strings, got a " .. type(x), 0)
  end
end, "text", "text"), "lower(): lower-cases a string or a list of strings (ASCII)")

-- big_vision's known tokenizer names: files on GCS that cannot be read here.
local KNOWN_TOKENIZERS = {
  mc4 = "gs://t5-data/vocabs/mc4.250000.100extra/sentencepiece.model",
  cc_all = "gs://t5-data/vocabs/cc_all.32000/sentencepiece.model",
  c4_en = "gs://t5-data/vocabs/cc_en.32000/sentencepiece.model",
  t5 = "gs://t5-data/vocabs/cc_all.32000.100extra/sentencepiece.model",
  mt5 = "gs://t5-data/vocabs/mc4.250000.100extra/sentencepiece.model",
}

local function sp_file_tokenizer(op, model)
  if type(model) ~= "string" then error(op .. ": model must be a path to a .model file", 0) end
  local gcs = KNOWN_TOKENIZERS[model] or (model:match("^gs://") and model)
  if gcs then
    error(string.format("%s: model '%s' is %s, which cannot be read here: download it and pass "
      .. "its local path as model=", op, model, gcs), 0)
  end
  return bv.text.sp_model(model)
end

-- The first `n` tokens; with `sticky`, the first n-1 and the last one (which keeps a final eos).
local function truncate(x, n, sticky)
  if n == 0 then return x:narrow(1, 1, 0) end
  if sticky then
    if n == 1 then return x:narrow(1, x:size(1), 1) end
    return bv.cat({x:narrow(1, 1, n - 1), x:narrow(1, x:size(1), 1)}, 1)
  end
  return x:narrow(1, 1, n)
end

local function pad_to(x, n, value)
  if x:size(1) >= n then return x end
  return bv.cat({x, bv.full({n - x:size(1)}, value, x:dtype())}, 1)
end

-- Exactly n tokens: cut (sticky or not) when there are at least n, else pad.
local function tolen(x, n, sticky, pad_value)
  if x:size(1) >= n then return truncate(x, n, sticky) end
  return pad_to(x, n, pad_value)
end

M.truncate, M.pad_to, M.tolen = truncate, pad_to, tolen

pp.register("tokenize", pp.inkeyoutkey(function(a)
  local max_len, eos = a.max_len, a.eos
  if eos ~= "yes" and eos ~= "none" and eos ~= "sticky" then
    error(string.format("tokenize: invalid value for eos: '%s' (yes, none or sticky)",
                        tostring(eos)), 0)
  end
  if math.type(max_len) ~= "integer" or max_len < 1 then
    error("tokenize: max_len must be a positive integer, got " .. tostring(max_len), 0)
  end
  local tok = sp_file_tokenizer("tokenize", a.model)
  local pad_value = a.pad_value
  if type(pad_value) == "string" then pad_value = tok:piece_to_id(pad_value) end
  local add_eos, sticky, lower = eos ~= "none", eos == "sticky", a.lower
  local bos, sample = a.add_bos, a.sample_if_multi

  local function one(s)
    if type(s) ~= "string" then error("tokenize: expected a string, got a " .. type(s), 0) end
    if lower then s = s:lower() end
    return tolen(tok:to_int_tensor(s, {bos = bos, eos = add_eos}), max_len, sticky, pad_value)
  end

  return function(x, rng)
    if type(x) ~= "table" then return one(x) end
    if sample then
      -- big_vision's deprecated path: setdefault("") then choice of one string.
      if #x == 0 then return one("") end
      if not rng then error("tokenize: sampling one of several texts needs a random stream", 0) end
      return one(x[rng:integer(1, #x)])
    end
    local rows = {}
    for i, s in ipairs(x) do rows[i] = one(s) end
    if #rows == 0 then return bv.zeros({0, max_len}, "int32") end
    return bv.stack(rows)
  end
end, false, "labels"), "tokenize(max_len, eos, model='c4_en', lower=True, sample_if_multi=True, "
  .. "pad_value='<pad>', add_bos=False): SentencePiece ids (int32) truncated or padded to max_len; "
  .. "eos is 'none', 'yes' or 'sticky' (a cut keeps the final eos)")


pp.register("coco_captions", function(a)
  local outkey = a.outkey
  return function(data)
    local captions = data.captions
    if captions == nil then pp.missing_key(data, "captions") end
    if type(captions) ~= "table" or captions.text == nil then
      error("coco_captions: key 'captions' must hold a table with a 'text' entry (COCO's "
            .. "captions/text), got " .. (type(captions) == "table" and "one without 'text'"
                                          or "a " .. (bv.is_tensor(captions) and "tensor"
                                                      or type(captions))), 0)
    end
    data[outkey] = captions.text
    return data
  end
end, "coco_captions(outkey='captions'): data[outkey] = data['captions']['text']")

-- Class-name lists that big_vision keeps in its source (big_vision/datasets/imagenet/
-- class_names.py) and bvlua does not ship: read from a text file, one name per line, given as
-- file= or by an environment variable. Cached per file.
local label_lists = {}

local function label_names(op, file, env, listname, count)
  file = file or os.getenv(env)
  if file == nil or file == "" then
    error(string.format("%s: no class-name file: pass file='names.txt' or set %s to a text file "
      .. "with one name per line (big_vision keeps the list as %s in "
      .. "big_vision/datasets/imagenet/class_names.py; bvlua does not ship it)", op, env,
      listname), 0)
  end
  if type(file) ~= "string" then error(op .. ": file must be a path, got a " .. type(file), 0) end
  if label_lists[file] then return label_lists[file] end
  if not bv.fs.exists(file) then
    error(string.format("%s: class-name file '%s' does not exist (big_vision keeps the list as %s "
      .. "in big_vision/datasets/imagenet/class_names.py: write it one name per line)", op,
      bv.snippet(file), listname), 0)
  end
  local names = require("bv.pp.ops_general").split_lines(bv.fs.read_file(file))
  if #names ~= count then
    error(string.format("%s: class-name file '%s' has %d names, big_vision's %s has %d", op,
                        bv.snippet(file), #names, listname, count), 0)
  end
  label_lists[file] = names
  return names
end

-- tf.gather of label ids (a number, a tensor of any shape or a list) into names of the same shape.
local function gather_names(op, names, x)
  if bv.is_tensor(x) then
    if not x:dtype():match("int") then
      error(op .. ": labels must be integers, got a " .. x:dtype() .. " tensor", 0)
    end
    x = x:dim() == 0 and x:item() or x:totable()
  end
  if type(x) == "table" then
    local out = {}
    for i, v in ipairs(x) do out[i] = gather_names(op, names, v) end
    return out
  end
  if math.type(x) ~= "integer" then
    error(string.format("%s: labels must be integers, got %s", op, bv.snippet(tostring(x))), 0)
  end
  if x < 0 or x >= #names then
    error(string.format("%s: label %d is outside [0, %d)", op, x, #names), 0)
  end
  return names[x + 1]
end

local function register_label_names(op, env, listname, count, what)
  pp.register(op, pp.inkeyoutkey(function(a)
    local names = label_names(op, a.file, env, listname, count)
    return function(x) return gather_names(op, names, x) end
  end, "label", "labels"), string.format("%s(file=None): label ids (0-based) to %s names, read "
    .. "one per line from file (default: $%s); the list is big_vision's %s", op, what, env,
    listname))
end

register_label_names("clip_i1k_label_names", "BV_CLIP_I1K_LABEL_NAMES",
                     "CLIP_IMAGENET_CLASS_NAMES", 1000, "CLIP's ImageNet-1k class")
register_label_names("i21k_label_names", "BV_I21K_LABEL_NAMES", "IMAGENET21k_CLASS_NAMES",
                     21843, "ImageNet-21k class")

return M
