#!/usr/bin/env bash
# Multi-process training over Gloo (bv.sharding): for the same global batch and seed, 2 processes
# (replicate, fsdp, zero1; a scanned model whose layers fsdp gives to different ranks; fsdp and
# zero1 on the test device) end with the 1-process parameters; fsdp holds about half the parameters and optimizer state per rank,
# zero1 half the optimizer state; checkpoints resume on another number of processes; a killed
# rank stops the run.
# Usage: dist_train_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: dist_train_test.sh path/to/bvlua}")
TMP=$(mktemp -d)
trap 'pkill -9 -f "$TMP/" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; tail -20 "$TMP/out" 2>/dev/null; exit 1; }

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

# The global batch is the whole data set and nothing is shuffled, so every step of every run
# sees the same 16 examples however they are split over processes. Momentum SGD with clipping and
# weight decay: the global gradient norm and the per-tensor state must both be right.
cat >"$TMP/cfg.lua" <<LUA
return {
  seed = 0, total_steps = 8, num_classes = 3, loss = "softmax_xent",
  input = {data = {name = "bv:jsonl", fname = "$TMP/train.jsonl", fopen_keys = {image = "$TMP"}},
           batch_size = 16, shuffle_buffer_size = 1,
           pp = 'decode|value_range(-1, 1)|onehot(3, key="label", key_result="labels")|keep("image", "labels")'},
  model_name = "vit", model = {variant = "mu/4", depth = 2, head_zeroinit = false, scan = false},
  optax_name = "big_vision.momentum_hp", optax = {dtype = "float32"}, lr = 0.1, wd = 1e-3,
  grad_clip_norm = 0.5, schedule = {}, accum_steps = 1,
  log_training_steps = 1, ckpt_steps = 4,
  sharding_strategy = {{".*", "replicate"}},
  evals = {train = {type = "classification", data = {name = "bv:jsonl", fname = "$TMP/train.jsonl",
                    fopen_keys = {image = "$TMP"}}, log_steps = 4, loss_name = "softmax_xent",
                    pp = 'decode|value_range(-1, 1)|onehot(3, key="label", key_result="labels")|keep("image", "labels")'}},
}
LUA
FSDP='--config.sharding_strategy=[[".*","fsdp(axis=\"data\", min_size_to_shard_mb=0)"]]'
ZERO1='--config.sharding_strategy=[[".*","zero1(axis=\"data\", min_size_to_shard_mb=0)"]]'
SCAN=--config.model.scan=true

train() {  # train WORKDIR NPROC ARGS...
  local w=$1 n=$2; shift 2
  "$BVLUA" train "$TMP/cfg.lua" --workdir "$TMP/$w" --nproc "$n" "$@" >>"$TMP/out" 2>&1 \
    || fail "train $w (nproc $n) exited with $?"
}
train one 1
train rep 2
train fsdp 2 "$FSDP"
train a2to1 2 "$FSDP" --config.total_steps=4   # 2 processes to step 4, then 1 to step 8
train a2to1 1
train a1to2 1 --config.total_steps=4           # and the other way round
train a1to2 2 "$FSDP"
train zero1 2 "$ZERO1"
train one_scan 1 $SCAN                          # layer stacks: fsdp splits them by layer
train fsdp_scan 2 "$FSDP" $SCAN
train s2to1 2 "$FSDP" $SCAN --config.total_steps=4
train s2to1 1 $SCAN
train one_accum 1 --config.accum_steps=2         # micro-batches: fetched values are reused
train fsdp_accum 2 "$FSDP" --config.accum_steps=2
# On the test device (core/fake_device.h: as strict as CUDA), as on GPUs: parameters, gradients,
# optimizer state and batches off the host, rank 0 on fake:0 and rank 1 on fake:1 (an allocation
# on the other's device fails), device tensors in one Gloo group and host tensors in another (as
# NCCL and its host group), every collective compared across ranks (BV_CHECK_COLLECTIVES: a
# mismatch fails at once instead of hanging); fsdp by layers and zero1, each saving checkpoints
# (every rank sends its optimizer state to rank 0) and resuming from one.
export BV_CHECK_COLLECTIVES=${BV_CHECK_COLLECTIVES:-1}
BV_TEST_DEVICE=1 train fsdp_scan_dev 2 "$FSDP" $SCAN --device fake
# remat'd layers keep their fetched parameters for the recomputation (one broadcast, not two)
BV_TEST_DEVICE=1 train fsdp_scan_keep_dev 2 "$FSDP" $SCAN --device fake \
  --config.sharding_reshard_after_forward=false
