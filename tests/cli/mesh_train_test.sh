#!/usr/bin/env bash
# Hybrid sharding over big_vision's 2-D mesh (bv.sharding, bv.dist's subgroups): 4 processes as
# config.mesh = {{"replica", 2}, {"data", -1}} with fsdp(axis="data") end with the 1-process
# parameters and optimizer state (as cli.dist_train_test's 2-process runs do), and the bytes each
# rank sends over the replica axis in a step, logged by the run, equal the planner's figure
# (together: the whole model's float32 bytes once per replica group; half with
# sharding_wire_dtype bfloat16). Also zero1 on the same
# mesh, and tests/lua/dist/mesh_groups.lua: the subgroups themselves, on the CPU and on the test
# device, collectives checked across ranks.
# Usage: mesh_train_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: mesh_train_test.sh path/to/bvlua}")
TMP=$(mktemp -d)
trap 'pkill -9 -f "$TMP/" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; tail -20 "$TMP/out" 2>/dev/null; exit 1; }
export BV_CHECK_COLLECTIVES=${BV_CHECK_COLLECTIVES:-1}

timeout 120 "$BVLUA" launch --nproc 4 -- run tests/lua/dist/mesh_groups.lua >"$TMP/out" 2>&1 \
  || fail "mesh_groups.lua on the CPU"
BV_TEST_DEVICE=1 timeout 120 "$BVLUA" launch --nproc 4 -- run tests/lua/dist/mesh_groups.lua \
  fake >"$TMP/out" 2>&1 || fail "mesh_groups.lua on the test device"
: >"$TMP/out"

# 16 examples; the colour gives the label.
"$BVLUA" -e "
local json = require 'bv.json'
local rng, lines = bv.rng(0), {}
for i = 1, 16 do
  local img = (bv.rand({8, 8, 3}, rng) * 255):to('uint8')
  bv.image.write_png(img, '$TMP/' .. i .. '.png')
  lines[i] = json.encode({image = i .. '.png', label = i % 3})
end
bv.fs.write_file('$TMP/train.jsonl', table.concat(lines, '\n'))" || fail "making data"

# The whole data set is the global batch, nothing shuffled: every run sees the same examples
# each step however they are split. Momentum SGD with clipping and weight decay (the global norm
# sums each data group's shards once).
cat >"$TMP/cfg.lua" <<LUA
return {
  seed = 0, total_steps = 3, num_classes = 3, loss = "softmax_xent",
  input = {data = {name = "bv:jsonl", fname = "$TMP/train.jsonl", fopen_keys = {image = "$TMP"}},
           batch_size = 16, shuffle_buffer_size = 1,
           pp = 'decode|value_range(-1, 1)|onehot(3, key="label", key_result="labels")|keep("image", "labels")'},
  model_name = "vit", model = {variant = "mu/4", depth = 1, head_zeroinit = false, scan = false},
  optax_name = "big_vision.momentum_hp", optax = {dtype = "float32"}, lr = 0.1, wd = 1e-3,
  grad_clip_norm = 0.5, schedule = {}, log_training_steps = 1, ckpt_steps = 3,
}
LUA
MESH='--config.mesh=[["replica",2],["data",-1]]'
FSDP='--config.sharding_strategy=[[".*","fsdp(axis=\"data\", min_size_to_shard_mb=0)"]]'
ZERO1='--config.sharding_strategy=[[".*","zero1(axis=\"data\", min_size_to_shard_mb=0)"]]'
train() {  # train WORKDIR NPROC ARGS...
  local w=$1 n=$2; shift 2
  timeout 300 "$BVLUA" train "$TMP/cfg.lua" --workdir "$TMP/$w" --nproc "$n" "$@" >>"$TMP/out" 2>&1 \
    || fail "train $w (nproc $n) exited with $?"
}
train one 1
train mesh 4 "$MESH" "$FSDP"
grep -q "NOTE: Mesh replica 2 x data 2" "$TMP/out" || fail "the mesh note"
train mesh_zero1 4 "$MESH" "$ZERO1"

