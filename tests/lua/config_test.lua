local T = require "tests.lua.lib.testing"
local config = require "bv.config"
local literal = require "bv.literal"
local json = require "bv.json"

-- Fixtures live next to this file, wherever it is run from.
local HERE = debug.getinfo(1, "S").source:gsub("^@", ""):match("^(.*)/[^/]*$") or "."
local FIXTURES = HERE .. "/fixtures/"
local BIT_LINES = HERE .. "/../../configs/bit_lines.lua"

local parse_arg = config.parse_arg

-- parse_arg: every behaviour of big_vision's configs/common.py parse_arg ----------------------

T.test("parse_arg: nil and '' give the defaults", function()
  T.eq(parse_arg(nil, {res = 224, flip = false}), {res = 224, flip = false})
  T.eq(parse_arg("", {res = 224}), {res = 224})
  T.eq(parse_arg(""), {})
end)

T.test("parse_arg: values typed by the defaults", function()
  local a = parse_arg("res=128,lr=0.5,name=foo", {res = 224, lr = 1.0, name = "bar"})
  T.eq(a, {res = 128, lr = 0.5, name = "foo"})
  T.eq(math.type(a.res), "integer")
  local b = parse_arg("lr=2", {lr = 1.0})
  T.eq(math.type(b.lr), "float")
  T.eq(parse_arg("lr=1e-3", {lr = 1.0}).lr, 1e-3)
  T.eq(parse_arg("name=42", {name = "x"}).name, "42")
  T.eq(parse_arg("res=-3", {res = 1}).res, -3)
end)

T.test("parse_arg: a non-integer for an int key is an error naming the key", function()
  T.raises(function() parse_arg("res=2.5", {res = 224}) end,
    'key "res" expects an int, got "2.5"')
  T.raises(function() parse_arg("res=abc", {res = 224}) end, 'key "res"')
  T.raises(function() parse_arg("lr=fast", {lr = 0.1}) end, 'key "lr" expects a float')
  T.raises(function() parse_arg("lr=0x10", {lr = 0.1}) end, 'key "lr" expects a float')
end)

T.test("parse_arg: booleans are strict", function()
  local spec = {flip = false, crop = true}
  T.eq(parse_arg("flip=true,crop=false", spec), {flip = true, crop = false})
  T.eq(parse_arg("flip=TRUE,crop=False", spec), {flip = true, crop = false})
  T.eq(parse_arg("flip=,crop=", spec), {flip = false, crop = false}) -- '' is false
  T.raises(function() parse_arg("flip=1", spec) end, 'key "flip" expects true or false, got "1"')
  T.raises(function() parse_arg("flip=yes", spec) end, 'key "flip" expects true or false')
end)

T.test("parse_arg: a bare key is true", function()
  local spec = {flip = false, crop = false}
  T.eq(parse_arg("flip", spec), {flip = true, crop = false})
  T.eq(parse_arg("flip,crop", spec), {flip = true, crop = true})
end)

T.test("parse_arg: shortcut goes to the first key of an ordered spec", function()
  local spec = {{"res", 224}, {"runlocal", false}}
  T.eq(parse_arg("128", spec), {res = 128, runlocal = false})
  T.eq(parse_arg("runlocal", spec), {res = 224, runlocal = true})
  T.eq(parse_arg("128", {res = 224}), {res = 128}) -- a single hash key is unambiguous
  T.raises(function() parse_arg("abc", spec) end, 'key "res" expects an int, got "abc"')
end)

T.test("parse_arg: shortcut with an unordered multi-key spec asks for key=value", function()
  T.raises(function() parse_arg("128", {res = 224, runlocal = false}) end, "write key=value")
  -- A key name still works: it is a flag, not a value.
  T.eq(parse_arg("runlocal", {res = 224, runlocal = false}), {res = 224, runlocal = true})
end)

T.test("parse_arg: empty spec with lazy turns a bare word into a true flag", function()
  T.eq(parse_arg("quick", {}, {lazy = true}), {quick = true})
  T.raises(function() parse_arg("quick", {}) end, 'Unhandled config args remain: "quick"')
end)

