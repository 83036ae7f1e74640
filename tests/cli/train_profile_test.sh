#!/usr/bin/env bash
# `bvlua train ... --profile START:STOP`: the steps of the window are recorded with libtorch's
# profiler, the trace (Chrome trace format) goes to WORKDIR/profile/steps_START-STOP.pt.trace.json
# with the table beside it, the table of the slowest ops to stdout; evaluations and checkpoints
# in the window are rows of their own, the training steps' time without them, and named ranges
# inside their step in the trace; windows cut short by the run's end or a resume; bad windows
# are usage errors. Usage: train_profile_test.sh path/to/bvlua
set -u
BVLUA=${1:?usage: train_profile_test.sh path/to/bvlua}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/checks.sh"

# Eight 16x16 images, labels 0..1.
"$BVLUA" -e "
local json = require 'bv.json'
local rng, lines = bv.rng(0), {}
for i = 1, 8 do
  bv.image.write_png((bv.rand({16, 16, 3}, rng) * 255):to('uint8'), '$TMP/' .. i .. '.png')
  lines[i] = json.encode({image = i .. '.png', label = i % 2})
end
bv.fs.write_file('$TMP/train.jsonl', table.concat(lines, '\n'))" \
  || { echo "FAIL: making data"; exit 1; }

cat >"$TMP/cfg.lua" <<LUA
return {
  seed = 0, total_steps = 6, num_classes = 2, loss = "softmax_xent",
  input = {data = {name = "bv:jsonl", fname = "$TMP/train.jsonl", fopen_keys = {image = "$TMP"}},
           batch_size = 4, shuffle_buffer_size = 8,
           pp = 'decode|value_range(-1, 1)|onehot(2, key="label", key_result="labels")|keep("image", "labels")'},
  model_name = "bit", model = {depth = 26, width = 0.5},
  optax_name = "scale_by_adam", lr = 0.001, log_training_steps = 2, ckpt_steps = 3,
}
LUA
train() { run "$BVLUA" --threads 1 train "$TMP/cfg.lua" "$@"; }
valid_trace() {  # the file is JSON whose events hold the ops and the steps' ranges
  "$BVLUA" -e "
    local t = require('bv.json').decode(bv.fs.read_file('$1'))
    local names = {}
    for _, e in ipairs(t.traceEvents) do if e.name then names[e.name] = true end end
    for _, want in ipairs({$2}) do
      if not names[want] then error('$1 has no event ' .. want) end
    end"
}

# Steps 2..3 of 6.
W=$TMP/w
train --workdir "$W" --profile 2:3
expect_rc 0 "--profile 2:3"
T=$W/profile/steps_2-3.pt.trace.json
check "trace written" [ -s "$T" ]
check "trace: JSON with the steps and the ops" valid_trace "$T" \
  "'ProfilerStep#2', 'ProfilerStep#3', 'aten::convolution'"
check "no step 1 or 4 in it" bash -c "! grep -q 'ProfilerStep#[14]\"' '$T'"
check "table beside it" [ -s "$W/profile/steps_2-3.txt" ]
expect_in out "Profile of steps 2-3 on cpu with 1 threads (2 step(s)," "the table's title"
expect_in out "   self ms  self %   total ms    calls  op" "the table's header"
expect_in out "aten::" "ops named"
expect_in out "(in the steps but in no op: Lua, waiting for data, logging)" "time outside ops"
expect_in out "trace: $T (open it in https://ui.perfetto.dev or chrome://tracing)" "where it is"
check "the table on stdout is the file's" grep -qF "$(head -1 "$W/profile/steps_2-3.txt")" "$TMP/out"

# Evaluations in the window: val at steps 2 and 4, test at 3, a checkpoint at 3. The table has
# the training steps and each evaluator apart, and their times add up to the steps' whole.
cat >"$TMP/cfg_evals.lua" <<LUA
local c = dofile("$TMP/cfg.lua")
c.evals = {val = {type = "classification", data = c.input.data, pp = c.input.pp, loss_name = c.loss, log_steps = 2},
           test = {type = "classification", data = c.input.data, pp = c.input.pp, loss_name = c.loss, log_steps = 3}}