grep "sent .* bytes over the replica axis" "$TMP/out" >"$TMP/bytes" || fail "no bytes line"
: >"$TMP/out"
# The same with sharding_wire_dtype bfloat16: the shards cross the replica axis as bfloat16.
train mesh_bf16 4 "$MESH" "$FSDP" --config.sharding_wire_dtype=bfloat16
grep "sent .* bytes over the replica axis" "$TMP/out" >"$TMP/bytes_bf16" || fail "no bf16 bytes line"
"$BVLUA" -e "
-- Parameters and optimizer state against the 1-process run (float32 sums in another order
-- differ in the last bits; the bf16 momentum may round to a neighbouring bf16 value).
local ref = bv.ckpt.load('$TMP/one')
for _, w in ipairs({'mesh', 'mesh_zero1'}) do
  local ck = bv.ckpt.load('$TMP/' .. w)
  assert(ck.step == 3 and ref.step == 3, w .. ' ended at step ' .. ck.step)
  local worst_p, worst_m, n = 0, 0, 0
  for name, t in pairs(ref.tensors) do
    if name:find('^params/') or name:find('^opt/') then
      local a, b = (ck.tensors[name] or error(w .. ' lacks ' .. name)):to('float64'), t:to('float64')
      if t:dtype() == 'bfloat16' then
        worst_m = math.max(worst_m, ((a - b):abs() / a:abs():maximum(b:abs()):clamp(1e-6)):max():item())
      else
        worst_p = math.max(worst_p, (a - b):abs():max():item())
      end
      n = n + 1
    end
  end
  assert(n > 10, 'too few tensors compared')
  print(string.format('%s: max |difference| to the 1-process run: float32 %.3g, bf16 momentum '
                      .. '%.3g (relative)', w, worst_p, worst_m))
  assert(worst_p < 1e-5, w .. ': float32 tensors differ from the 1-process run by ' .. worst_p)
  assert(worst_m <= 2 ^ -7, w .. ': bf16 momentum differs from the 1-process run by ' .. worst_m)
end
-- bfloat16 on the wire: the same run to bfloat16 rounding of what travels.
do
  local ck, worst = bv.ckpt.load('$TMP/mesh_bf16'), 0
  for name, t in pairs(ref.tensors) do
    if name:find('^params/') then
      worst = math.max(worst, (ck.tensors[name]:to('float64') - t:to('float64')):abs():max():item())
    end
  end
  print(string.format('mesh_bf16: max |difference| of the parameters to the 1-process run %.3g', worst))
  assert(worst > 0 and worst < 2e-3, 'mesh_bf16: parameters differ from the 1-process run by ' .. worst)
end
-- Bytes over the replica axis: measured (bv.dist's count) = planned on each of the 4 ranks, and
-- the two data ranks together send every parameter's float32 gradient once.
local total = 0
for name, t in pairs(ref.tensors) do
  if name:find('^params/') then total = total + t:numel() * 4 end
end
local function check_bytes(file, want_total)
  local by_rank = {}
  for line in io.lines(file) do
    local r, d, sent, planned = line:match('rank (%d) %(replica %d, data (%d)%) sent (%d+) bytes over the replica axis in its first step; planned (%d+)')
    assert(r, 'unreadable: ' .. line)
    print(string.format('rank %s (data %s): sent %s bytes over the replica axis, planned %s', r, d, sent, planned))
    assert(sent == planned and tonumber(sent) > 0, line)
    assert(not by_rank[r], 'rank ' .. r .. ' logged twice')
    by_rank[r] = tonumber(sent)
  end
  for r = 0, 3 do assert(by_rank[tostring(r)], 'rank ' .. r .. ' logged no bytes') end
  assert(by_rank['0'] == by_rank['2'] and by_rank['1'] == by_rank['3'], 'replica peers differ')
  assert(by_rank['0'] + by_rank['1'] == want_total, string.format('data ranks sent %d + %d, want %d bytes', by_rank['0'], by_rank['1'], want_total))
end
check_bytes('$TMP/bytes', total)
check_bytes('$TMP/bytes_bf16', total // 2)  -- every parameter is float32: half as bfloat16
print('total model bytes ' .. total)
" || fail "comparison"
echo "mesh_train: ok"