T.test("parse_arg: empty pieces dropped, split at the first '=', last duplicate wins", function()
  local spec = {name = "", res = 1}
  T.eq(parse_arg(",,res=2,,", spec), {name = "", res = 2})
  T.eq(parse_arg("name=a=b", spec), {name = "a=b", res = 1})
  T.eq(parse_arg("res=2,res=3", spec), {name = "", res = 3})
end)

T.test("parse_arg: unknown keys are an error unless lazy", function()
  local err = T.raises(function() parse_arg("res=2,foo=1,bar", {res = 1}) end,
    'Unhandled config args remain: "foo", "bar"')
  T.truthy(err:find("known keys: res", 1, true), "lists the known keys")
  -- Quoted, so that what is wrong shows; a near miss is named.
  T.raises(function() parse_arg("flip=true,cr op=false", {flip = false, crop = true}) end,
    'Unhandled config args remain: "cr op" (did you mean \'crop\'?) (known keys: crop, flip)')
  T.raises(function() parse_arg("flip=true,crp=false", {flip = false, crop = true}) end,
    'Unhandled config args remain: "crp" (did you mean \'crop\'?) (known keys: crop, flip)')
end)

T.test("parse_arg: blanks around keys and values are dropped", function()
  -- big_vision keeps them (its " crop" is an unknown key); a blank after a comma is a slip.
  local spec = {flip = false, crop = true, res = 224, name = "x"}
  T.eq(parse_arg("flip=true, crop=false", spec), {flip = true, crop = false, res = 224, name = "x"})
  T.eq(parse_arg(" flip = true ,crop= False ,res = 128, name = a b ", spec),
       {flip = true, crop = false, res = 128, name = "a b"})
  T.eq(parse_arg("flip, crop", {flip = false, crop = false}), {flip = true, crop = true})
  T.eq(parse_arg(" runlocal ", {{"res", 1}, {"runlocal", false}}), {res = 1, runlocal = true})
  T.eq(parse_arg("res=2, ,", {res = 1}), {res = 2})  -- a piece of blanks is empty
  T.eq(parse_arg("a= 3", {}, {lazy = true}), {a = 3})
end)

T.test("parse_arg: lazy auto-types leftovers: bool, then int, then float, else string", function()
  local a = parse_arg("a=True,b=false,c=3,d=2.5,e=1e-3,f=hello,g", {}, {lazy = true})
  T.eq(a, {a = true, b = false, c = 3, d = 2.5, e = 1e-3, f = "hello", g = true})
  T.eq(math.type(a.c), "integer")
  T.eq(math.type(a.d), "float")
  T.eq(parse_arg("h=", {}, {lazy = true}), {h = ""})
  T.eq(parse_arg("res=5,x=1", {res = 1}, {lazy = true}), {res = 5, x = 1})
end)

T.test("parse_arg: typed spec entries, nil default allowed", function()
  local spec = {{"res", {nil, "int"}}, {"lr", {1, "float"}}, {"name", {nil, "string"}}}
  T.eq(parse_arg("", spec), {lr = 1}) -- nil defaults are simply absent
  local a = parse_arg("res=64,lr=3,name=x", spec)
  T.eq(a, {res = 64, lr = 3.0, name = "x"})
  T.eq(math.type(a.lr), "float")
  T.eq(parse_arg("64", spec).res, 64)
  T.eq(parse_arg("flag", {flag = {nil, "bool"}}), {flag = true})
  T.eq(parse_arg("res=7", {res = {0, "string"}}).res, "7")
end)

T.test("parse_arg: spec mistakes are reported", function()
  T.raises(function() parse_arg("x=1", {x = {nil, nil}}) end, 'spec "x" has a table default')
  T.raises(function() parse_arg("", {sizes = {1, 2, 3}}) end, 'spec "sizes" has a table default')
  T.raises(function() parse_arg("x=1", {{"x"}}) end, 'key "x" has a nil default')
  T.raises(function() parse_arg("", {{"a", 1}, {"a", 2}}) end, 'spec key "a" given twice')
  T.raises(function() parse_arg("", {{1, 2}}) end, "ordered spec item 1")
end)