return c
LUA
WE=$TMP/we
run "$BVLUA" --threads 1 train "$TMP/cfg_evals.lua" --workdir "$WE" --profile 2:5
expect_rc 0 "--profile 2:5 with evaluations"
TE=$WE/profile/steps_2-5
expect_in out "Profile of steps 2-5 on cpu with 1 threads (4 step(s)," "title with the steps"
expect_in out "host ops, by self time (training steps and the ranges above together):" "ops header"
expect_in out "(in eval/val, eval/test, checkpoint but in no op)" "the ranges' own time"
breakdown() {  # the table's rows: counts, each mean its total over its count, the sum the whole
  "$BVLUA" -e "
    local text = bv.fs.read_file('$TE.txt')
    local whole = assert(tonumber(text:match('%(4 step%(s%), ([%d.]+) s%)')), 'no title')
    local rows, sum = {}, 0
    for name, n, total, mean in text:gmatch('\n(%S[%S ]-) +(%d+) +([%d.]+) +([%d.]+) +[%d.]+%%') do
      rows[name] = {n = tonumber(n), total = tonumber(total), mean = tonumber(mean)}
      sum = sum + tonumber(total)
      assert(math.abs(tonumber(total) / tonumber(n) - tonumber(mean)) < 0.002, name .. ': mean')
    end
    local want = {['training steps'] = 4, ['eval/val'] = 2, ['eval/test'] = 1, checkpoint = 1}
    for name, n in pairs(want) do
      assert(rows[name], 'no row ' .. name .. ' in:\n' .. text)
      assert(rows[name].n == n, name .. ': count ' .. rows[name].n .. ', want ' .. n)
    end
    assert(math.abs(sum - whole) < 0.006, 'rows sum to ' .. sum .. ', the steps took ' .. whole)
    assert(rows['training steps'].total < whole, 'training steps hold the evaluations')
    -- each evaluator's rows hold at least what the metrics timed (z/secs/eval/NAME)
    local timed = {val = 0, test = 0}
    for line in io.lines('$WE/big_vision_metrics.txt') do
      local m = require('bv.json').decode(line)
      if m.step >= 2 and m.step <= 5 then
        for name in pairs(timed) do timed[name] = timed[name] + (m['z/secs/eval/' .. name] or 0) end
      end
    end
    for name, secs in pairs(timed) do
      assert(secs > 0 and rows['eval/' .. name].total >= secs - 0.002,
             name .. ': ' .. rows['eval/' .. name].total .. ' s, the metrics timed ' .. secs)
    end"
}
check "table: training steps, evaluations and checkpoints apart" breakdown
nested_ranges() {  # each range once per step it ran in, inside that step's ProfilerStep#N
  "$BVLUA" -e "
    local t = require('bv.json').decode(bv.fs.read_file('$TE.pt.trace.json'))
    local steps, ranges = {}, {}
    for _, e in ipairs(t.traceEvents) do
      local n = e.name and tonumber(e.name:match('^ProfilerStep#(%d+)$'))
      if n then steps[n] = e end
      if e.name == 'eval/val' or e.name == 'eval/test' or e.name == 'checkpoint' then
        ranges[#ranges + 1] = e
      end
    end
    local found = {}
    for _, r in ipairs(ranges) do
      for n, s in pairs(steps) do
        if r.ts >= s.ts and r.ts + r.dur <= s.ts + s.dur then
          found[#found + 1] = r.name .. '@' .. n
        end
      end
    end
    table.sort(found)
    local got, want = table.concat(found, ' '), 'checkpoint@3 eval/test@3 eval/val@2 eval/val@4'
    assert(got == want, 'ranges in steps: ' .. got .. ', want ' .. want)"
}
check "trace: the evaluations and the checkpoint as ranges in their steps" nested_ranges

# A window past the end: recorded up to the last step.
W2=$TMP/w2
train --workdir "$W2" --profile 5:9
expect_rc 0 "--profile 5:9 of 6 steps"
check "window cut at the last step" [ -s "$W2/profile/steps_5-6.pt.trace.json" ]

# Resuming past the window's start: it begins at the first step trained (4), ends at 5.
W3=$TMP/w3
train --workdir "$W3" --config.total_steps 3
expect_rc 0 "3 steps"
train --workdir "$W3" --profile 2:5
expect_rc 0 "resumed with --profile 2:5"
check "resumed window" [ -s "$W3/profile/steps_4-5.pt.trace.json" ]

# A window the run never reaches: a warning, no files.
train --workdir "$TMP/w4" --profile 7:8
expect_rc 0 "6 steps with --profile 7:8"
expect_in err "--profile 7:8 recorded nothing: this run trained steps 1 to 6" "window past the end"
check "no profile directory" [ ! -e "$TMP/w4/profile" ]
train --workdir "$W3" --profile 7:8 --config.total_steps 6
expect_rc 0 "a finished run with --profile 7:8"
expect_in err "--profile 7:8 recorded nothing: no step was left to train (the run ends at step 6)" "window missed"
check "no trace for a missed window" bash -c "! ls '$W3/profile' | grep -q steps_7"

# Bad windows: usage errors, before anything is written.
for bad in 3 0:2 4:2 a:b 2:; do
  run "$BVLUA" train "$TMP/cfg.lua" --workdir "$TMP/bad" --profile "$bad"
  expect_rc 2 "--profile $bad"
  expect_in err "--profile" "--profile $bad: named"
  check "--profile $bad: nothing written" [ ! -e "$TMP/bad" ]
done
run "$BVLUA" train "$TMP/cfg.lua" --workdir "$TMP/bad" --profile
expect_rc 2 "--profile without a value"; expect_in err "--profile needs a value" "no value named"

finish