BV_TEST_DEVICE=1 train zero1_dev 2 "$ZERO1" --device fake
BV_TEST_DEVICE=1 train fsdp_dev_resume 2 "$FSDP" --device fake --config.total_steps=4
BV_TEST_DEVICE=1 train fsdp_dev_resume 2 "$FSDP" --device fake
BV_TEST_DEVICE=1 train zero1_dev_resume 2 "$ZERO1" --device fake --config.total_steps=4
BV_TEST_DEVICE=1 train zero1_dev_resume 2 "$ZERO1" --device fake
grep -q "Resumed from .*zero1_dev_resume.* at step 4" "$TMP/out" || fail "zero1 on fake resumed at 4"
grep -q "NOTE: Training on fake:0 .*rank 0 of 2, collectives by gloo" "$TMP/out" \
  || fail "the first NOTE names the device, the rank and the backend"

# Rank 0 writes a checkpoint for longer than the collectives' timeout (here 2 s, 300 by default;
# a 33 GB checkpoint): the other ranks wait for it on the store, not in their next collective.
cat >"$TMP/slow_save.lua" <<'LUA'
return function(config, workdir, run)
  local save = bv.ckpt.save
  bv.ckpt.save = function(...)
    os.execute("sleep 4")
    return save(...)
  end
  return require("bv.trainers.classification")(config, workdir, run)
end
LUA
BV_DIST_TIMEOUT=2 train slow_save 2 --config.trainer="$TMP/slow_save.lua" --config.total_steps=4 \
  --config.ckpt_steps=2

