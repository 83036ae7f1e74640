#!/usr/bin/env bash
# A shortened `bvlua train configs/paligemma.lua:variant=tiny`: the whole PaliGemma path (lines
# data, a SentencePiece model trained by the config's prepare, the prefix-LM trainer, decoding,
# the vqa and perplexity evaluators) runs, the loss falls, and the vqa outfile is written per
# step; prepare runs once, in 1 process and in 2.
# Usage: paligemma_tiny_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: paligemma_tiny_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# The output without libtorch's stack frames, so that each rank's own error shows.
fail() { echo "FAIL: $*"; grep -v 'frame #[0-9]' "$TMP/out" 2>/dev/null | tail -40; exit 1; }

cd "$TMP" || exit 1  # the config reads data/lines/ relative to the working directory
"$BVLUA" run "$ROOT/scripts/make_lines.lua" data/lines --train 64 --val 16 --test 1 >/dev/null \
  || fail "make_lines"
"$BVLUA" train "$ROOT/configs/paligemma.lua:variant=tiny" --workdir w \
  --config.total_steps=30 --config.log_training_steps=5 --config.ckpt_steps=30 \
  --config.input.batch_size=8 --config.evals.val/vqa.log_percent=1.0 \
  --config.evals.val/pplx.log_percent=1.0 >"$TMP/out" 2>&1 || fail "train exited with $?"

[ -f data/lines/tiny_sp.model ] || fail "the tiny tokenizer was not trained"
# The config's prepare trained it, once; the data existed, so nothing was drawn.
[ "$(grep -c 'training the tiny tokenizer' "$TMP/out")" = 1 ] || fail "prepare did not run once"
grep -q 'drawing the lines' "$TMP/out" && fail "prepare drew the data that was there"
for step in 0 30; do
  [ -s "w/vqa_val_$step.json" ] || fail "no vqa outfile for step $step"
done
grep -q '"answer"' w/vqa_val_30.json || fail "the vqa outfile holds no answers"
grep -q '^\[30\] val/vqa/acc = ' "$TMP/out" || fail "val/vqa/acc not printed at step 30"
grep -q '^\[30\] val/pplx/avg = ' "$TMP/out" || fail "val/pplx/avg not printed at step 30"
# The loss at step 30 is below the loss at step 1 (it starts near log(vocab) = 4.2).
"$BVLUA" -e "
local first, last
for line in io.lines('w/big_vision_metrics.txt') do
  local step, loss = line:match('\"step\": (%d+).-\"training_loss\": ([%d.e+-]+)')
  if step then first = first or tonumber(loss); last = tonumber(loss) end
end
assert(first and last, 'no training_loss in the metrics file')
assert(last < 0.5 * first, string.format('loss did not fall: %g -> %g', first, last))" \
  || fail "loss"
# On the fake device (runtime/core/fake_device.h: an op that meets a CPU tensor among device
# ones fails): the step, the perplexity and the decoding evaluators, a checkpoint, the same
# numbers as on the CPU.
for dev in cpu fake; do
  BV_TEST_DEVICE=1 "$BVLUA" train "$ROOT/configs/paligemma.lua:variant=tiny" --workdir "w_$dev" \
    --device $dev --config.total_steps=3 --config.log_training_steps=1 --config.ckpt_steps=3 \
    --config.input.batch_size=8 --config.evals.val/vqa.log_percent=1.0 \
    --config.evals.val/pplx.log_percent=1.0 >"$TMP/out_$dev" 2>&1 || fail "train --device $dev exited with $?"
done
grep -q '^NOTE: Training on fake:0' "$TMP/out_fake" || fail "the fake-device run does not say its device"
"$BVLUA" -e "
local function read(path)
  local out = {}
  for line in io.lines(path) do
    local row = require('bv.json').decode(line)
    for _, k in ipairs({'training_loss', 'val/pplx/avg', 'val/vqa/acc'}) do
      if row[k] then out[row.step .. k] = row[k] end
    end
  end
  return out
end
local want, got = read('w_cpu/big_vision_metrics.txt'), read('w_fake/big_vision_metrics.txt')
local n = 0
for k, v in pairs(want) do
  n = n + 1
  assert(got[k] and math.abs(got[k] - v) <= 1e-4 * math.abs(v) + 1e-6, k .. ': ' .. tostring(got[k]) .. ' vs ' .. v)
end
assert(n >= 5, 'only ' .. n .. ' values compared')" || fail "the fake device's numbers differ from the CPU's"
[ -d w_fake/ckpt-000000003 ] || fail "no checkpoint from the fake-device run"
# The same trainer in 2 processes with fsdp (bv.sharding): it runs, rank 0 alone writes. The
# tokenizer is gone, so rank 0 prepares it (once) while rank 1 waits for it.
rm data/lines/tiny_sp.model
"$BVLUA" train "$ROOT/configs/paligemma.lua:variant=tiny" --workdir w2 --nproc 2 \
  --config.total_steps=4 --config.log_training_steps=2 --config.ckpt_steps=4 \
  --config.input.batch_size=8 --config.evals.val/vqa.log_percent=1.0 \
  --config.evals.val/pplx.log_percent=1.0 \
  '--config.sharding_strategy=[[".*","fsdp(axis=\"data\", min_size_to_shard_mb=0)"]]' \
  >"$TMP/out" 2>&1 || fail "2-process train exited with $?"
[ -s w2/vqa_val_4.json ] || fail "no vqa outfile from the 2-process run"
[ "$(grep -c 'training the tiny tokenizer' "$TMP/out")" = 1 ] \
  || fail "prepare did not run once in 2 processes"
# Each rank decodes its half of the 16 val examples; rank 0 writes all of them, in order.
"$BVLUA" -e "
local recs = require('bv.json').decode(bv.fs.read_file('w2/vqa_val_4.json'))
assert(#recs == 16, 'the 2-process outfile holds ' .. #recs .. ' records, not 16')
local want = {}
for line in io.lines('data/lines/val.jsonl') do want[#want + 1] = tostring(require('bv.json').decode(line).label) end
for i, r in ipairs(recs) do assert(r.gts[1] == want[i], 'record ' .. i .. ' is out of order') end" \
  || fail "2-process vqa outfile"
grep -q '"val/vqa/num": 16' w2/big_vision_metrics.txt || fail "val/vqa/num is not 16 in the 2-process run"
grep -q '"opt_state_bytes_all"' w2/big_vision_metrics.txt || fail "no opt_state_bytes_all"
echo "OK"