-- dotted keys --------------------------------------------------------------------------------

T.test("get and set with dotted keys", function()
  local cfg = {input = {batch_size = 32, data = {name = "x"}}, schedule = {"a", "b"}}
  T.eq(config.get(cfg, "input.batch_size"), 32)
  T.eq(config.get(cfg, "input.data.name"), "x")
  T.eq(config.get(cfg, "input.nope"), nil)
  T.eq(config.get(cfg, "input.nope.deeper", 7), 7)
  T.eq(config.get(cfg, "input.batch_size.x", "d"), "d")
  T.eq(config.get(cfg, "schedule.2"), "b")
  config.set(cfg, "input.batch_size", 64)
  config.set(cfg, "model.depth", 50)
  T.eq(cfg.input.batch_size, 64)
  T.eq(cfg.model, {depth = 50})
  T.raises(function() config.set(cfg, "input.batch_size.x", 1) end,
    '"input.batch_size" is a number')
  T.raises(function() config.get(cfg, "a..b") end, "empty segment")
end)

-- overrides ----------------------------------------------------------------------------------

local function sample()
  return {lr = 0.03, total_epochs = 90, name = "bit", flip = false, seed = 0,
          input = {batch_size = 64, pp = "decode"}, model = {depth = 26},
          sizes = {224, 224}, init = literal.null}
end

T.test("override converts to the field's current type", function()
  local cfg = sample()
  config.override(cfg, "lr", "0.1")
  config.override(cfg, "total_epochs", "20")
  config.override(cfg, "name", "vit")
  config.override(cfg, "input.batch_size", "128")
  config.override(cfg, "input.pp", "decode|flip_lr")
  T.eq(cfg.lr, 0.1)
  T.eq(cfg.total_epochs, 20)
  T.eq(math.type(cfg.total_epochs), "integer")
  T.eq(cfg.name, "vit")
  T.eq(cfg.input.batch_size, 128)
  T.eq(cfg.input.pp, "decode|flip_lr")
  config.override(cfg, "lr", "1")
  T.eq(math.type(cfg.lr), "float")
  config.override(cfg, "lr", "1e-4")
  T.eq(cfg.lr, 1e-4)
end)

T.test("override booleans accept true/false/1/0/yes/no in any case", function()
  local cfg = sample()
  for text, want in pairs({["true"] = true, ["False"] = false, ["1"] = true, ["0"] = false,
                           YES = true, no = false}) do
    config.override(cfg, "flip", text)
    T.eq(cfg.flip, want, text)
  end
  T.raises(function() config.override(cfg, "flip", "maybe") end,
    '--config.flip: expected a boolean (true/false/1/0/yes/no), got "maybe"')
end)

T.test("override tables take Python or Lua literals", function()
  local cfg = sample()
  config.override(cfg, "sizes", "[128, 96]")
  T.eq(cfg.sizes, {128, 96})
  config.override(cfg, "sizes", "(64,)")
  T.eq(cfg.sizes, {64})
  config.override(cfg, "sizes", "{32, 32}")
  T.eq(cfg.sizes, {32, 32})
  config.override(cfg, "sizes", "1,2")
  T.eq(cfg.sizes, {1, 2})
  config.override(cfg, "model", "{'depth': 50, 'width': 2}")
  T.eq(cfg.model, {depth = 50, width = 2}) -- replaced, not merged
  config.override(cfg, "model", "{depth = 101}")
  T.eq(cfg.model, {depth = 101})
  T.raises(function() config.override(cfg, "model", "3") end,
    '--config.model: expected a table')
  T.raises(function() config.override(cfg, "model", "depth") end, "unknown name 'depth'")
end)