# Parameters and optimizer state against the 1-process run. float32 sums in another order differ
# in the last bits; momentum_hp keeps its momentum in bfloat16, where such a difference can round
# to the neighbouring bf16 value (a relative 2^-8). Measured: see the printed lines.
"$BVLUA" -e "
for _, pair in ipairs({{'rep', 'one'}, {'fsdp', 'one'}, {'a2to1', 'one'}, {'a1to2', 'one'},
                      {'zero1', 'one'}, {'fsdp_scan', 'one_scan'}, {'s2to1', 'one_scan'},
                      {'fsdp_accum', 'one_accum'}, {'fsdp_scan_dev', 'one_scan'},
                      {'fsdp_scan_keep_dev', 'one_scan'},
                      {'zero1_dev', 'one'}, {'fsdp_dev_resume', 'one'},
                      {'zero1_dev_resume', 'one'}}) do
  local w, ref = pair[1], bv.ckpt.load('$TMP/' .. pair[2])
  assert(ref.step == 8, 'the 1-process run ended at step ' .. ref.step)
  local ck = bv.ckpt.load('$TMP/' .. w)
  assert(ck.step == 8, w .. ' ended at step ' .. ck.step)
  local worst_p, worst_m, n = 0, 0, 0
  for name, t in pairs(ref.tensors) do
    if name:find('^params/') or name:find('^opt/') then
      local other = ck.tensors[name] or error(w .. ' lacks ' .. name)
      local a, b = other:to('float64'), t:to('float64')
      local d = (a - b):abs():max():item()
      if t:dtype() == 'bfloat16' then
        -- elementwise, relative to the larger magnitude (tiny values: 1e-6 absolute)
        local rel = ((a - b):abs() / a:abs():maximum(b:abs()):clamp(1e-6)):max():item()
        worst_m = math.max(worst_m, rel)
      else
        worst_p = math.max(worst_p, d)
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
-- The evaluator's numbers, each rank on half of the split and summed, equal the 1-process ones.
local function evals(w)
  local out = {}
  for line in io.lines('$TMP/' .. w .. '/big_vision_metrics.txt') do
    local step, acc = line:match('\"step\": (%d+).-\"train/prec@1\": ([%d.e+-]+)')
    local loss = line:match('\"train/loss\": ([%d.e+-]+)')
    if step then out[#out + 1] = {tonumber(step), tonumber(acc), tonumber(loss)} end
  end
  return out
end
local e1, e2 = evals('one'), evals('fsdp')
assert(#e1 == 3 and #e2 == 3, 'expected evaluations at steps 0, 4 and 8, got ' .. #e1 .. ' and ' .. #e2)
for i = 1, 3 do
  assert(e1[i][1] == e2[i][1] and e1[i][2] == e2[i][2], 'prec@1 differs at step ' .. e1[i][1])
  assert(math.abs(e1[i][3] - e2[i][3]) < 1e-5, 'eval loss differs at step ' .. e1[i][1])
end
-- fsdp: rank 0 holds about half of the optimizer state, the two ranks together all of it.
local function first(w, key)
  for line in io.lines('$TMP/' .. w .. '/big_vision_metrics.txt') do
    local v = line:match('\"' .. key .. '\": ([%d.e+]+)')
    if v then return tonumber(v) end
  end
  error(w .. ': no ' .. key)
end
-- The logged global norms (summed over ranks' parts under fsdp and zero1) equal the 1-process
-- ones at every step; clipping (grad_clip_norm 0.5, l2_grads about 2.5) depends on l2_grads.
local function norms(w)
  local out = {}
  for line in io.lines('$TMP/' .. w .. '/big_vision_metrics.txt') do
    local step = line:find('\"global_schedule\"', 1, true) and line:match('^{\"step\": (%d+),')
    if step then
      out[tonumber(step)] = {}
      for _, k in ipairs({'l2_grads', 'l2_params', 'l2_updates'}) do
        out[tonumber(step)][k] = tonumber(line:match('\"' .. k .. '\": ([%d.e+-]+)'))
      end
    end
  end
  return out
end
for _, pair in ipairs({{'fsdp', 'one'}, {'zero1', 'one'}, {'fsdp_scan', 'one_scan'},
                      {'fsdp_scan_dev', 'one_scan'}, {'zero1_dev', 'one'}}) do
  local a, b = norms(pair[1]), norms(pair[2])
  for step = 1, 8 do
    for k, v in pairs(b[step]) do
      local other = a[step] and a[step][k] or error(pair[1] .. ' logged no ' .. k .. ' at step ' .. step)
      assert(math.abs(other - v) <= 1e-5 * math.abs(v), string.format('%s: %s at step %d is %g, '
             .. 'the 1-process run has %g', pair[1], k, step, other, v))
    end
  end
end
for _, w in ipairs({'fsdp', 'fsdp_scan', 'zero1'}) do
  for _, what in ipairs({'opt_state_bytes', 'param_bytes'}) do
    local full, half, all = first('rep', what), first(w, what), first(w, what .. '_all')
    print(string.format('%s %s: replicate %d per rank, rank 0 %d, all ranks %d', w, what, full,
                        half, all))
    if w == 'zero1' and what == 'param_bytes' then
      assert(half == full, 'zero1 keeps whole parameters')
    else
      assert(half > 0.35 * full and half < 0.65 * full, w .. ' rank 0 does not hold about half')
      -- each rank's state has its own count (8 bytes); each fsdp placeholder is one element
      assert(all >= full and all - full <= 1024, w .. ': the ranks together do not hold it all')
    end
  end
end" \
  || fail "comparing runs"

# rank1_pid WORKDIR: waits (up to 30 s) for rank 1 of a run to be training; prints its pid.
rank1_pid() {
  local pid
  for _ in $(seq 1 300); do
    for pid in $(pgrep -f "$TMP/cfg.lua"); do
      if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'RANK=1' \
         && [ -f "$TMP/$1/big_vision_metrics.txt" ]; then echo "$pid"; return; fi
    done
    sleep 0.1
  done
}

# SIGTERM to rank 1 alone: every rank stops at the same step, a checkpoint is saved there, and
# the run ends cleanly (exit 0).
"$BVLUA" train "$TMP/cfg.lua" --workdir "$TMP/term" --nproc 2 --config.total_steps=100000 \
  --config.ckpt_steps=0 >"$TMP/out" 2>&1 &
launcher=$!
victim=$(rank1_pid term)
[ -n "$victim" ] || fail "no rank 1 process found"
sleep 1
kill -TERM "$victim"
start=$(date +%s)
wait "$launcher" || fail "SIGTERM to rank 1: the run exited with $?"
took=$(( $(date +%s) - start ))
[ "$took" -le 60 ] || fail "stopping after SIGTERM took ${took}s"
grep -q "a stop request on another rank received: saved a checkpoint" "$TMP/out" \
  || fail "rank 0 did not save and stop for rank 1's SIGTERM"
[ -f "$TMP/term/LAST" ] || fail "no checkpoint after SIGTERM"
echo "SIGTERM to rank 1: checkpoint $(cat "$TMP/term/LAST"), stopped in ${took}s"

# Kill rank 1 mid-run: the launcher and rank 0 stop within 60 s, naming rank 1.
: >"$TMP/out"
"$BVLUA" train "$TMP/cfg.lua" --workdir "$TMP/kill" --nproc 2 --config.total_steps=100000 \
  --config.ckpt_steps=0 >"$TMP/out" 2>&1 &
launcher=$!
victim=$(rank1_pid kill)
[ -n "$victim" ] || fail "no rank 1 process found"
sleep 1
kill -9 "$victim"
start=$(date +%s)
wait "$launcher"
rc=$?
took=$(( $(date +%s) - start ))
[ "$rc" -ne 0 ] || fail "the launcher exited 0 after rank 1 was killed"
[ "$took" -le 60 ] || fail "stopping took ${took}s"
grep -q "rank 1" "$TMP/out" || fail "no message names rank 1"
echo "killed rank 1: stopped in ${took}s with exit code $rc"
echo "OK"
