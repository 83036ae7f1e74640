-- bv.text: big_vision's tokenizers (pp/tokenizer.py, pp/ops_text.py, proj/paligemma/ops.py).
--
--   local tok = bv.text.tokenizer("gemma(tokensets=('loc', 'seg'))")   -- cached per spec
--   tok:to_int("a cat", {bos = true, eos = true})  --> {2, ..., 1}  (ids; lists of strings too)
--   tok:to_str({2, 235250, 4401, 1, 0})             --> "a cat"  (stops at the first eos)
--   tok.vocab_size, tok.pad_token, tok.eos_token, tok.bos_token
--
-- Specs are big_vision's tokenizer strings: `gemma(tokensets=(), model=...)` and
-- `sp(model='path/to.model', tokensets=())`. Tokensets ("loc": <loc0000>..<loc1023>, "seg":
-- <seg000>..<seg127>) are added to the model as user-defined pieces after its own vocabulary,
-- so Gemma with ("loc", "seg") has 256000 + 1024 + 128 = 257152 tokens.
--
-- Gemma's model file is, in this order: opts.path, the spec's model= (unless it is big_vision's
-- gs:// default), bv.text.gemma_model (a config may set it), then gemma_tokenizer.model or
-- tokenizer.model in opts.gemma_dir or else $BV_GEMMA_DIR.
local M = {}

local C = bv._text
local null = require("bv.literal").null

-- big_vision's default location of the Gemma tokenizer (unreadable here: no GCS client).
M.GEMMA_GCS_MODEL = "gs://big_vision/gemma_tokenizer.model"
M.GEMMA_FILE_NAMES = {"gemma_tokenizer.model", "tokenizer.model"}

-- A path set by a config (top-level code runs in every worker's Lua state too).
M.gemma_model = nil

-- ---------------------------------------------------------------------------------------------
-- The tokenizer object

local Tokenizer = {}
Tokenizer.__index = Tokenizer

local function wrap(native, spec)
  return setmetatable({
    native = native,
    spec = spec,
    path = native:name(),
    vocab_size = native:vocab_size(),
    pad_token = native:pad_id(),
    eos_token = native:eos_id(),
    bos_token = native:bos_id(),
    unk_token = native:unk_id(),
  }, Tokenizer)
end

function Tokenizer:__tostring()
  return string.format("bv.text tokenizer %s (%s, vocab %d)", self.spec, self.path, self.vocab_size)
end

local function encode_one(self, s, bos, eos)
  local ids = self.native:encode(s)
  if bos then table.insert(ids, 1, self.bos_token) end
  if eos then ids[#ids + 1] = self.eos_token end
  return ids
end

-- to_int(text, {bos = false, eos = false}): a string gives a list of ids, a list of strings a
-- list of lists. bos/eos prepend/append the model's ids, as big_vision does.
function Tokenizer:to_int(text, opts)
  opts = opts or {}
  local bos, eos = opts.bos == true, opts.eos == true
  if type(text) == "string" then return encode_one(self, text, bos, eos) end
  if type(text) ~= "table" then
    error("to_int: expected a string or a list of strings, got a " .. type(text), 2)
  end
  local out = {}
  for i, s in ipairs(text) do
    if type(s) ~= "string" then
      error(string.format("to_int: text[%d] is a %s, not a string", i, type(s)), 2)
    end
    out[i] = encode_one(self, s, bos, eos)
  end
  return out
end

-- to_int of one string as an int32 tensor (what pp ops store).
function Tokenizer:to_int_tensor(text, opts)
  opts = opts or {}
  return self.native:encode_tensor(text, opts.bos == true, opts.eos == true)
end

-- big_vision's _iterable: a 2-D tensor, or a list whose first item is not a number.
local function is_batch(tokens)
  if bv.is_tensor(tokens) then return tokens:dim() > 1 end
  return type(tokens) == "table" and tokens[1] ~= nil and type(tokens[1]) ~= "number"
end

local function ids_of(tokens)
  if bv.is_tensor(tokens) then
    if tokens:dim() ~= 1 then
      error(string.format("to_str: expected 1-D tokens, got a %d-D tensor", tokens:dim()), 3)
    end
    return tokens:to("int64"):totable()
  end
  if type(tokens) ~= "table" then
    error("to_str: expected a list or tensor of ids, got a " .. type(tokens), 3)
  end
  local ids = {}
  for i, t in ipairs(tokens) do
    if math.type(t) ~= "integer" and not (type(t) == "number" and t == math.floor(t)) then
      error(string.format("to_str: tokens[%d] is not an integer id (%s)", i, tostring(t)), 3)
    end
    ids[i] = math.tointeger(t)
  end
  return ids
end

local function decode_one(self, tokens, stop_at_eos)
  local ids = ids_of(tokens)
  if stop_at_eos then
    -- SentencePiece drops eos when decoding but does not stop there; big_vision cuts first.
    for i, t in ipairs(ids) do
      if t == self.eos_token then
        ids = {table.unpack(ids, 1, i - 1)}
        break
      end
    end
  end
  return self.native:decode(ids)
end

-- to_str(tokens, {stop_at_eos = true}): a list (or 1-D tensor) of ids gives a string, a list of
-- lists (or a 2-D tensor) a list of strings. Control tokens (bos, eos, pad) print nothing.
function Tokenizer:to_str(tokens, opts)
  local stop = true
  if opts and opts.stop_at_eos ~= nil then stop = opts.stop_at_eos end
  if is_batch(tokens) then
    local out = {}
    if bv.is_tensor(tokens) then
      for i = 1, tokens:size(1) do out[i] = decode_one(self, tokens[i], stop) end
    else
      for i, row in ipairs(tokens) do out[i] = decode_one(self, row, stop) end
    end
    return out
  end
  return decode_one(self, tokens, stop)
end

function Tokenizer:to_piece(id) return self.native:id_to_piece(id) end

function Tokenizer:piece_to_id(piece) return self.native:piece_to_id(piece) end

-- ---------------------------------------------------------------------------------------------
-- Tokensets

-- Tokensets registered from Lua (name -> list of pieces); "loc" and "seg" are built in.
local tokensets = {}

-- bv.text.register_tokenset(name, pieces): a tokenset for tokenizer specs' tokensets=(...).
function M.register_tokenset(name, pieces)
  if type(name) ~= "string" or type(pieces) ~= "table" then
    error("register_tokenset(name, pieces): a name and a list of strings", 2)
  end
  tokensets[name] = pieces
end

function M.tokenset(name) return tokensets[name] or C.tokenset(name) end

-- The extra pieces of a tokensets argument (a list of names; a single name is allowed), sorted
-- and without duplicates as big_vision's np.unique leaves them.
local function extras_of(names)
  if names == nil then return {} end
  if type(names) == "string" then names = {names} end
  if type(names) ~= "table" then
    error("tokenizer: tokensets must be a list of names such as ('loc', 'seg')", 0)
  end
  local seen, out = {}, {}
  for _, name in ipairs(names) do
    for _, piece in ipairs(M.tokenset(name)) do
      if not seen[piece] then seen[piece], out[#out + 1] = true, piece end
    end
  end
  table.sort(out)
  return out
end

-- ---------------------------------------------------------------------------------------------
-- Specs and the registry of tokenizer kinds

local factories = {}  -- name -> {params = {{name, default}...}, make = fn(args, opts) -> native}
local cache = {}      -- spec and options -> tokenizer

-- Registers a tokenizer kind; `params` is the ordered list {{"name", default}, ...} that
-- binds the spec's arguments (a param without a default is required), `make(args, opts)`
-- returns a native tokenizer (bv._text.load(...)).
function M.register(name, params, make)
  factories[name] = {params = params, make = make}
end

local function bind(name, params, args, kwargs)
  local out, given = {}, {}
  if args.n > #params then
    error(string.format("tokenizer '%s': takes %d arguments, got %d", name, #params, args.n), 0)
  end
  for i = 1, args.n do
    out[params[i][1]], given[params[i][1]] = args[i], true
  end
  for k, v in pairs(kwargs) do
    local known = false
    for _, p in ipairs(params) do known = known or p[1] == k end
    if not known then error(string.format("tokenizer '%s': unknown argument '%s'", name, k), 0) end
    if given[k] then
      error(string.format("tokenizer '%s': argument '%s' given twice", name, k), 0)
    end
    out[k], given[k] = v, true
  end
  for _, p in ipairs(params) do
    if out[p[1]] == null then out[p[1]] = nil end
    if out[p[1]] == nil then
      if p[2] == nil and not given[p[1]] then
        error(string.format("tokenizer '%s': missing argument '%s'", name, p[1]), 0)
      end
      out[p[1]] = p[2]
    end
  end
  return out
end

-- The Gemma model file, or an error listing every place looked at.
function M.gemma_model_path(model, opts)
  if opts and opts.path then return opts.path end
  if model and model ~= M.GEMMA_GCS_MODEL then
    if model:match("^gs://") then
      error("gemma tokenizer: cannot read " .. model .. " (no GCS here): download it and pass "
        .. "its local path as model=", 0)
    end
    return model
  end
  if M.gemma_model then return M.gemma_model end
  local looked = {}
  local dir = opts and opts.gemma_dir or os.getenv("BV_GEMMA_DIR")
  if dir and dir ~= "" then
    for _, name in ipairs(M.GEMMA_FILE_NAMES) do
      local path = dir .. "/" .. name
      if bv.fs.exists(path) then return path end
      looked[#looked + 1] = path
    end
  end
  error(string.format("gemma tokenizer: no model file found (looked in: %s); set BV_GEMMA_DIR "
    .. "to the folder holding gemma_tokenizer.model (big_vision's %s), set bv.text.gemma_model, "
    .. "or give gemma(model='path/to/tokenizer.model')",
    #looked > 0 and table.concat(looked, ", ") or "nothing: BV_GEMMA_DIR is not set",
    M.GEMMA_GCS_MODEL), 0)
end

M.register("gemma", {{"tokensets", {}}, {"model", M.GEMMA_GCS_MODEL}}, function(a, opts)
  return C.load(M.gemma_model_path(a.model, opts), extras_of(a.tokensets))
end)

M.register("sp", {{"model"}, {"tokensets", {}}}, function(a, opts)
  if type(a.model) ~= "string" then error("tokenizer 'sp': model must be a path", 0) end
  return C.load(a.model, extras_of(a.tokensets))
end)

-- bv.text.tokenizer(spec [, opts]): a big_vision tokenizer spec ("gemma", "sp(model='x')",
-- "gemma(tokensets=('loc', 'seg'))"). The same spec gives the same (cached) object, so pp ops
-- can ask for it per build without reloading the model. opts.path (a file) or opts.gemma_dir
-- (a folder) say where Gemma's model is.
function M.tokenizer(spec, opts)
  if type(spec) ~= "string" then
    error("bv.text.tokenizer: expected a spec string such as \"gemma\", got " .. type(spec), 2)
  end
  local key = spec .. "\0" .. tostring(opts and opts.path or "") .. "\0"
    .. tostring(opts and opts.gemma_dir or "")
  if cache[key] then return cache[key] end
  local ok, name, args, kwargs = pcall(require("bv.pp").parse_op, spec)
  if not ok then error("bv.text.tokenizer: bad spec '" .. spec .. "': " .. tostring(name), 2) end
  local f = factories[name]
  if not f then
    local known = {}
    for k in pairs(factories) do known[#known + 1] = k end
    table.sort(known)
    error(string.format("bv.text.tokenizer: unknown tokenizer '%s' in '%s' (known: %s)", name,
                        spec, table.concat(known, ", ")), 2)
  end
  local made, native = pcall(function() return f.make(bind(name, f.params, args, kwargs), opts) end)
  if not made then error(tostring(native), 2) end
  local tok = wrap(native, spec)
  cache[key] = tok
  return tok
end

-- A SentencePiece model file as a tokenizer (pp's tokenize(model='path')), cached by path.
function M.sp_model(path, names)
  local extras = extras_of(names)
  local key = "sp-file\0" .. path .. "\0" .. table.concat(extras, ",")
  if not cache[key] then cache[key] = wrap(C.load(path, extras), path) end
  return cache[key]
end

-- Forgets cached tokenizers (tests that rewrite a model file).
function M.clear_cache() cache = {} end

-- ---------------------------------------------------------------------------------------------
-- Training small models

-- SentencePiece trainer flags that make a small model behave like Gemma's: its special ids,
-- and text kept as it is (no normalization, no dummy prefix space, "\n" a token of its own).
local GEMMA_LIKE = {
  normalization_rule_name = "identity", remove_extra_whitespaces = false,
  add_dummy_prefix = false, user_defined_symbols = "\n",
}

local OWN_KEYS = {lines = true, vocab_size = true, path = true, gemma_ids = true, gemma_like = true}

-- bv.text.train_sentencepiece{lines = {...}, vocab_size = N, path = "x.model",
--   gemma_ids = true, gemma_like = true, <SentencePiece trainer flags>...} -> path
-- gemma_ids gives Gemma's specials (pad 0 "<pad>", eos 1 "<eos>", bos 2 "<bos>", unk 3 "<unk>");
-- gemma_like adds GEMMA_LIKE above; any other key is a SentencePiece trainer flag
-- (model_type = "bpe", user_defined_symbols = "a,b", ...) and wins over both.
function M.train_sentencepiece(a)
  if type(a) ~= "table" then error("train_sentencepiece: expected a table of arguments", 2) end
  if type(a.lines) ~= "table" then
    error("train_sentencepiece: lines must be a list of strings", 2)
  end
  if math.type(a.vocab_size) ~= "integer" then
    error("train_sentencepiece: vocab_size must be an integer", 2)
  end
  if type(a.path) ~= "string" then error("train_sentencepiece: path must be a string", 2) end
  local options = {}
  if a.gemma_ids or a.gemma_like then
    for k, v in pairs(C.gemma_special_ids()) do options[k] = v end
  end
  if a.gemma_like then
    for k, v in pairs(GEMMA_LIKE) do options[k] = v end
  end
  for k, v in pairs(a) do
    if not OWN_KEYS[k] then options[k] = v end
  end
  C.train_sentencepiece(a.lines, a.vocab_size, a.path, options)
  return a.path
end

return M