T.test("override: deeply nested tables are an error naming the position", function()
  local cfg = sample()
  local msg = T.raises(function() config.override(cfg, "sizes", string.rep("[", 100000)) end,
                       "--config.sizes: expected a table")
  T.truthy(msg:find("nested deeper than 256 levels at position 257", 1, true), msg)
  T.truthy(#msg < 1000, "message of " .. #msg .. " bytes")
  T.eq(cfg.sizes, sample().sizes)
end)

T.test("override conversion errors name the flag, the text and the type", function()
  local cfg = sample()
  T.raises(function() config.override(cfg, "lr", "abc") end,
    '--config.lr: expected a number, got "abc"')
  T.raises(function() config.override(cfg, "total_epochs", "2.5") end,
    '--config.total_epochs: expected an integer, got "2.5"')
  T.raises(function() config.override(cfg, "input.batch_size", "") end,
    '--config.input.batch_size: expected an integer, got ""')
end)

T.test("override of unknown keys fails and names the key", function()
  local cfg = sample()
  T.raises(function() config.override(cfg, "nope", "1") end,
    'unknown config key "nope" (--config.nope)')
  T.raises(function() config.override(cfg, "input.nope", "1") end,
    'unknown config key "input.nope" (--config.input.nope)')
  T.raises(function() config.override(cfg, "lr.x", "1") end,
    'unknown config key "lr.x" (--config.lr.x): "lr" is a number')
  -- A null (or nil) field has no type to convert to.
  T.raises(function() config.override(cfg, "init", "x") end,
    'unknown config key "init" (--config.init): its value is null')
  T.eq(cfg.nope, nil)
end)

-- validate / to_json -------------------------------------------------------------------------

T.test("validate names the path of what cannot be saved", function()
  T.eq(config.validate(sample()).lr, 0.03)
  T.raises(function() config.validate({input = {pp = print}}) end,
    'config: cannot encode function at "input.pp"')
  T.raises(function() config.validate({evals = {{f = io.stdout}}}) end,
    'cannot encode userdata at "evals[1].f"')
  T.raises(function() config.validate({lr = 1 / 0}) end, 'cannot encode inf at "lr"')
  T.raises(function() config.validate({m = {[2] = "x"}}) end, 'cannot encode key 2 (a number) at "m"')
  T.raises(function() config.validate({m = {1, x = 2}}) end, "cannot encode key 1 (a number)")
  local cyc = {a = {}}
  cyc.a.back = cyc
  T.raises(function() config.validate(cyc) end, 'config: cycle at "a.back"')
  T.raises(function() config.validate("x") end, "expected a table")
end)

T.test("to_json is sorted and deterministic, compact or indented", function()
  local cfg = {seed = 0, lr = 0.03, input = {batch_size = 64}, evals = {}}
  T.eq(config.to_json(cfg), '{"evals":{},"input":{"batch_size":64},"lr":0.03,"seed":0}')
  T.eq(config.to_json(cfg, 1),
    '{\n "evals": {},\n "input": {\n  "batch_size": 64\n },\n "lr": 0.03,\n "seed": 0\n}')
  T.raises(function() config.to_json({f = print}) end, 'cannot encode function at "f"')
end)

-- load ---------------------------------------------------------------------------------------

T.test("load calls get_config with ARGS and lets it require a sibling module", function()
  local before = package.path
  local cfg = config.load(FIXTURES .. "cfg_with_arg.lua:res=128,runlocal")
  T.eq(cfg.arg_seen, "res=128,runlocal")
  T.eq(cfg.res, 128)
  T.eq(cfg.runlocal, true)
  T.eq(cfg.input.pp, "decode|resize(128)|value_range(-1, 1)")
  T.eq(package.path, before, "package.path restored")
  T.eq(config.load(FIXTURES .. "cfg_with_arg.lua:96").res, 96) -- the shortcut, via load
end)

T.test("load without ':' passes nil; only the first ':' splits", function()
  local cfg = config.load(FIXTURES .. "cfg_with_arg.lua")
  T.eq(cfg.arg_seen, "nil")
  T.eq(cfg.res, 224)
  T.raises(function() config.load(FIXTURES .. "cfg_with_arg.lua:res=1:2") end,
    'key "res" expects an int, got "1:2"')
end)

T.test("load of a plain table config", function()
  T.eq(config.load(FIXTURES .. "cfg_table.lua"), {seed = 0, lr = 0.01})
  T.raises(function() config.load(FIXTURES .. "cfg_table.lua:x") end, 'takes no ":x"')
end)

T.test("a config module: loading builds the table, prepare and register_pp_ops run apart", function()
  local marker = os.tmpname()
  os.remove(marker)
  local spec = FIXTURES .. "cfg_module.lua:" .. marker
  local before = package.path
  local cfg = config.load(spec)
  T.eq(cfg, {marker = marker, lr = 0.1})
  T.truthy(not bv.fs.exists(marker), "loading prepares nothing")
  T.raises(function() bv.pp.build("cfg_module_op") end, "unknown op 'cfg_module_op'")
  local m = config.module(spec)
  T.eq({type(m.get_config), type(m.prepare), type(m.register_pp_ops)},
       {"function", "function", "function"})
  cfg.lr = 0.5  -- prepare sees the resolved config, overrides included
  T.eq(config.prepare(spec, cfg), true)
  T.eq(bv.fs.read_file(marker), "prepared with lr 0.5 decode|resize(1)|value_range(-1, 1)\n")
  os.remove(marker)
  T.eq(config.register_pp_ops(spec), true)
  T.eq(bv.pp.build("cfg_module_op")({}), {seen = true})
  T.eq(package.path, before, "package.path restored")
  -- Configs that declare nothing: nothing to run.
  T.eq(config.prepare(FIXTURES .. "cfg_with_arg.lua:res=1", {}), false)
  T.eq(config.register_pp_ops(FIXTURES .. "cfg_table.lua"), false)
  T.eq(config.module(FIXTURES .. "cfg_table.lua"), {config = {seed = 0, lr = 0.01}})
end)

T.test("config module mistakes name the file and the key", function()
  local path = os.tmpname()
  local function with(text, pattern)
    bv.fs.write_file(path, text)
    T.raises(function() config.load(path) end, pattern)
  end
  with("return {get_config = function() return {} end, prepar = function() end}",
       'returns a module with an unknown key "prepar"')
  with("return {get_config = function() return {} end, prepare = 'x'}",
       'prepare in "' .. path .. '" must be a function, got a string')
  with("return {register_pp_ops = function() end}", '"' .. path .. '" returns a module without get_config')
  with("return {get_config = function() return 1 end, prepare = function() end}",
       'get_config in "' .. path .. '" returned a number, expected a table')
  os.remove(path)
end)

T.test("a Python config is refused with the Lua example and the translation table", function()
  local msg = T.raises(function() config.load("configs/x.py") end,
    'config: "configs/x.py" is a Python config; bvlua\'s configs are Lua files. To translate '
    .. "one: configs/lines/resnet.lua is the GPU tutorial's lines_resnet.py in Lua, and the "
    .. '"Configs" section of README.md has a table of Python -> Lua')
  T.truthy(not msg:find("syntax error") and not msg:find("cannot read"), msg)
  T.truthy(bv.fs.exists("configs/lines/resnet.lua"), "the example exists")
  -- The README section the message names holds the table.
  local readme = bv.fs.read_file("README.md")
  local section = readme:match("\n### Configs\n(.-)\n### ")
  T.truthy(section and section:find("| big_vision (Python) | bvlua (Lua) |", 1, true),
           "README's Configs section has the table")
  -- The tutorial's file names map to their translations; a .lua beside the .py is named.
  T.raises(function() config.load("lines_paligemma.py:freeze_vit") end,
    "the tutorial's lines_paligemma.py is configs/lines/paligemma.lua.")
  local tmp = os.tmpname()
  bv.fs.write_file(tmp .. ".py", "import ml_collections\n")
  bv.fs.write_file(tmp .. ".lua", "return {}\n")
  T.raises(function() config.module(tmp .. ".py") end,
    'is a Python config; bvlua\'s configs are Lua files (there is a "' .. tmp .. '.lua")')
  os.remove(tmp .. ".py"); os.remove(tmp .. ".lua"); os.remove(tmp)
end)

T.test("load errors name the file", function()
  local before = package.path
  T.raises(function() config.load(FIXTURES .. "missing.lua:x") end,
    'cannot read "' .. FIXTURES .. 'missing.lua"')
  T.raises(function() config.load(FIXTURES .. "cfg_bad.lua") end,
    '"' .. FIXTURES .. 'cfg_bad.lua" must return a table or a function')
  T.raises(function() config.load(FIXTURES .. "cfg_with_arg.lua:bogus=1") end,
    'Unhandled config args remain: "bogus"')
  T.eq(package.path, before, "package.path restored after errors")
end)

T.test("the example config loads, takes its args, and saves", function()
  local cfg = config.load(BIT_LINES .. ":flip=true,crop=false")
  T.eq(cfg.input.pp, "decode|flip_lr|flip_ud|resize(64, method='area')|value_range(-1, 1)|"
    .. 'onehot(3, key="label", key_result="labels")|keep("image", "labels")')
  local cropped = config.load(BIT_LINES .. ":flip=false,res=32")
  T.truthy(cropped.input.pp:find("resize(36, method='area')|random_crop(32)", 1, true), "crop by default")
  T.truthy(not cropped.input.pp:find("flip_lr", 1, true), "no flip")
  T.eq(config.load(BIT_LINES .. ":runlocal").input.batch_size, 8)
  T.eq(json.decode(config.to_json(cfg)), cfg)
end)

-- parse_cli ----------------------------------------------------------------------------------

T.test("the example config's inline op rotates by multiples of 90 degrees, all four", function()
  local cfg = config.load(BIT_LINES .. ":rot90")  -- uses random_rot90
  T.truthy(cfg.input.pp:find("|flip_lr|flip_ud|random_rot90|", 1, true), cfg.input.pp)
  T.eq(config.register_pp_ops(BIT_LINES), true)  -- what data workers run: registers it
  local op = bv.pp.build("random_rot90")
  local img = bv.arange(0, 6):reshape({2, 3, 1})  -- rows {0, 1, 2} and {3, 4, 5}
  local want = {
    [0] = {{{0}, {1}, {2}}, {{3}, {4}, {5}}},
    [1] = {{{2}, {5}}, {{1}, {4}}, {{0}, {3}}},          -- 90 degrees counter-clockwise
    [2] = {{{5}, {4}, {3}}, {{2}, {1}, {0}}},
    [3] = {{{3}, {0}}, {{4}, {1}}, {{5}, {2}}},
  }
  local seen = {}
  for seed = 1, 40 do
    local out = op({image = img}, bv.rng(seed)).image:totable()
    local k
    for i = 0, 3 do
      if select(1, pcall(T.eq, out, want[i])) then k = i end
    end
    T.truthy(k, "seed " .. seed .. ": not a rotation of the input")
    seen[k] = true
  end
  T.truthy(seen[0] and seen[1] and seen[2] and seen[3], "all four rotations occur in 40 draws")
end)

T.test("parse_cli: config, workdir, dry-run and overrides in order", function()
  local r = assert(config.parse_cli({"configs/x.lua:a=1", "--workdir", "runs/x",
    "--config.lr=0.1", "--config.input.batch_size", "32", "--noconfig.flip", "--dry-run",
    "--config.lr=0.2"}))
  T.eq(r, {config = "configs/x.lua:a=1", workdir = "runs/x", dry_run = true, help = false,
           overrides = {{"lr", "0.1"}, {"input.batch_size", "32"}, {"flip", "false"},
                        {"lr", "0.2"}}})
  r = assert(config.parse_cli({"--workdir=w", "c.lua", "--config.neg", "-1",
                               "--config.s="}))
  T.eq(r.workdir, "w")
  T.eq(r.overrides, {{"neg", "-1"}, {"s", ""}})
  T.eq(assert(config.parse_cli({"--config", "c.lua"})).config, "c.lua")
end)

T.test("parse_cli --device, and bv.device resolving it", function()
  T.eq(assert(config.parse_cli({"c.lua", "--device", "cuda:1"})).device, "cuda:1")
  T.eq(assert(config.parse_cli({"c.lua", "--device=cpu"})).device, "cpu")
  local r, err = config.parse_cli({"c.lua", "--device"})
  T.eq(r, nil)
  T.truthy(err:find("--device needs a value", 1, true), err)
  T.eq(bv.device("cpu"), "cpu")
  T.eq(bv.device("auto"), bv.cuda_available() and "cuda:0" or "cpu")
  T.eq(bv.device("auto", 0), bv.device())
  for _, bad in ipairs({"tpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "CPU"}) do
    T.raises(function() bv.device(bad) end, "device '" .. bad .. "' is not one of")
  end
  if not bv.cuda_available() then
    T.raises(function() bv.device("cuda") end, "use --device cpu")
    T.raises(function() bv.device("cuda:3", 3) end, "device 'cuda:3'")
  end
end)

T.test("parse_cli --stop-after: a step number, else a usage error naming the flag", function()
  T.eq(assert(config.parse_cli({"c.lua", "--stop-after", "10"})).stop_after, 10)
  T.eq(assert(config.parse_cli({"c.lua", "--stop-after=3"})).stop_after, 3)
  for _, bad in ipairs({"0", "x", "2.5"}) do
    local r, err = config.parse_cli({"c.lua", "--stop-after", bad})
    T.eq(r, nil)
    T.truthy(err:find("--stop-after needs a step number >= 1, got " .. bad, 1, true), err)
  end
end)

T.test("parse_cli: help needs no config", function()
  T.eq(assert(config.parse_cli({"--help"})).help, true)
  T.eq(assert(config.parse_cli({"-h", "c.lua"})).help, true)
end)

T.test("parse_cli: usage errors", function()
  local function err(argv)
    local r, msg = config.parse_cli(argv)
    T.eq(r, nil)
    return msg
  end
  T.eq(err({}), "no config given")
  T.eq(err({"--dry-run"}), "no config given")
  T.eq(err({"a.lua", "b.lua"}), 'two configs given: "a.lua" and "b.lua"')
  T.eq(err({"a.lua", "--config", "b.lua"}), 'two configs given: "a.lua" and "b.lua"')
  -- bvlua train x.lua:flip=true, crop=false (unquoted): the shell split the arguments.
  T.eq(err({"x.lua:flip=true,", "crop=false"}), 'two configs given: "x.lua:flip=true," and '
    .. '"crop=false": the shell splits the config\'s arguments at a blank; write them without '
    .. 'blanks (x.lua:flip=true,crop=false) or quote them')
  T.eq(err({"a.lua", "--bogus"}), "unknown flag --bogus")
  T.eq(err({"a.lua", "--dry-run=yes"}), "unknown flag --dry-run=yes")
  T.eq(err({"a.lua", "--workdir"}), "--workdir needs a value")
  T.eq(err({"a.lua", "--workdir="}), "--workdir needs a value")
  T.eq(err({"a.lua", "--config.lr"}), "--config.lr needs a value")
  T.eq(err({"a.lua", "--config.lr", "--dry-run"}), "--config.lr needs a value")
  T.eq(err({"a.lua", "--config.=1"}), "--config.: missing key after --config.")
  T.eq(err({"a.lua", "--noconfig.flip=1"}), "unknown flag --noconfig.flip=1")
end)

-- bvlua train --------------------------------------------------------------------------------

-- Runs train.main with stdout/stderr captured and a fake bv.fs; returns code, out, err, files.
local function run_train(argv)
  local train = require "bv.commands.train"
  local out, err, files, dirs = {}, {}, {}, {}
  local function sink(buf)
    return {write = function(self, ...)
      for _, s in ipairs({...}) do buf[#buf + 1] = tostring(s) end
      return self
    end, flush = function(self) return self end}
  end
  local real_out, real_err, real_bv = io.stdout, io.stderr, rawget(_G, "bv")
  io.stdout, io.stderr = sink(out), sink(err)
  -- The real bv, with a file system that records instead of writing.
  rawset(_G, "bv", setmetatable({fs = {mkdirs = function(d) dirs[#dirs + 1] = d end,
                                       write_file = function(p, text) files[p] = text end,
                                       exists = function(p) return files[p] ~= nil end,
                                       is_dir = function() return false end,
                                       read_file = function(p) return files[p] end,
                                       lock_workdir = function(d) files[d .. "/.bvlua.lock"] = "" end,
                                       remove_tmp_leftovers = function() return {} end,
                                       cwd = real_bv.fs.cwd}},
                                {__index = real_bv}))
  local ok, code = pcall(train.main, argv)
  io.stdout, io.stderr = real_out, real_err
  rawset(_G, "bv", real_bv)
  if not ok then error(code, 0) end
  return code, table.concat(out), table.concat(err), files, dirs
end

T.test("train: --dry-run prints the resolved config as indented JSON", function()
  local code, out, _, files = run_train({BIT_LINES .. ":flip=false",
    "--config.lr=0.1", "--config.model.depth", "50", "--dry-run"})
  T.eq(code, 0)
  local cfg = json.decode(out)
  T.eq(cfg.lr, 0.1)
  T.eq(cfg.model.depth, 50)
  T.truthy(out:find('\n  "lr": 0.1,\n', 1, true), "indented")
  T.eq(next(files), nil, "nothing written without --workdir")
end)

T.test("train: a workdir gets config.json, then the config's trainer runs", function()
  local cfg = HERE .. "/fixtures/cfg_fake_trainer.lua"
  bv.fs.write_file(cfg, string.format("return {trainer = %q, lr = 0.5}",
                                      HERE .. "/fixtures/fake_trainer.lua"))
  local code, out, _, files, dirs = run_train({cfg, "--workdir", "runs/b/", "--config.lr=0.25"})
  os.remove(cfg)
  T.eq(code, 0)
  T.eq(out, "")
  T.eq(dirs, {"runs/b/"})
  T.eq(json.decode(files["runs/b/config.json"]).lr, 0.25)
  T.eq(files["runs/b//.bvlua.lock"], "", "the workdir locked")
  T.eq(rawget(_G, "fake_trainer_call"), {lr = 0.25, workdir = "runs/b/", config_file = cfg})
  local train = require "bv.commands.train"
  T.raises(function() train.find_trainer("nope") end, "unknown trainer 'nope'")
  T.eq(type(train.find_trainer()), "function")
end)

T.test("train: usage errors exit 2, help exits 0, config errors raise", function()
  local code, _, err = run_train({BIT_LINES})
  T.eq(code, 2)
  T.truthy(err:find("bvlua train: --workdir is required", 1, true), err)
  T.truthy(err:find("usage: bvlua train", 1, true), err)
  code, _, err = run_train({"--frob"})
  T.eq(code, 2)
  T.truthy(err:find("unknown flag --frob", 1, true), err)
  local out
  code, out = run_train({"--help"})
  T.eq(code, 0)
  T.truthy(out:find("2  usage error", 1, true), "exit codes documented")
  -- A bad override is an error naming it; --dry-run lists every bad one and exits 1.
  T.raises(function() run_train({BIT_LINES, "--workdir", "w", "--config.nope=1"}) end,
    'unknown config key "nope" (--config.nope)')
  code, _, err = run_train({BIT_LINES, "--dry-run", "--config.nope=1", "--config.lrr=2"})
  T.eq(code, 1)
  T.truthy(err:find("2 problems in the overrides of", 1, true), err)
  T.truthy(err:find('unknown config key "nope" (--config.nope)', 1, true), err)
  T.truthy(err:find('unknown config key "lrr" (--config.lrr)', 1, true), err)
end)

T.run()
