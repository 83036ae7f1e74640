-- What a trainer saves to resume exactly: parameters, the random stream and the data position.
-- Everything comes back from bv.ckpt bit for bit, and the restored stream and pipeline continue
-- as the originals would have.
local T = require "tests.lua.lib.testing"
local json = require "bv.json"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

T.test("params, rng state and data position survive a checkpoint", function()
  local rows = {}
  for i = 1, 12 do rows[i] = json.encode({x = i}) end
  bv.fs.write_file(tmp .. "/d.jsonl", table.concat(rows, "\n"))
  local input = {data = {name = "bv:jsonl", fname = tmp .. "/d.jsonl"}, batch_size = 3,
                 shuffle_buffer_size = 4}
  local m = bv.models.build("vit", {variant = "mu/4", num_classes = 2, image_size = 8})
  local params, rng = m:init(0), bv.rng(5)
  local it = bv.data.training(input, {seed = 1, workers = 2})
  it:next(); it:next(); rng:uniform()

  local tensors = {["rng"] = rng:state()}
  for name, t in pairs(params) do tensors["params/" .. name] = t end
  bv.ckpt.save(tmp .. "/work", 2, tensors, {step = 2, data_position = it:position()})
  local want_batch, want_draw = it:next().x, rng:uniform()

  local ck = bv.ckpt.load(tmp .. "/work")
  T.eq(ck.step, 2); T.eq(ck.state.data_position, 6)
  for name, t in pairs(params) do T.truthy(ck.tensors["params/" .. name] == t, name) end
  local rng2 = bv.rng(0):set_state(ck.tensors.rng)
  local it2 = bv.data.training(input, {seed = 1, workers = 1, position = ck.state.data_position})
  T.truthy(it2:next().x == want_batch, "the same next batch")
  T.eq(rng2:uniform(), want_draw)
end)

T.run()
os.execute("rm -rf '" .. tmp .. "'")
